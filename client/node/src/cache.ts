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
  /** Bytes all cached values may hold together, estimated (default 64 MiB). */
  maxBytes?: number;
  /** A larger value (key included) is not cached (default 1 MiB). */
  maxValueBytes?: number;
  /** The daemons' shared channel secret (--channel-secret-file): only
   * messages and snapshots signed with it are accepted. */
  channelSecret?: string | Buffer;
  /** Hot-running mode ends this long after the last hot message (default 120000). */
  hotModeLingerMs?: number;
  /** Send the absorbed-demand report after refresh reads (default true). */
  reportAbsorbed?: boolean;
  logger?: Logger;
  subscriber?: SubscriberOptions;
}

/** Commands that change the connection's state (DB, transaction, auth):
 * a pipeline holding one is sent whole. */
const SESSION = new Set(['SELECT', 'MULTI', 'EXEC', 'DISCARD', 'WATCH', 'UNWATCH', 'RESET', 'AUTH', 'HELLO', 'CLIENT', 'SWAPDB', 'QUIT']);

export const KIND_STRING = 1;
export const KIND_HASH = 2;

export const enum Act { Pass, Hit, Fetch }

export const INVAL_REASONS = ['write', 'event', 'tracking', 'cold', 'snapshot', 'flush'] as const;
export const EVICT_REASONS = ['capacity', 'not_hot', 'idle', 'mode_end', 'too_large'] as const;
type Inval = (typeof INVAL_REASONS)[number];
type Evict = (typeof EVICT_REASONS)[number];

/** Entries whose value expired this long ago leave the cache. */
const IDLE_AFTER_MS = 10_000;
/** How long a "too many fields" verdict on a hash is remembered by key,
 * across its entry being dropped and re-admitted (as the Go shim). */
export const BIG_HASH_MEMORY_MS = 60_000;

/** An estimate of the memory a reply holds (bytes of strings and buffers,
 * plus a little per element). */
export function replyBytes(raw: unknown): number {
  if (raw === null || raw === undefined) return 8;
  if (typeof raw === 'string') return raw.length + 16;
  if (Buffer.isBuffer(raw)) return raw.length + 16;
  if (Array.isArray(raw)) {
    let n = 16;
    for (const x of raw) n += replyBytes(x);
    return n;
  }
  if (raw instanceof Map) {
    let n = 16;
    for (const [k, v] of raw) n += replyBytes(k) + replyBytes(v);
    return n;
  }
  if (typeof raw === 'object') {
    let n = 16;
    for (const [k, v] of Object.entries(raw as Record<string, unknown>)) n += k.length + 16 + replyBytes(v);
    return n;
  }
  return 16;
}

/** One cached reply in the client library's raw form; never modified once stored. */
export interface Value {
  expires: number;
  raw: unknown;
  /** Hashes: field (binary string) -> raw value. */
  hidx?: Map<string, unknown>;
  /** What the library needs to tell replies apart (node-redis typeMapping). */
  tag?: unknown;
  /** On a cluster: the master the value was read from (the owner of the
   * key's slot in the library's slot map when its read was sent). */
  src?: string;
}

export class CacheEntry {
  hotUntil: number;
  val: Value | null = null;
  refreshing = 0; // start of the one fetch in flight (0: none)
  /** That fetch's outcome, when it is offered (Core.share): what a read
   * arriving while it is in flight, with no value to serve, answers with.
   * A GET's: its reply; a hash's: the hash its HGETALL read (a Value). */
  shared: Shared | null = null;
  /** A hash: an HGETALL of the key has been answered with a hash before, so
   * its refreshes are shared (an HGETALL this client may not send, an ACL
   * refusing it, never answers another hash read). */
  whole = false;
  gen = 0; // moves on every invalidation
  uncacheable = false; // a hash larger than maxHashFields, or a value larger than maxValueBytes
  bytes = 0; // the value's estimated size, counted in Core.bytes
  sized = false; // a hash's HLEN was checked before its first fetch
  hits = 0; // served locally since the last absorbed report
  reportAt: number;
  constructor(readonly key: string, readonly kind: number, hotUntil: number, t: number) {
    this.hotUntil = hotUntil;
    this.reportAt = t;
  }
}

