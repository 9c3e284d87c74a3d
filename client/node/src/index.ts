// hotsniff client shim for ioredis and node-redis: serves hot keys from
// local memory. See docs/client-shim.md in the hotsniff repository.
//
//   const redis = new Redis({ host: 'cache-1' });
//   const shim = await install(redis, { channelClient: new Redis({ host: 'events' }) });
//   ...
//   await shim.close();

import { Core, ShimOptions } from './cache';
import {
  installIoredis, installIoredisCluster, ioredisClusterInfo, ioredisInfo, ioredisTransport, isIoredis, isIoredisCluster,
} from './ioredis';
import { registerMetrics } from './metrics';
import {
  installNodeRedis, installNodeRedisCluster, isNodeRedis, isNodeRedisCluster, isNodeRedisPool, nodeRedisClusterInfo, nodeRedisDb,
  nodeRedisInfo, nodeRedisTransport,
} from './noderedis';
import { ChannelTransport } from './subscriber';

export type { ShimOptions } from './cache';
export { decodeMessage, decodeSnapshot } from './events';
export type { HotEvent, Snapshot } from './events';
export { DEFAULT_CHANNEL } from './subscriber';
export { writtenKeys } from './writes';

/* eslint-disable @typescript-eslint/no-explicit-any */

/** What install takes, for the one message that refuses anything else. */
export const SUPPORTED_CLIENTS = 'an ioredis Redis or Cluster, or a node-redis client (createClient) or cluster (createCluster)';

function transportFor(c: any): ChannelTransport {
  if (isIoredis(c) || isIoredisCluster(c)) return ioredisTransport(c);
  if (isNodeRedis(c) || isNodeRedisCluster(c)) return nodeRedisTransport(c);
  throw new TypeError(`hotsniff-shim: channelClient must be ${SUPPORTED_CLIENTS}`);
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
    if (isNodeRedisPool(client)) {
      throw new TypeError(`hotsniff-shim: a node-redis client pool (createClientPool) is not supported; install takes ${SUPPORTED_CLIENTS}`);
    }
    // Refused before anything is wrapped or connected.
    if (!isIoredis(client) && !isIoredisCluster(client) && !isNodeRedis(client) && !isNodeRedisCluster(client)) {
      throw new TypeError(`hotsniff-shim: install takes ${SUPPORTED_CLIENTS}`);
    }
    const transport = transportFor(opt.channelClient ?? client);
    if (isIoredis(client)) {
      core = new Core(ioredisInfo(client), opt);
      uninstall = installIoredis(client, core);
    } else if (isIoredisCluster(client)) {
      core = new Core(ioredisClusterInfo(client), opt);
      uninstall = installIoredisCluster(client, core);
    } else if (isNodeRedis(client)) {
      const db = await nodeRedisDb(client);
      core = new Core(nodeRedisInfo(client, db), opt);
      uninstall = installNodeRedis(client, core, db);
    } else if (isNodeRedisCluster(client)) {
      core = new Core(nodeRedisClusterInfo(client), opt);
      uninstall = installNodeRedisCluster(client, core);
    } else {
      throw new TypeError(`hotsniff-shim: install takes ${SUPPORTED_CLIENTS}`);
    }
    try {
      await core.start(transport);
    } catch (err) {
      uninstall();
      // Nothing left open: the channel connection is closed too.
      await core.close().catch(() => {});
      await transport.close().catch(() => {});
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
