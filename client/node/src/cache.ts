// The client-agnostic part of the shim: which keys are hot for this client,
// the local cache with admission on second access, local TTL and
// single-caller renewal, invalidation, and the absorbed-demand report. The
// ioredis and node-redis wrappers put it on their command paths.

import * as dns from 'node:dns';
import { HotEvent, Snapshot, TYPE_COLD, TYPE_HOT, TYPE_INVALIDATE, keyString } from './events';
import { ChannelTransport, DEFAULT_CHANNEL, Logger, Subscriber, SubscriberHandler, SubscriberOptions, now } from './subscriber';
import { Arg, writtenKeys } from './writes';

export interface ShimOptions {
  /** The daemon's --channel (default hotsniff:hotkeys). */
  channel?: string;
  /** Where the channel lives (an ioredis or node-redis client); default the cache client. */
  channelClient?: unknown;
  /** Extra "ip:port" addresses whose events apply to this client (NAT, proxies, Services). */
  servers?: string[];
  /** Apply events for any server (only DB and key must match). */
  anyServer?: boolean;
  /** Local expiry of a cached value, counted from when its read was sent (default 50). */
  localTtlMs?: number;
  /** How long past localTtlMs the old value is served while one caller refreshes (default 100). */
  staleGraceMs?: number;
  /** Cached keys (default 10000); keys seen once are bounded by 4× this (at least 1024). */
  maxEntries?: number;
  /** Larger hashes are not cached (default 1000). */
  maxHashFields?: number;
  /** Hot-running mode ends this long after the last hot message (default 120000). */
  hotModeLingerMs?: number;
  /** Send the absorbed-demand report after refresh reads (default true). */
  reportAbsorbed?: boolean;
  logger?: Logger;
  subscriber?: SubscriberOptions;
}

export const KIND_STRING = 1;
export const KIND_HASH = 2;

export const enum Act { Pass, Hit, Fetch }

export const INVAL_REASONS = ['write', 'event', 'tracking', 'cold', 'snapshot', 'flush'] as const;
export const EVICT_REASONS = ['capacity', 'not_hot', 'idle', 'mode_end'] as const;
type Inval = (typeof INVAL_REASONS)[number];
type Evict = (typeof EVICT_REASONS)[number];

/** Entries whose value expired this long ago leave the cache. */
const IDLE_AFTER_MS = 10_000;

/** One cached reply in the client library's raw form; never modified once stored. */
export interface Value {
  expires: number;
  raw: unknown;
  /** Hashes: field (binary string) -> raw value. */
  hidx?: Map<string, unknown>;
  /** What the library needs to tell replies apart (node-redis typeMapping). */
  tag?: unknown;
}

export class CacheEntry {
  hotUntil: number;
  val: Value | null = null;
  refreshing = 0; // start of the one fetch in flight (0: none)
  gen = 0; // moves on every invalidation
  uncacheable = false; // a hash larger than maxHashFields
  hits = 0; // served locally since the last absorbed report
  reportAt: number;
  constructor(readonly key: string, readonly kind: number, hotUntil: number, t: number) {
    this.hotUntil = hotUntil;
    this.reportAt = t;
  }
}

export interface Ticket { e: CacheEntry; gen: number; token: number }

export interface Acquired { act: Act; v?: Value; t?: Ticket }
const PASS: Acquired = { act: Act.Pass };

export interface ClientInfo { host?: string; port?: number; path?: string; db: number }

export class Core implements SubscriberHandler {
  readonly ns: string;
  readonly localTtl: number;
  readonly staleGrace: number;
  readonly maxEntries: number;
  readonly maxHashFields: number;
  readonly linger: number;
  reportAbsorbed: boolean;
  readonly log: Logger;
  sub!: Subscriber;
  active = false;
  closed = false;
  private servers = new Set<string>();
  private hot = new Map<string, number>(); // hot, cacheable keys -> until (0: until cold)
  entries = new Map<string, CacheEntry>();
  private seen = new Set<string>();
  private lastHot = -Infinity;
  private house: NodeJS.Timeout | undefined;
  private lastResolve = 0;
  readonly m = { hits: 0, staleHits: 0, misses: 0, admissions: 0, refreshes: 0, fetchErrors: 0, absorbedReports: 0 };
  readonly invalidations: Record<Inval, number> = { write: 0, event: 0, tracking: 0, cold: 0, snapshot: 0, flush: 0 };
  readonly evictions: Record<Evict, number> = { capacity: 0, not_hot: 0, idle: 0, mode_end: 0 };