export interface Ticket { e: CacheEntry; gen: number; token: number; src?: string }

/** A refresh in flight: its outcome, and what it was sent at. */
interface Shared { token: number; gen: number; src?: string; tag?: unknown; reply: Promise<unknown> }

export interface Acquired {
  act: Act;
  v?: Value;
  t?: Ticket;
  /** Act.Hit from acquireShared: answer with the outcome of the refresh in
   * flight (a GET: the reply; a hash read: from the Value, as a hit, or by
   * its own command if that is null: not a hash). */
  shared?: Promise<unknown>;
  /** From decide: a pass only because another caller's fetch of this entry
   * is in flight and there is no value to serve (uncounted). */
  busy?: CacheEntry;
}
const PASS: Acquired = { act: Act.Pass };

export interface ClientInfo {
  host?: string; port?: number; path?: string; db: number;
  /** A cluster's node addresses (host:port) as the library knows them now. */
  nodes?: () => string[];
}

export class Core implements SubscriberHandler {
  readonly ns: string;
  readonly localTtl: number;
  readonly staleGrace: number;
  readonly maxEntries: number;
  readonly maxHashFields: number;
  readonly maxBytes: number;
  readonly maxValueBytes: number;
  /** The DB the cached values come from: a read is served only through a
   * connection on it. */
  readonly db: number;
  /** Estimated bytes of the cached values. */
  bytes = 0;
  private big = new Map<string, number>(); // hashes found too big -> verdict valid until
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
  private lastYield = 0;
  // waitHits: of hits, GETs and hash reads answered from another caller's
  // refresh in flight (acquireShared).
  readonly m = { hits: 0, staleHits: 0, waitHits: 0, misses: 0, admissions: 0, refreshes: 0, fetchErrors: 0, absorbedReports: 0, uncacheable: 0 };
  readonly invalidations: Record<Inval, number> = { write: 0, event: 0, tracking: 0, cold: 0, snapshot: 0, flush: 0 };
  readonly evictions: Record<Evict, number> = { capacity: 0, not_hot: 0, idle: 0, mode_end: 0, too_large: 0 };

  constructor(private info: ClientInfo, private opt: ShimOptions) {
    this.db = info.db || 0;
    this.ns = String(this.db);
    this.localTtl = opt.localTtlMs && opt.localTtlMs > 0 ? opt.localTtlMs : 50;
    this.staleGrace = opt.staleGraceMs && opt.staleGraceMs > 0 ? opt.staleGraceMs : 100;
    this.maxEntries = opt.maxEntries && opt.maxEntries > 0 ? opt.maxEntries : 10000;
    this.maxHashFields = opt.maxHashFields && opt.maxHashFields > 0 ? opt.maxHashFields : 1000;
    this.maxBytes = opt.maxBytes && opt.maxBytes > 0 ? opt.maxBytes : 64 << 20;
    this.maxValueBytes = opt.maxValueBytes && opt.maxValueBytes > 0 ? opt.maxValueBytes : 1 << 20;
    this.linger = opt.hotModeLingerMs && opt.hotModeLingerMs > 0 ? opt.hotModeLingerMs : 120_000;
    this.reportAbsorbed = opt.reportAbsorbed !== false;
    this.log = opt.logger ?? console;
  }

  async start(transport: ChannelTransport): Promise<void> {
    await this.resolve();
    const sec = this.opt.channelSecret;
    const secret = sec === undefined ? undefined : Buffer.isBuffer(sec) ? sec : Buffer.from(sec, 'utf8');
    this.sub = new Subscriber(transport, this, { channel: this.opt.channel || DEFAULT_CHANNEL, logger: this.log, secret, ...this.opt.subscriber });
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
    this.bytes = 0;
    this.seen.clear();
    if (this.sub) await this.sub.close();
  }

