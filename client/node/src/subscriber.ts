// Follows the hot-key channel: subscribe, load the snapshot, apply messages
// checking each publisher's seq, reload the snapshot on a gap, a restart or
// a reconnect. The procedure is docs/channel-protocol.md §5; the rules for
// hostile input (sizes, ranges, seq jumps, flapping verdicts, signatures),
// restarts and channel outages are its subscriber rules, followed here.

import { performance } from 'node:perf_hooks';
import {
  BAD_REASONS, BadReason, DecodeError, HotEvent, SOURCE_MANUAL, Snapshot, TYPE_COLD, TYPE_HOT, decodeMessage, decodeSnapshot,
} from './events';

/** A seq jump the snapshot has not confirmed within this long is undone. */
export const UNCONFIRMED_AFTER_MS = 5000;
/** A key whose cacheable verdict changed FLAP_CHANGES times within
 * FLAP_WINDOW_MS is held cacheable until the window passes with no change. */
export const FLAP_WINDOW_MS = 10_000;
export const FLAP_CHANGES = 4;
/** At most this many keys' verdict histories are kept. */
const MAX_FLAP_KEYS = 65_536;

/** Counted reasons for a message or entry not applied. */
export type Reason = BadReason | 'unconfirmed_seq' | 'flapping';
export const REASONS: readonly Reason[] = [...BAD_REASONS, 'unconfirmed_seq', 'flapping'];

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
  /** The value's bytes (a string is taken as UTF-8). */
  get(key: string): Promise<string | Buffer | null>;
  /** PING on the subscription, to find a dead link on a silent channel. */
  ping(): Promise<unknown>;
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
  restartWindow?: number;
  /** How long the channel may stay silent before the link is checked with PING (default 15000). */
  pingIntervalMs?: number;
  /** With a secret, only signed messages and snapshots are accepted. */
  secret?: Buffer;
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

/** At most this many hot entries are held: a forged flood of hot keys
 * costs bounded memory (the daemon publishes --max-hot, 1,024 by default). */
export const MAX_HOT_ENTRIES = 1 << 17;

/** An entry's expiry in HotSet's heap. */
interface Due { at: number; id: string }

/** The live entries, by entry id and by (proto, ns, key).
 *
 * Entries with a TTL are also in a min-heap by expiry, so a sweep costs the
 * entries due, not the size of the set: an idle shim holding 40,000 hot
 * keys does no per-key work. Refreshing or removing an entry leaves its old
 * heap item behind (lazy deletion: skipped when popped, since the entry's
 * expiry no longer matches); the heap is rebuilt from the entries when such
 * items outnumber them, so it holds at most about twice the entries. */
export class HotSet {
  m = new Map<string, Entry>();
  lookup = new Map<string, Set<string>>();
  /** New entries refused because the set was full. */
  refused = 0;
  /** Heap items expire looked at (for tests of its cost). */
  examined = 0;
  heap: Due[] = [];

  /** Adds or replaces e, lapsing at `at` if given, else ttl after t. */
  put(e: HotEvent, t: number, at?: number): void {
    const id = entryId(e);
    if (!this.m.has(id)) {
      if (this.m.size >= MAX_HOT_ENTRIES) {
        this.refused++;
        return;
      }
      const l = lookupId(e.proto, e.ns, e.key);
      let ids = this.lookup.get(l);
      if (!ids) this.lookup.set(l, (ids = new Set()));
      ids.add(id);
    }
    // Expiry counts from arrival (local clock), never from e.ts.
    const expires = at ?? (e.ttlMs > 0 ? t + e.ttlMs : 0);
    this.m.set(id, { ev: e, expires });
    if (expires) {
      if (this.heap.length >= 2 * this.m.size + 1024) this.compact();
      this.push({ at: expires, id });
    }
  }

  /** The heap again from the live entries, without stale items. */
  private compact(): void {
    const h: Due[] = [];
    for (const [id, en] of this.m) if (en.expires) h.push({ at: en.expires, id });
    this.heap = h;
    for (let i = (h.length >> 1) - 1; i >= 0; i--) this.down(i);
  }