  constructor(private info: ClientInfo, private opt: ShimOptions) {
    this.ns = String(info.db || 0);
    this.localTtl = opt.localTtlMs && opt.localTtlMs > 0 ? opt.localTtlMs : 50;
    this.staleGrace = opt.staleGraceMs && opt.staleGraceMs > 0 ? opt.staleGraceMs : 100;
    this.maxEntries = opt.maxEntries && opt.maxEntries > 0 ? opt.maxEntries : 10000;
    this.maxHashFields = opt.maxHashFields && opt.maxHashFields > 0 ? opt.maxHashFields : 1000;
    this.linger = opt.hotModeLingerMs && opt.hotModeLingerMs > 0 ? opt.hotModeLingerMs : 120_000;
    this.reportAbsorbed = opt.reportAbsorbed !== false;
    this.log = opt.logger ?? console;
  }

  async start(transport: ChannelTransport): Promise<void> {
    await this.resolve();
    this.sub = new Subscriber(transport, this, { channel: this.opt.channel || DEFAULT_CHANNEL, logger: this.log, ...this.opt.subscriber });
    this.house = setInterval(() => this.housekeep(), 250);
    this.house.unref();
    await this.sub.start();
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    this.active = false;
    clearInterval(this.house);
    this.entries.clear();
    this.seen.clear();
    await this.sub.close();
  }

  // -- which events apply ---------------------------------------------------
  private async resolve(): Promise<void> {
    const s = new Set<string>((this.opt.servers ?? []).map(normAddr));
    const { host, port, path } = this.info;
    if (!path && host && port) {
      try {
        for (const a of await dns.promises.lookup(host, { all: true })) s.add(normAddr(joinHostPort(a.address, port)));
      } catch (err) {
        this.log.warn(`hotsniff: resolve cache server ${host}; using the configured servers only: ${String(err)}`);
      }
    }
    this.servers = s;
    this.lastResolve = now();
  }

  matches = (e: HotEvent): boolean => {
    if (e.proto !== 'redis' || e.ns !== this.ns || e.prefix) return false;
    if (this.opt.anyServer || e.server === '') return true;
    return this.servers.has(normAddr(e.server));
  };

  // -- subscriber callbacks -------------------------------------------------
  onEvent(e: HotEvent): void {
    if (!this.matches(e)) return;
    if (e.type === TYPE_HOT || e.type === TYPE_COLD) {
      // Ask the hot set rather than trust this one message: another node
      // may still report the key hot after this node's cold.
      const h = this.sub.hotUntil('redis', this.ns, e.key, this.matches);
      if (e.type === TYPE_HOT) this.lastHot = now();
      this.setHot(e.key, h.until, h.hot && h.cacheable);
    } else if (e.type === TYPE_INVALIDATE) {
      this.invalidate(e.key, 'event');
    }
  }

  onSnapshot(_s: Snapshot): void {
    const hot = new Map<string, number>();
    for (const e of this.sub.hotSet()) {
      if (!this.matches(e)) continue;
      const h = this.sub.hotUntil('redis', this.ns, e.key, this.matches);
      if (h.hot && h.cacheable) hot.set(e.key, h.until);
    }
    const t = now();
    if (hot.size > 0) this.lastHot = t;
    this.hot = hot;
    for (const [k, en] of this.entries) {
      const u = hot.get(k);
      if (u === undefined) this.dropKey(k, 'not_hot');
      else en.hotUntil = u;
    }
    // An invalidate may have been among the messages a gap or a reconnect
    // lost: drop the values, keep the hot set.
    for (const en of this.entries.values()) {
      en.gen++;
      en.val = null;
    }
    this.invalidations.snapshot++;
    this.updateMode(t);
  }