  // -- which events apply ---------------------------------------------------
  private async resolve(): Promise<void> {
    const s = new Set<string>((this.opt.servers ?? []).map(normAddr));
    const { host, port, path } = this.info;
    const targets: [string, number | string][] = [];
    if (!path && host && port) targets.push([host, port]);
    if (this.info.nodes) {
      for (const a of this.info.nodes()) {
        const i = a.lastIndexOf(':');
        if (i > 0) targets.push([a.slice(0, i).replace(/^\[|\]$/g, ''), a.slice(i + 1)]);
      }
    }
    for (const [h, p] of targets) {
      try {
        for (const a of await dns.promises.lookup(h, { all: true })) s.add(normAddr(joinHostPort(a.address, p)));
      } catch (err) {
        this.log.warn(`hotsniff: resolve cache server ${h}; using the other known addresses: ${String(err)}`);
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
    // A reload (a gap, a publisher restart, a reconnect) never empties the
    // cache: keys still hot keep their values (an invalidate lost in a gap
    // is covered by the local TTL, as a write no one reported is); only
    // keys absent from the reloaded hot set go.
    for (const [k, en] of this.entries) {
      const u = hot.get(k);
      if (u === undefined) {
        this.dropKey(k, 'not_hot');
        this.invalidations.snapshot++;
      } else en.hotUntil = u;
    }
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

  /** The clock hot entries lapse by: it stands still while the channel is
   * down, so held keys are served on through an outage. */
  private hclock(t: number): number {
    return this.sub === undefined || this.sub.up ? t : this.sub.clock();
  }

  private updateMode(t: number): void {
    if (this.closed) return;
    t = this.hclock(t);
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
      this.bytes = 0;
      this.seen.clear();
    }
  }

  private housekeep(): void {
    const t = now();
    const h = this.hclock(t);
    for (const [k, u] of this.hot) {
      if (u && h >= u) {
        this.hot.delete(k);
        this.seen.delete(k);
        if (this.entries.has(k)) this.dropKey(k, 'not_hot');
      }
    }
    for (const [k, en] of this.entries) {
      if (en.val && t - en.val.expires > IDLE_AFTER_MS) this.dropKey(k, 'idle');
    }
    for (const [k, u] of this.big) if (t >= u) this.big.delete(k);
    this.updateMode(t);
    if (t - this.lastResolve > 30_000) void this.resolve();
  }

  /** Whether this hit should be answered on the next turn of the event
   * loop (setImmediate) instead of at once: a local hit needs no I/O, so a
   * loop of awaited hits would never let the loop read the channel (an
   * invalidate) or a refresh's reply. Once a millisecond is enough. */
  shouldYield(t: number): boolean {
    if (t - this.lastYield < 1) return false;
    this.lastYield = t;
    return true;
  }

  // -- the cache -----------------------------------------------------------------
  /** What a read of key may do now. src (clusters only) is the master the
   * library would send it to: a value read from another master (the key's
   * slot has moved since) is not served; one caller refreshes it there. */
  acquire(key: string, kind: number, t: number, src?: string): Acquired {
    const a = this.decide(key, kind, t, src);
    if (a.busy === undefined) return a;
    this.m.misses++;
    return PASS;
  }

  /**
   * acquire for a read of one key alone (a GET; an HGET, HMGET or
   * HGETALL). Where acquire would send it to Redis because another caller's
   * refresh of the key is in flight and there is no value to serve (an
   * invalidation dropped it), it answers from that refresh
   * (Acquired.shared), so that after a write to a hot key its readers cost
   * the server one read, not one each. Only a refresh sent since the key's
   * last invalidation, to the same master, in the same reply form (tag),
   * and at most staleGrace before this read: the staleness bound is a
   * refresh's. The read sends nothing later than it was issued (the
   * libraries send commands in call order); a reply that is an error is
   * this read's error too. A hash read is answered from the hash the
   * refresh's HGETALL read, as a hit on the cached hash is, whether or not
   * it is then stored (only a reply that is no hash at all, which HGETALL
   * never gives, leaves it to send its own command then, as the refresher
   * does). MGETs and pipelines never share.
   */
  acquireShared(key: string, kind: number, t: number, src?: string, tag?: unknown): Acquired {
    const a = this.decide(key, kind, t, src);
    const en = a.busy;
    if (en === undefined) return a;
    const sh = en.shared;
    if (sh !== null && sh.token === en.refreshing && sh.gen === en.gen && sh.src === src && sh.tag === tag &&
      t - sh.token <= this.staleGrace) {
      this.m.hits++;
      this.m.waitHits++;
      en.hits++;
      return { act: Act.Hit, shared: sh.reply };
    }
    this.m.misses++;
    return PASS;
  }

  /** Offers a refresh's outcome to the reads of its key that arrive while it
   * is in flight (acquireShared); tag: the reply form it was asked in. Call
   * it once the read is sent. A GET's reply is offered as it is; a hash's
   * (reply: the Value it read, null if not a hash) only once an HGETALL of
   * the key has been answered with a hash (CacheEntry.whole). */
  share(tk: Ticket, reply: Promise<unknown>, tag?: unknown): void {
    if (tk.e.kind === KIND_HASH && !tk.e.whole) return;
    tk.e.shared = { token: tk.token, gen: tk.gen, src: tk.src, tag, reply };
  }

  private decide(key: string, kind: number, t: number, src?: string): Acquired {
    const en = this.entries.get(key);
    if (en === undefined) return this.admit(key, kind, t, src);
    if (en.kind !== kind || en.uncacheable) {
      this.m.misses++;
      return PASS;
    }
    if (en.hotUntil && this.hclock(t) >= en.hotUntil) {
      this.dropKey(key, 'not_hot');
      this.m.misses++;
      return PASS;
    }
    let v = en.val;
    if (v !== null && v.src !== src) v = null;
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
      return { act: Act.Fetch, t: { e: en, gen: en.gen, token: t, src } };
    }
    if (v !== null && t < v.expires + this.staleGrace) {
      this.m.staleHits++;
      en.hits++;
      return { act: Act.Hit, v };
    }
    return { act: Act.Pass, busy: en };
  }

  private admit(key: string, kind: number, t: number, src?: string): Acquired {
    const until = this.hot.get(key);
    if (until === undefined || (until && this.hclock(t) >= until)) return PASS;
    this.m.misses++;
    // Known to be a hash too big to cache: not even HLEN again.
    if (kind === KIND_HASH && this.big.has(key) && t < this.big.get(key)!) return PASS;
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
    return { act: Act.Fetch, t: { e: en, gen: en.gen, token: t, src } };
  }

  private evictOne(t: number, keep?: string): void {
    // Map order is insertion order: start at a random offset among the
    // first few so eviction is not strictly FIFO, and prefer an expired value.
    let victim: string | undefined;
    let n = 0;
    const skip = Math.floor(Math.random() * Math.min(8, this.entries.size));
    for (const [k, en] of this.entries) {
      if (n++ < skip || k === keep) continue;
      if (victim === undefined) victim = k;
      if (en.val === null || t > en.val.expires + this.staleGrace) {
        victim = k;
        break;
      }
      if (n >= skip + 8) break;
    }
    if (victim !== undefined) {
      const en = this.entries.get(victim)!;
      en.gen++;
      this.setVal(en, null);
      this.entries.delete(victim);
      this.evictions.capacity++;
    }
  }

  /** Sets an entry's value, keeping Core.bytes. */
  private setVal(en: CacheEntry, v: Value | null): void {
    const b = v === null ? 0 : replyBytes(v.raw) * (v.hidx ? 2 : 1) + en.key.length + 64;
    this.bytes += b - en.bytes;
    en.bytes = b;
    en.val = v;
  }

  /** Marks a fetch's key as a hash too big to cache, remembered by key
   * for BIG_HASH_MEMORY_MS (bounded) across cold/hot and re-admission. */
  tooBig(tk: Ticket): void {
    tk.e.uncacheable = true;
    this.release(tk);
    this.m.uncacheable++;
    if (this.big.size >= Math.max(this.maxEntries, 1024)) this.big.clear();
    this.big.set(tk.e.key, now() + BIG_HASH_MEMORY_MS);
  }

  /** Installs a fetched value unless the key was invalidated since the
   * fetch was sent, and gives the refresh token back. The value expires
   * localTtl after the fetch was sent: what bounds staleness is the age of
   * the read at the server. */
  store(tk: Ticket, v: Value | null): void {
    const en = tk.e;
    if (v !== null && v.hidx) en.whole = true;
    if (v !== null && en.gen === tk.gen && this.entries.get(en.key) === en) {
      v.expires = tk.token + this.localTtl;
      v.src = tk.src;
      this.setVal(en, v);
      if (en.bytes > this.maxValueBytes) {
        // Too big for one entry: its reads pass through.
        this.setVal(en, null);
        en.uncacheable = true;
        this.evictions.too_large++;
      }
      // Within the byte budget: evict others (never the value just stored).
      for (let i = 0; this.bytes > this.maxBytes && this.entries.size > 1 && i < 64; i++) this.evictOne(now(), en.key);
    }
    this.end(tk);
  }

  release(tk: Ticket | undefined): void {
    if (tk) this.end(tk);
  }

  /** tk's fetch is over: the token goes back, its reply is not shared any more. */
  private end(tk: Ticket): void {
    const en = tk.e;
    if (en.refreshing === tk.token) en.refreshing = 0;
    if (en.shared !== null && en.shared.token === tk.token) en.shared = null;
  }

  invalidate(key: string, reason: Inval): void {
    const en = this.entries.get(key);
    if (en) {
      en.gen++;
      this.setVal(en, null);
      this.invalidations[reason]++;
    }
  }

  invalidateAll(reason: Inval): void {
    for (const en of this.entries.values()) {
      en.gen++;
      this.setVal(en, null);
    }
    this.invalidations[reason]++;
  }

  private dropKey(key: string, reason: Evict): void {
    const en = this.entries.get(key);
    if (en) {
      en.gen++;
      this.setVal(en, null);
      this.entries.delete(key);
      this.evictions[reason]++;
    }
  }

  /** key's fresh value of kind, counted as a local hit; null (counting
   * nothing) when there is none. Pipelines serve hashes and MGETs only from
   * fresh values: they cannot fetch on the side. */
  peek(key: string, kind: number, t: number, src?: string): Value | null {
    const en = this.fresh(key, kind, t, src);
    if (en === null) return null;
    this.m.hits++;
    en.hits++;
    return en.val;
  }

  /** key's entry if it holds a fresh value of kind, read from src (counting nothing). */
  fresh(key: string, kind: number, t: number, src?: string): CacheEntry | null {
    const en = this.entries.get(key);
    if (en === undefined || en.kind !== kind || en.uncacheable) return null;
    if (en.hotUntil && this.hclock(t) >= en.hotUntil) return null;
    const v = en.val;
    return v !== null && v.src === src && t < v.expires ? en : null;
  }

  /** Whether a plain pipeline of these commands (name first) may have its
   * hot reads served: it writes nothing and changes no session state. */
  servable(cmds: readonly (readonly Arg[])[]): boolean {
    for (const args of cmds) {
      if (SESSION.has(String(args[0]).toUpperCase())) return false;
      const { keys, all } = writtenKeys(args);
      if (all || keys.length > 0) return false;
    }
    return true;
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
    return u !== undefined && (u === 0 || this.hclock(now()) < u);
  }

  stats() {
    const up = this.sub.up;
    return {
      ...this.m,
      entries: this.entries.size,
      bytes: this.bytes,
      hotKeys: this.hot.size,
      hotMode: this.active,
      invalidations: { ...this.invalidations },
      evictions: { ...this.evictions },
      channel: { ...this.sub.stats },
      /** Messages and snapshot entries not applied, by reason. */
      badMessages: { ...this.sub.bad },
      /** Whether the channel is followed (subscribed, snapshot read). */
      channelUp: up,
      /** Hot keys held and served on while the channel is down (0 while up). */
      servedWithoutChannel: up ? 0 : this.hot.size,
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
