// Follows the hot-key channel: subscribe, load the snapshot, apply messages
// checking each publisher's seq, reload the snapshot on a gap, a restart or
// a reconnect. The procedure is docs/channel-protocol.md §5.

import { performance } from 'node:perf_hooks';
import {
  DecodeError, HotEvent, SOURCE_MANUAL, Snapshot, TYPE_COLD, TYPE_HOT, decodeMessage, decodeSnapshot,
} from './events';

export const DEFAULT_CHANNEL = 'hotsniff:hotkeys';

export function snapshotKey(channel: string): string {
  return channel + ':snapshot';
}

/** Logger is console-like; the shim logs rarely (state changes, once per outage). */
export interface Logger {
  info(msg: string, ...args: unknown[]): void;
  warn(msg: string, ...args: unknown[]): void;
  debug?(msg: string, ...args: unknown[]): void;
}

/** What the subscriber needs from a Redis client library. */
export interface ChannelTransport {
  /** Subscribes; calls onSubscribed each time the subscription is
   * (re)established, onMessage for each message, onLost when the link drops. */
  start(channel: string, h: { onSubscribed(): void; onMessage(p: string | Buffer): void; onLost(err: unknown): void }): Promise<void>;
  get(key: string): Promise<string | Buffer | null>;
  close(): Promise<void>;
}

export interface SubscriberHandler {
  onSnapshot(s: Snapshot): void;
  onEvent(e: HotEvent): void;
}

export interface SubscriberOptions {
  channel?: string;
  logSize?: number;
  retryDelayMs?: number;
  maxRetries?: number;
  restartWindow?: number;
  logger?: Logger;
}

export const now = (): number => performance.now();

function entryId(e: HotEvent): string {
  // Manual entries are shared by every host: a remove from anywhere ends an
  // add from anywhere.
  const node = e.source === SOURCE_MANUAL ? '' : e.node;
  return [node, e.proto, e.server, e.ns, e.prefix ? '1' : '0', e.key].join('\0');
}

const lookupId = (proto: string, ns: string, key: string): string => proto + '\0' + ns + '\0' + key;

interface Entry { ev: HotEvent; expires: number } // expires 0: until cold

/** The live entries, by entry id and by (proto, ns, key). */
export class HotSet {
  m = new Map<string, Entry>();
  lookup = new Map<string, Set<string>>();

  put(e: HotEvent, t: number): void {
    const id = entryId(e);
    if (!this.m.has(id)) {
      const l = lookupId(e.proto, e.ns, e.key);
      let ids = this.lookup.get(l);
      if (!ids) this.lookup.set(l, (ids = new Set()));
      ids.add(id);
    }
    // Expiry counts from arrival (local clock), never from e.ts.
    this.m.set(id, { ev: e, expires: e.ttlMs > 0 ? t + e.ttlMs : 0 });
  }

  del(id: string): void {
    const en = this.m.get(id);
    if (!en) return;
    this.m.delete(id);
    const l = lookupId(en.ev.proto, en.ev.ns, en.ev.key);
    const ids = this.lookup.get(l);
    if (ids) {
      ids.delete(id);
      if (ids.size === 0) this.lookup.delete(l);
    }
  }

  apply(e: HotEvent, t: number): void {
    if (e.type === TYPE_HOT) this.put(e, t);
    else if (e.type === TYPE_COLD) this.del(entryId(e));
  }

  expire(t: number): void {
    for (const [id, en] of this.m) if (en.expires && t >= en.expires) this.del(id);
  }

  /** Over the live entries match accepts: whether the key is hot, until
   * when (0: until cold), and whether some entry allows caching (none of
   * them saying cacheable:false). */
  hotUntil(proto: string, ns: string, key: string, t: number, match?: (e: HotEvent) => boolean): { hot: boolean; until: number; cacheable: boolean } {
    let until = 0, hot = false, cacheable = false, forever = false;
    const ids = this.lookup.get(lookupId(proto, ns, key));
    if (ids) {
      for (const id of ids) {
        const en = this.m.get(id)!;
        if (en.expires && t >= en.expires) continue;
        if (match && !match(en.ev)) continue;
        hot = true;
        if (en.ev.cacheable) cacheable = true;
        if (en.expires === 0) forever = true;
        else if (en.expires > until) until = en.expires;
      }
    }
    return { hot, until: forever ? 0 : until, cacheable };
  }