  private setHot(key: string, until: number, hot: boolean): void {
    if (hot) {
      this.hot.set(key, until);
      const en = this.entries.get(key);
      if (en) en.hotUntil = until;
    } else {
      this.hot.delete(key);
      this.seen.delete(key);
      if (this.entries.has(key)) {
        this.dropKey(key, 'not_hot');
        this.invalidations.cold++;
      }
    }
    this.updateMode(now());
  }

  private updateMode(t: number): void {
    if (this.closed) return;
    let forever = false;
    for (const u of this.hot.values()) if (u === 0) { forever = true; break; }
    const on = this.hot.size > 0 && (forever || t - this.lastHot < this.linger);
    const was = this.active;
    this.active = on;
    if (was && !on) {
      this.log.info('hotsniff: hot-running mode ended');
      this.evictions.mode_end += this.entries.size;
      for (const en of this.entries.values()) en.gen++;
      this.entries.clear();
      this.seen.clear();
    }
  }

  private housekeep(): void {
    const t = now();
    for (const [k, u] of this.hot) {
      if (u && t >= u) {
        this.hot.delete(k);
        this.seen.delete(k);
        if (this.entries.has(k)) this.dropKey(k, 'not_hot');
      }
    }
    for (const [k, en] of this.entries) {
      if (en.val && t - en.val.expires > IDLE_AFTER_MS) this.dropKey(k, 'idle');
    }
    this.updateMode(t);
    if (t - this.lastResolve > 30_000) void this.resolve();
  }

  // -- the cache -----------------------------------------------------------------
  acquire(key: string, kind: number, t: number): Acquired {
    const en = this.entries.get(key);
    if (en === undefined) return this.admit(key, kind, t);
    if (en.kind !== kind || en.uncacheable) {
      this.m.misses++;
      return PASS;
    }
    if (en.hotUntil && t >= en.hotUntil) {
      this.dropKey(key, 'not_hot');
      this.m.misses++;
      return PASS;
    }
    const v = en.val;
    if (v !== null && t < v.expires) {
      this.m.hits++;
      en.hits++;
      return { act: Act.Hit, v };
    }
    // Expired or invalidated: exactly one caller refreshes; a refresh
    // hanging past staleGrace gives its token to the next caller.
    if (en.refreshing === 0 || t - en.refreshing > this.staleGrace) {
      en.refreshing = t;
      this.m.misses++;
      this.m.refreshes++;
      return { act: Act.Fetch, t: { e: en, gen: en.gen, token: t } };
    }
    if (v !== null && t < v.expires + this.staleGrace) {
      this.m.staleHits++;
      en.hits++;
      return { act: Act.Hit, v };
    }
    this.m.misses++;
    return PASS;
  }

  private admit(key: string, kind: number, t: number): Acquired {
    const until = this.hot.get(key);
    if (until === undefined || (until && t >= until)) return PASS;
    this.m.misses++;
    if (!this.seen.has(key)) {
      // A doorkeeper, not a history: start over when full.
      if (this.seen.size >= Math.max(4 * this.maxEntries, 1024)) this.seen.clear();
      this.seen.add(key);
      return PASS;
    }
    this.seen.delete(key);
    if (this.entries.size >= this.maxEntries) this.evictOne(t);
    const en = new CacheEntry(key, kind, until, t);
    en.refreshing = t;
    this.entries.set(key, en);
    this.m.admissions++;
    this.m.refreshes++;
    return { act: Act.Fetch, t: { e: en, gen: en.gen, token: t } };
  }

  private evictOne(t: number): void {
    // Map order is insertion order: start at a random offset among the
    // first few so eviction is not strictly FIFO, and prefer an expired value.
    let victim: string | undefined;
    let n = 0;
    const skip = Math.floor(Math.random() * Math.min(8, this.entries.size));
    for (const [k, en] of this.entries) {
      if (n++ < skip) continue;
      if (victim === undefined) victim = k;
      if (en.val === null || t > en.val.expires + this.staleGrace) {
        victim = k;
        break;
      }
      if (n >= skip + 8) break;
    }
    if (victim !== undefined) {
      this.entries.get(victim)!.gen++;
      this.entries.delete(victim);
      this.evictions.capacity++;
    }
  }