  private push(d: Due): void {
    const h = this.heap;
    let i = h.push(d) - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (h[p].at <= d.at) break;
      h[i] = h[p];
      i = p;
    }
    h[i] = d;
  }

  private pop(): Due {
    const h = this.heap;
    const top = h[0];
    const last = h.pop()!;
    if (h.length > 0) {
      h[0] = last;
      this.down(0);
    }
    return top;
  }

  private down(i: number): void {
    const h = this.heap, n = h.length, d = h[i];
    for (;;) {
      let c = 2 * i + 1;
      if (c >= n) break;
      if (c + 1 < n && h[c + 1].at < h[c].at) c++;
      if (h[c].at >= d.at) break;
      h[i] = h[c];
      i = c;
    }
    h[i] = d;
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

  /** Copies the entries of old whose node has no section in sec (see
   * Subscriber.reload); true when it copied any. They keep their expiry; one
   * already past it (it lapsed while the channel was down, when nothing
   * lapses) gets a fresh ttl from t when renew is set. */
  carry(old: HotSet, sec: Map<string, number>, t: number, renew: boolean): boolean {
    let copied = false;
    for (const [id, en] of old.m) {
      if (sec.has(en.ev.node)) continue;
      let exp = en.expires;
      if (exp !== 0 && t >= exp) {
        if (!renew) continue;
        exp = t + en.ev.ttlMs;
      }
      this.put(en.ev, t, exp);
      if (this.m.has(id)) copied = true;
    }
    return copied;
  }

  /** Drops the entries whose expiry passed; looks only at those. */
  expire(t: number): void {
    while (this.heap.length > 0 && this.heap[0].at <= t) {
      const d = this.pop();
      this.examined++;
      const en = this.m.get(d.id);
      // A stale item: the entry was refreshed (another expiry, or none)
      // or removed since.
      if (en && en.expires === d.at) this.del(d.id);
    }
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
  stats = { messages: 0, stale: 0, invalid: 0, gaps: 0, restarts: 0, reloads: 0, reloadErrors: 0, reconnects: 0, logDropped: 0, hotSetFull: 0 };
  /** Messages (and snapshot entries) not applied, by reason. */
  bad: Record<Reason, number> = Object.fromEntries(REASONS.map((r) => [r, 0])) as Record<Reason, number>;
  /** Whether the channel is up: subscribed and the last snapshot read worked. */
  up = false;
  /** When the channel went down (the hot set's clock stands still there). */
  downAt = 0;
  /** Resolves once the first snapshot was loaded. */
  readonly synced: Promise<void>;

  private last = new Map<string, number>();
  private pending = new Map<string, number>();
  private pendingSince = new Map<string, number>();
  private flaps = new Map<string, { verdict: boolean; changes: number[] }>();
  private logbuf: HotEvent[] = [];
  private logFloor = new Map<string, number>();
  private lastReload = -Infinity;
  private retryTimer: NodeJS.Timeout | undefined;
  private expireTimer: NodeJS.Timeout | undefined;
  private reloadFailing = false;
  /** Since when the snapshot document has been missing while a hot set
   * was held (0: it is there). */
  private missingSince = 0;
  private failing = false;
  private subscribedOnce = false;
  private queue: Item[] = [];
  private pumping = false;
  private closed = false;
  private resolveSynced!: () => void;
  private readonly logSize: number;
  private readonly retryDelay: number;
  private readonly restartWindow: number;
  private readonly pingInterval: number;
  private readonly secret: Buffer | undefined;
  private lastHeard = now();
  private readonly log: Logger;

  constructor(private transport: ChannelTransport, private handler: SubscriberHandler, opt: SubscriberOptions = {}) {
    this.channel = opt.channel || DEFAULT_CHANNEL;
    this.logSize = Math.max(opt.logSize ?? 10000, 1);
    this.retryDelay = opt.retryDelayMs ?? 250;
    this.restartWindow = opt.restartWindow ?? 2 ** 20;
    this.pingInterval = opt.pingIntervalMs ?? 15_000;
    this.secret = opt.secret && opt.secret.length > 0 ? opt.secret : undefined;
    this.log = opt.logger ?? console;
    this.synced = new Promise((r) => (this.resolveSynced = r));
  }

  async start(): Promise<void> {
    this.expireTimer = setInterval(() => {
      const t = now();
      this.set.expire(this.clock());
      this.pruneFlaps(t);
      if (t - this.lastHeard >= this.pingInterval) {
        // A quiet channel: check the link (the library reconnects a dead
        // one, and the resubscription reloads the snapshot).
        this.lastHeard = t;
        this.transport.ping().catch((err) => {
          if (!this.failing && !this.closed) this.log.warn(`hotsniff: hot-key subscription PING failed: ${String(err)}`);
          this.down();
        });
      }
    }, 1000);
    this.expireTimer.unref();
    await this.transport.start(this.channel, {
      onSubscribed: () => this.push({ kind: 'subscribed' }),
      onMessage: (p) => this.push({ kind: 'message', p }),
      onLost: (err) => {
        if (!this.failing && !this.closed) this.log.warn(`hotsniff: hot-key subscription lost; reconnecting: ${String(err)}`);
        this.failing = true;
        this.down();
      },
    });
  }

  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.retryTimer);
    clearInterval(this.expireTimer);
    await this.transport.close();
  }

  /** The hot set's clock: now while the channel is up; while it is down,
   * the moment it went down, so no hot entry lapses during an outage (the
   * cached values are still refreshed from the cache server). */
  clock(): number {
    return this.up || this.downAt === 0 ? now() : this.downAt;
  }

  private down(): void {
    if (!this.up) return;
    this.up = false;
    this.downAt = now();
  }

  hotUntil(proto: string, ns: string, key: string, match?: (e: HotEvent) => boolean) {
    return this.set.hotUntil(proto, ns, key, this.clock(), match);
  }

  hotSet(): HotEvent[] {
    return this.set.live(this.clock());
  }

  private countBad(r: Reason, n = 1): void {
    this.bad[r] += n;
  }

  /** Whether a cacheable:false for e's key is held back: the key's verdict
   * has flipped FLAP_CHANGES times within FLAP_WINDOW_MS. Every verdict a
   * message carries counts, held or not, so a key flipped on and on stays
   * held. */
  private flapping(e: HotEvent, t: number): boolean {
    const id = lookupId(e.proto, e.ns, e.key);
    let f = this.flaps.get(id);
    if (f === undefined) {
      if (this.flaps.size >= MAX_FLAP_KEYS) this.flaps.clear();
      this.flaps.set(id, (f = { verdict: e.cacheable, changes: [] }));
      return false;
    }
    while (f.changes.length > 0 && t - f.changes[0] >= FLAP_WINDOW_MS) f.changes.shift();
    const held = !e.cacheable && f.changes.length >= FLAP_CHANGES;
    if (e.cacheable !== f.verdict) {
      f.verdict = e.cacheable;
      f.changes.push(t);
      if (f.changes.length > FLAP_CHANGES + 1) f.changes.shift();
    }
    return held;
  }

  private pruneFlaps(t: number): void {
    for (const [id, f] of this.flaps) {
      const lastChange = f.changes.length ? f.changes[f.changes.length - 1] : -Infinity;
      if (t - lastChange >= FLAP_WINDOW_MS && f.verdict) this.flaps.delete(id);
    }
  }

  // Messages and reloads are handled strictly in order: a reload's GET is
  // awaited before the next message is applied.
  private push(it: Item): void {
    if (this.closed) return;
    this.lastHeard = now();
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
      evs = decodeMessage(p, this.secret);
    } catch (err) {
      if (!(err instanceof DecodeError)) throw err;
      this.stats.invalid++;
      this.countBad(err.reason);
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
    if (e.type === TYPE_HOT && this.flapping(e, t)) {
      // Held cacheable: the LocalTTL bound still holds (values are
      // refreshed from the cache server); a flood of flips cannot turn
      // the key's whole demand back onto its shard.
      this.countBad('flapping');
      e = { ...e, cacheable: true };
    }
    this.remember(e);
    const refused = this.set.refused;
    this.set.apply(e, t);
    this.stats.hotSetFull += this.set.refused - refused;
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
      // The first unconfirmed jump starts the clock; later ones do not
      // restart it, so a forger cannot keep a node frozen.
      if (!this.pending.has(node)) this.pendingSince.set(node, now());
      this.pending.set(node, seq);
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
    const wasDown = !this.up;
    this.stats.reloads++;
    this.lastReload = now();
    clearTimeout(this.retryTimer);
    let snap: Snapshot;
    let doc: string | Buffer | null;
    try {
      doc = await this.transport.get(snapshotKey(this.channel));
    } catch (err) {
      this.stats.reloadErrors++;
      if (!this.reloadFailing) this.log.warn(`hotsniff: reload hot-key snapshot; retrying: ${String(err)}`);
      this.reloadFailing = true;
      this.down();
      if (!this.closed) this.scheduleRetry(this.retryDelay);
      return;
    }
    if ((doc === null || doc === undefined) && (this.last.size > 0 || this.set.m.size > 0)) {
      // No document where there was one: the channel's Redis restarted
      // empty (or was flushed). Its publishers rewrite their sections about
      // every second, so this is not a fresh snapshot saying nothing is hot:
      // the hot set is kept and the read retried. Still missing after
      // UNCONFIRMED_AFTER_MS, it is believed (no publisher is left), so
      // held keys never outlive their publishers by more than that.
      const t = now();
      if (this.missingSince === 0) {
        this.missingSince = t;
        this.log.warn('hotsniff: hot-key snapshot missing (the channel\'s Redis restarted empty?); keeping the hot set until it is rewritten');
      }
      if (t - this.missingSince < UNCONFIRMED_AFTER_MS) {
        this.reloadFailing = false;
        this.up = !this.failing;
        if (!this.closed) this.scheduleRetry(this.retryDelay);
        this.resolveSynced();
        return;
      }
    }
    this.missingSince = 0;
    const missing = doc === null || doc === undefined;
    try {
      snap = decodeSnapshot(doc, this.secret);
    } catch (err) {
      if (!(err instanceof DecodeError)) throw err;
      // A bad document (too large, unsigned, not JSON) is ignored: the
      // state is kept. Retried only while a seq jump waits on it.
      this.stats.reloadErrors++;
      this.countBad(err.reason);
      if (!this.reloadFailing) this.log.warn(`hotsniff: hot-key snapshot rejected; keeping the hot set: ${err.message}`);
      this.reloadFailing = true;
      this.up = !this.failing;
      this.expirePending(new Map());
      if (this.pending.size > 0 && !this.closed) this.scheduleRetry(this.retryDelay);
      this.resolveSynced();
      return;
    }
    this.reloadFailing = false;
    this.up = !this.failing;
    for (const [r, n] of Object.entries(snap.bad)) this.countBad(r as Reason, n);
    const t = now();
    const sec = snap.nodes;
    for (const [n, w] of [...this.pending]) {
      const q = sec.get(n);
      if (q === undefined || q >= w) {
        this.pending.delete(n);
        this.pendingSince.delete(n);
      }
    }
    // Before the log is replayed: an unconfirmed jump's messages go.
    this.expirePending(sec);
    const hs = new HotSet();
    for (const e of snap.keys) hs.put(e, t);
    // A node with no section in a snapshot document that exists neither
    // confirms nor denies its keys: typically the channel Redis restarted
    // empty and other daemons rewrote their sections before this node's
    // (its reconnect backoff). Its entries are carried over (they lapse by
    // their own ttl, which restarts for those served through a channel
    // outage), and the snapshot is read again every second until the
    // section is back or they lapse. A document missing past
    // UNCONFIRMED_AFTER_MS (above) is believed: nothing is carried.
    const carried = !missing && hs.carry(this.set, sec, t, wasDown);
    for (const e of this.logbuf) {
      const q = sec.get(e.node);
      if (q !== undefined && e.seq > q) hs.apply(e, t);
    }
    for (const [n, q] of sec) {
      const l = this.last.get(n);
      if (l === undefined || q > l) this.last.set(n, q);
      const f = this.logFloor.get(n) ?? 0;
      // Messages between the section and the log are gone: wait for a newer section.
      if (f > q) {
        if (!this.pending.has(n)) this.pendingSince.set(n, t);
        this.pending.set(n, Math.max(this.pending.get(n) ?? 0, f));
      }
    }
    this.stats.hotSetFull += hs.refused;
    this.set = hs;
    if (this.pending.size > 0) this.scheduleRetry(this.retryDelay);
    else if (carried) this.scheduleRetry(Math.max(this.retryDelay, 1000));
    this.handler.onSnapshot(snap);
    this.resolveSynced();
  }

  /** A seq jump the snapshot has not confirmed for UNCONFIRMED_AFTER_MS is
   * not believed: the node's last seq becomes the snapshot's (possibly
   * lower), so the node's real messages apply again. */
  private expirePending(sec: Map<string, number>): void {
    const t = now();
    for (const [n] of [...this.pending]) {
      if (t - (this.pendingSince.get(n) ?? t) < UNCONFIRMED_AFTER_MS) continue;
      const q = sec.get(n);
      if (q === undefined) this.last.delete(n);
      else this.last.set(n, q);
      this.pending.delete(n);
      this.pendingSince.delete(n);
      this.logFloor.delete(n);
      this.logbuf = this.logbuf.filter((x) => x.node !== n || (q !== undefined && x.seq <= q));
      this.countBad('unconfirmed_seq');
      this.log.warn(`hotsniff: hot-key publisher ${JSON.stringify(n)} jumped to a seq its snapshot never confirmed; back to seq ${q ?? 'unknown'}`);
    }
  }
}
