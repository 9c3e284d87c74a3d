// hotsniff client shim for ioredis and node-redis: serves hot keys from
// local memory. See docs/client-shim.md in the hotsniff repository.
//
//   const redis = new Redis({ host: 'cache-1' });
//   const shim = await install(redis, { channelClient: new Redis({ host: 'events' }) });
//   ...
//   await shim.close();

import { Core, ShimOptions } from './cache';
import { installIoredis, ioredisInfo, ioredisTransport, isIoredis } from './ioredis';
import { registerMetrics } from './metrics';
import { installNodeRedis, isNodeRedis, nodeRedisInfo, nodeRedisTransport } from './noderedis';
import { ChannelTransport } from './subscriber';

export type { ShimOptions } from './cache';
export { decodeMessage, decodeSnapshot } from './events';
export type { HotEvent, Snapshot } from './events';
export { DEFAULT_CHANNEL } from './subscriber';
export { writtenKeys } from './writes';

/* eslint-disable @typescript-eslint/no-explicit-any */

function transportFor(c: any): ChannelTransport {
  if (isIoredis(c)) return ioredisTransport(c);
  if (isNodeRedis(c)) return nodeRedisTransport(c);
  throw new TypeError('hotsniff-shim: channelClient is neither an ioredis nor a node-redis client');
}

export class Shim {
  /** Resolves once the first snapshot was loaded. */
  readonly synced: Promise<void>;
  private constructor(private core: Core, private uninstall: () => void) {
    this.synced = core.sub.synced;
  }

  /** @internal */
  static async create(client: any, opt: ShimOptions): Promise<Shim> {
    let core: Core;
    let uninstall: () => void;
    if (isIoredis(client)) {
      core = new Core(ioredisInfo(client), opt);
      uninstall = installIoredis(client, core);
    } else if (isNodeRedis(client)) {
      core = new Core(nodeRedisInfo(client), opt);
      uninstall = installNodeRedis(client, core);
    } else {
      throw new TypeError('hotsniff-shim: install takes an ioredis or a node-redis client');
    }
    try {
      await core.start(transportFor(opt.channelClient ?? client));
    } catch (err) {
      uninstall();
      throw err;
    }
    return new Shim(core, uninstall);
  }

  /** Stops following the channel, empties the cache and unwraps the client. */
  async close(): Promise<void> {
    this.uninstall();
    await this.core.close();
  }

  /** Whether key is hot (and cacheable) for this client now. */
  isHot(key: string | Buffer): boolean {
    return this.core.isHot(key);
  }

  /** The counters behind the hotsniff_client_* metrics. */
  stats() {
    return this.core.stats();
  }

  /** Registers hotsniff_client_* metrics with prom-client (default registry if none given). */
  registerMetrics(registry?: unknown): void {
    registerMetrics(this.core, registry);
  }
}

/** Follows the hot-key channel and serves hot keys of client (ioredis or
 * node-redis, connected or not) from local memory. Resolves once subscribed;
 * `shim.synced` resolves when the first snapshot is loaded. */
export function install(client: unknown, opt: ShimOptions = {}): Promise<Shim> {
  return Shim.create(client, opt);
}