  /** Installs a fetched value unless the key was invalidated since the
   * fetch was sent, and gives the refresh token back. The value expires
   * localTtl after the fetch was sent: what bounds staleness is the age of
   * the read at the server. */
  store(tk: Ticket, v: Value | null): void {
    const en = tk.e;
    if (v !== null && en.gen === tk.gen) {
      v.expires = tk.token + this.localTtl;
      en.val = v;
    }
    if (en.refreshing === tk.token) en.refreshing = 0;
  }

  release(tk: Ticket | undefined): void {
    if (tk && tk.e.refreshing === tk.token) tk.e.refreshing = 0;
  }

  invalidate(key: string, reason: Inval): void {
    const en = this.entries.get(key);
    if (en) {
      en.gen++;
      en.val = null;
      this.invalidations[reason]++;
    }
  }

  invalidateAll(reason: Inval): void {
    for (const en of this.entries.values()) {
      en.gen++;
      en.val = null;
    }
    this.invalidations[reason]++;
  }

  private dropKey(key: string, reason: Evict): void {
    const en = this.entries.get(key);
    if (en) {
      en.gen++;
      en.val = null;
      this.entries.delete(key);
      this.evictions[reason]++;
    }
  }

  /** Drops what a command writes; returns whether it writes anything (then
   * call again after its reply). */
  invalidateWritten(args: readonly Arg[]): boolean {
    const { keys, all } = writtenKeys(args);
    if (all) {
      this.invalidateAll('flush');
      return true;
    }
    for (const k of keys) this.invalidate(keyString(k), 'write');
    return keys.length > 0;
  }

  // -- the absorbed-demand report -------------------------------------------------
  /** The ECHO argument to pipeline right after this refresh read, if any. */
  report(tk: Ticket, t: number): { msg: Buffer; hits: number } | null {
    if (!this.reportAbsorbed || tk.e.hits <= 0) return null;
    const window = Math.max(1, Math.floor(t - tk.e.reportAt));
    const msg = Buffer.concat([Buffer.from(`hotsniff:absorbed:1 ${tk.e.hits} ${window} `), Buffer.from(tk.e.key, 'latin1')]);
    return { msg, hits: tk.e.hits };
  }

  reported(tk: Ticket, hits: number, t: number): void {
    tk.e.hits -= hits;
    tk.e.reportAt = t;
    this.m.absorbedReports++;
  }

  refused(err: unknown): void {
    if (!this.reportAbsorbed) return;
    this.reportAbsorbed = false;
    this.log.warn(`hotsniff: absorbed-demand report refused by the server; not reporting again: ${String(err)}`);
  }

  // -- introspection ------------------------------------------------------------
  isHot(key: string | Buffer): boolean {
    const u = this.hot.get(keyString(key));
    return u !== undefined && (u === 0 || now() < u);
  }

  stats() {
    return {
      ...this.m,
      entries: this.entries.size,
      hotKeys: this.hot.size,
      hotMode: this.active,
      invalidations: { ...this.invalidations },
      evictions: { ...this.evictions },
      channel: { ...this.sub.stats },
    };
  }
}

function joinHostPort(host: string, port: number | string): string {
  return host.includes(':') ? `[${host}]:${port}` : `${host}:${port}`;
}

/** ip:port written one way (IPv4-mapped IPv6 as IPv4). */
export function normAddr(a: string): string {
  const i = a.lastIndexOf(':');
  if (i < 0) return a;
  let host = a.slice(0, i).replace(/^\[|\]$/g, '');
  const port = a.slice(i + 1);
  if (host.toLowerCase().startsWith('::ffff:') && host.includes('.')) host = host.slice(7);
  return joinHostPort(host, port);
}