  live(t: number): HotEvent[] {
    const out: HotEvent[] = [];
    for (const en of this.m.values()) if (!en.expires || t < en.expires) out.push(en.ev);
    return out;
  }
}

type Item = { kind: 'subscribed' } | { kind: 'message'; p: string | Buffer } | { kind: 'retry' };

export class Subscriber {
  readonly channel: string;
  set = new HotSet();
  stats = { messages: 0, stale: 0, invalid: 0, gaps: 0, restarts: 0, reloads: 0, reloadErrors: 0, reconnects: 0, logDropped: 0 };
  /** Resolves once the first snapshot was loaded. */
  readonly synced: Promise<void>;

  private last = new Map<string, number>();
  private pending = new Map<string, number>();
  private logbuf: HotEvent[] = [];
  private logFloor = new Map<string, number>();
  private retries = 0;
  private lastReload = -Infinity;
  private retryTimer: NodeJS.Timeout | undefined;
  private expireTimer: NodeJS.Timeout | undefined;
  private reloadFailing = false;
  private failing = false;
  private subscribedOnce = false;
  private queue: Item[] = [];
  private pumping = false;
  private closed = false;
  private resolveSynced!: () => void;
  private readonly logSize: number;
  private readonly retryDelay: number;
  private readonly maxRetries: number;
  private readonly restartWindow: number;
  private readonly log: Logger;

  constructor(private transport: ChannelTransport, private handler: SubscriberHandler, opt: SubscriberOptions = {}) {
    this.channel = opt.channel || DEFAULT_CHANNEL;
    this.logSize = Math.max(opt.logSize ?? 10000, 1);
    this.retryDelay = opt.retryDelayMs ?? 250;
    this.maxRetries = opt.maxRetries ?? 20;
    this.restartWindow = opt.restartWindow ?? 2 ** 20;
    this.log = opt.logger ?? console;
    this.synced = new Promise((r) => (this.resolveSynced = r));
  }

  async start(): Promise<void> {
    this.expireTimer = setInterval(() => this.set.expire(now()), 1000);
    this.expireTimer.unref();
    await this.transport.start(this.channel, {
      onSubscribed: () => this.push({ kind: 'subscribed' }),
      onMessage: (p) => this.push({ kind: 'message', p }),
      onLost: (err) => {
        if (!this.failing && !this.closed) this.log.warn(`hotsniff: hot-key subscription lost; reconnecting: ${String(err)}`);
        this.failing = true;
      },
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.expireTimer);
    await this.transport.close();
  }

  hotUntil(proto: string, ns: string, key: string, match?: (e: HotEvent) => boolean) {
    return this.set.hotUntil(proto, ns, key, now(), match);
  }

  hotSet(): HotEvent[] {
    return this.set.live(now());
  }

  // Messages and reloads are handled strictly in order: a reload's GET is
  // awaited before the next message is applied.
  private push(it: Item): void {
    if (this.closed) return;
    this.queue.push(it);
    if (!this.pumping) void this.pump();
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const it = this.queue.shift()!;
        if (it.kind === 'subscribed') {
          if (this.failing || this.subscribedOnce) {
            this.stats.reconnects++;
            this.log.info('hotsniff: hot-key subscription restored; reloading snapshot');
          }
          this.failing = false;
          this.subscribedOnce = true;
          // Anything may have been missed while away.
          await this.reload();
        } else if (it.kind === 'retry') {
          await this.reload();
        } else if (this.onMessage(it.p)) {
          await this.reload();
        }
      }
    } finally {
      this.pumping = false;
    }
  }

  /** Applies one message; reports whether to reload the snapshot now. */
  private onMessage(p: string | Buffer): boolean {
    this.stats.messages++;
    let evs: HotEvent[];
    try {
      evs = decodeMessage(p);
    } catch (err) {
      if (!(err instanceof DecodeError)) throw err;
      this.stats.invalid++;
      return false;
    }
    let reload = false;
    for (const e of evs) reload = this.applyOne(e) || reload;
    return reload;
  }

  private applyOne(e: HotEvent): boolean {
    const t = now();
    let reload = false;
    const last = this.last.get(e.node);
    if (last === undefined) {
      this.last.set(e.node, e.seq);
    } else if (e.seq <= last) {
      if (last - e.seq <= this.restartWindow) {
        this.stats.stale++;
        return false;
      }
      this.stats.restarts++;
      this.log.info(`hotsniff: hot-key publisher ${JSON.stringify(e.node)} restarted`);
      this.forget(e.node);
      this.last.set(e.node, e.seq);
      reload = this.want(e.node, e.seq - 1);
    } else if (e.seq > last + 1) {
      this.stats.gaps++;
      this.last.set(e.node, e.seq);
      reload = this.want(e.node, e.seq - 1);
    } else {
      this.last.set(e.node, e.seq);
    }
    this.remember(e);
    this.set.apply(e, t);
    this.handler.onEvent(e);
    return reload;
  }

  private remember(e: HotEvent): void {
    // Every message is kept, not only those after a gap: a reload caused
    // by one node must not roll another node's entries back.
    if (this.logbuf.length >= this.logSize) {
      const n = Math.max(Math.floor(this.logSize / 4), 1);
      for (const old of this.logbuf.slice(0, n)) this.logFloor.set(old.node, Math.max(this.logFloor.get(old.node) ?? 0, old.seq));
      this.logbuf.splice(0, n);
      this.stats.logDropped += n;
    }
    this.logbuf.push(e);
  }

  private forget(node: string): void {
    this.logbuf = this.logbuf.filter((x) => x.node !== node);
    this.logFloor.delete(node);
  }

  private want(node: string, seq: number): boolean {
    if (seq > (this.pending.get(node) ?? 0)) {
      this.pending.set(node, seq);
      this.retries = 0;
    }
    if (now() - this.lastReload >= this.retryDelay) return true;
    this.scheduleRetry(this.lastReload + this.retryDelay - now());
    return false;
  }

  private scheduleRetry(ms: number): void {
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(() => this.push({ kind: 'retry' }), Math.max(ms, 0));
    this.retryTimer.unref();
  }

  private async reload(): Promise<void> {
    this.stats.reloads++;
    this.lastReload = now();
    clearTimeout(this.retryTimer);
    let snap: Snapshot;
    try {
      snap = decodeSnapshot(await this.transport.get(snapshotKey(this.channel)));
    } catch (err) {
      this.stats.reloadErrors++;
      if (!this.reloadFailing) this.log.warn(`hotsniff: reload hot-key snapshot; retrying: ${String(err)}`);
      this.reloadFailing = true;
      if (!this.closed) this.scheduleRetry(this.retryDelay);
      return;
    }
    this.reloadFailing = false;
    const t = now();
    const hs = new HotSet();
    for (const e of snap.keys) hs.put(e, t);
    const sec = snap.nodes;
    for (const e of this.logbuf) {
      const q = sec.get(e.node);
      if (q !== undefined && e.seq > q) hs.apply(e, t);
    }
    for (const [n, q] of sec) {
      const l = this.last.get(n);
      if (l === undefined || q > l) this.last.set(n, q);
      const f = this.logFloor.get(n) ?? 0;
      // Messages between the section and the log are gone: wait for a newer section.
      if (f > q) this.pending.set(n, Math.max(this.pending.get(n) ?? 0, f));
    }
    for (const [n, w] of [...this.pending]) {
      const q = sec.get(n);
      if (q === undefined || q >= w) this.pending.delete(n);
    }
    this.set = hs;
    if (this.pending.size === 0) {
      this.retries = 0;
    } else if (++this.retries > this.maxRetries) {
      this.log.warn('hotsniff: hot-key snapshot never caught up with the channel; carrying on');
      this.pending.clear();
      this.logFloor.clear();
      this.retries = 0;
    } else {
      this.scheduleRetry(this.retryDelay);
    }
    this.handler.onSnapshot(snap);
    this.resolveSynced();
  }
}
