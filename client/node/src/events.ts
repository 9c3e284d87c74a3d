// Channel messages: single v1 events and the v2 batch envelope
// {"v":2,"node":…,"events":[…]}, optionally signed. See
// docs/channel-protocol.md. Everything here is untrusted input: sizes are
// checked before parsing and every field's range before use; a failure is
// one DecodeError with a reason the subscriber counts.

import { createHmac, timingSafeEqual } from 'node:crypto';

export const TYPE_HOT = 'hot';
export const TYPE_COLD = 'cold';
export const TYPE_INVALIDATE = 'invalidate';
export const SOURCE_MANUAL = 'manual';

/** A batch with more events than this is rejected whole. */
export const MAX_BATCH_EVENTS = 4096;
/** A channel message longer than this is rejected before parsing. */
export const MAX_MESSAGE_BYTES = 1 << 20;
/** A snapshot document longer than this is rejected before parsing. */
export const MAX_SNAPSHOT_BYTES = 64 << 20;
/** Keys longer than this are out of range. */
export const MAX_KEY_BYTES = 1 << 20;
/** ttl_ms above this (a day) is out of range. */
export const MAX_TTL_MS = 86_400_000;

/** One hot-key message. key is the raw key bytes as a binary string (latin1). */
export interface HotEvent {
  v: number;
  seq: number;
  type: string;
  proto: string;
  server: string;
  ns: string;
  key: string;
  prefix: boolean;
  ttlMs: number;
  source: string;
  node: string;
  cacheable: boolean;
}

/** Why a message was rejected (the bad_message{reason} counters). */
export type BadReason = 'too_large' | 'out_of_range' | 'undecodable' | 'bad_signature';
export const BAD_REASONS: readonly BadReason[] = ['too_large', 'out_of_range', 'undecodable', 'bad_signature'];

export class DecodeError extends Error {
  constructor(msg: string, readonly reason: BadReason = 'undecodable') {
    super(msg);
  }
}

const range = (msg: string) => new DecodeError(msg, 'out_of_range');

/** keyString is the shim's key form: the raw bytes as a latin1 string, so
 * binary keys compare exactly and cost no Buffer on lookups. */
export function keyString(k: string | Buffer | number): string {
  if (typeof k === 'string') {
    // ASCII keys (the common case) are their own latin1 form.
    for (let i = 0; i < k.length; i++) {
      if (k.charCodeAt(i) > 0x7f) return Buffer.from(k, 'utf8').toString('latin1');
    }
    return k;
  }
  if (Buffer.isBuffer(k)) return k.toString('latin1');
  return String(k);
}

function str(o: Record<string, unknown>, name: string): string {
  const v = o[name];
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw new DecodeError(`${name} is not a string`);
  return v;
}

const B64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

export function eventFrom(o: unknown): HotEvent {
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw new DecodeError('event is not a JSON object');
  const r = o as Record<string, unknown>;
  if (r.v !== undefined && r.v !== 1 && r.v !== 2) throw range('v is not 1 or 2');
  const seq = r.seq ?? 0;
  // JSON.parse turns 1e400 and 400-digit integers into Infinity or huge
  // numbers: all fail these checks.
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 0) throw range('seq is not an integer in [0, 2^53)');
  const ttl = r.ttl_ms ?? 0;
  if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 0 || ttl > MAX_TTL_MS) throw range(`ttl_ms is not an integer in [0, ${MAX_TTL_MS}]`);
  for (const f of ['qps', 'absorbed_qps', 'write_qps', 'bytes_ps', 'value_bytes']) {
    const x = r[f];
    if (x !== undefined && x !== null && (typeof x !== 'number' || !Number.isFinite(x) || x < 0)) throw range(`${f} is not a finite non-negative number`);
  }
  if (r.sample !== undefined && r.sample !== null && (typeof r.sample !== 'number' || !(r.sample > 0 && r.sample <= 1))) throw range('sample is not in (0, 1]');
  let key = '';
  if (typeof r.key === 'string') {
    if (r.key.length > MAX_KEY_BYTES) throw range('key is longer than 1 MiB');
    key = keyString(r.key);
  } else if (r.key !== undefined && r.key !== null) {
    throw new DecodeError('key is not a string');
  } else if (typeof r.key_b64 === 'string') {
    if (r.key_b64.length > Math.ceil(MAX_KEY_BYTES / 3) * 4) throw range('key is longer than 1 MiB');
    if (!B64.test(r.key_b64)) throw new DecodeError('key_b64 is not base64');
    key = Buffer.from(r.key_b64, 'base64').toString('latin1');
  }
  if (key.length > MAX_KEY_BYTES) throw range('key is longer than 1 MiB');
  return {
    v: typeof r.v === 'number' ? r.v : 1,
    seq,
    type: str(r, 'type'),
    proto: str(r, 'proto'),
    server: str(r, 'server'),
    ns: str(r, 'ns'),
    key,
    prefix: r.prefix === true,
    ttlMs: Math.floor(ttl),
    source: str(r, 'source'),
    node: str(r, 'node'),
    // Absent means true; only an explicit false disables caching.
    cacheable: r.cacheable !== false,
  };
}

/** A bare Infinity or NaN where a value goes: not JSON, but a number out of range, as the Go and Python shims count it. */
const NON_FINITE = /[:[,]\s*-?(?:Infinity|NaN)\s*[,}\]]/;

function parse(payload: Buffer): unknown {
  const text = payload.toString('utf8');
  try {
    return JSON.parse(text);
  } catch (err) {
    if (NON_FINITE.test(text)) throw range(`decode message: ${(err as Error).message}`);
    throw new DecodeError(`decode message: ${(err as Error).message}`);
  }
}

const SIG_PREFIX = Buffer.from('{"sig":"');
const SIG_MID = Buffer.from('","body":');
/** Where BODY starts in a signed envelope: the prefix, 64 hex digits, the middle. */
export const SIG_BODY_AT = SIG_PREFIX.length + 64 + SIG_MID.length;
const HEX64 = /^[0-9a-f]{64}$/;

const bytes = (p: string | Buffer): Buffer => (typeof p === 'string' ? Buffer.from(p, 'utf8') : p);

/** The signed envelope's parts, by position, or null if p is not one. */
function envelope(p: Buffer): { sig: string; body: Buffer } | null {
  // At least one byte of BODY: an empty body is no message (and Go and Python
  // take such bytes for no envelope too).
  if (p.length < SIG_BODY_AT + 2 || p[p.length - 1] !== 0x7d) return null;
  if (!p.subarray(0, SIG_PREFIX.length).equals(SIG_PREFIX)) return null;
  if (!p.subarray(SIG_PREFIX.length + 64, SIG_BODY_AT).equals(SIG_MID)) return null;
  const sig = p.toString('latin1', SIG_PREFIX.length, SIG_PREFIX.length + 64);
  if (!HEX64.test(sig)) return null;
  return { sig, body: p.subarray(SIG_BODY_AT, p.length - 1) };
}

/** The message's body: with a secret, a signed envelope whose MAC
 * (HMAC-SHA256 over BODY) checks, else bad_signature; without one, an
 * envelope is unwrapped unverified and anything else taken as it is. */
export function unwrap(p: Buffer, secret?: Buffer): Buffer {
  const env = envelope(p);
  if (!secret || secret.length === 0) return env ? env.body : p;
  if (env === null) throw new DecodeError('message is not signed', 'bad_signature');
  const want = createHmac('sha256', secret).update(env.body).digest();
  if (!timingSafeEqual(want, Buffer.from(env.sig, 'hex'))) throw new DecodeError('message signature does not match', 'bad_signature');
  return env.body;
}

/** Decodes one channel message: a v1 event or a v2 batch of events. */
export function decodeMessage(payload: string | Buffer, secret?: Buffer): HotEvent[] {
  const raw = bytes(payload);
  // Size before anything else: nothing is parsed or hashed past the cap.
  if (raw.length > MAX_MESSAGE_BYTES) throw new DecodeError(`message of ${raw.length} bytes, at most ${MAX_MESSAGE_BYTES}`, 'too_large');
  const o = parse(unwrap(raw, secret));
  if (typeof o === 'object' && o !== null && Array.isArray((o as { events?: unknown }).events)) {
    const b = o as { v?: unknown; events: unknown[] };
    if (b.v !== undefined && b.v !== 1 && b.v !== 2) throw range('v is not 1 or 2');
    const evs = b.events;
    if (evs.length > MAX_BATCH_EVENTS) throw new DecodeError(`decode batch: ${evs.length} events, at most ${MAX_BATCH_EVENTS}`, 'too_large');
    return evs.map(eventFrom);
  }
  return [eventFrom(o)];
}

export interface Snapshot {
  seq: number;
  node: string;
  nodes: Map<string, number>;
  keys: HotEvent[];
  /** Entries skipped as bad (out of range, undecodable), by reason. */
  bad: Partial<Record<BadReason, number>>;
}

const safeSeq = (x: unknown): x is number => typeof x === 'number' && Number.isSafeInteger(x) && x >= 0;

/** Decodes the document at <channel>:snapshot (null: empty set). A bad
 * entry is skipped and counted in s.bad; the rest is applied. */
export function decodeSnapshot(payload: string | Buffer | null, secret?: Buffer): Snapshot {
  const s: Snapshot = { seq: 0, node: '', nodes: new Map(), keys: [], bad: {} };
  if (payload === null || payload === undefined) return s;
  const raw = bytes(payload);
  if (raw.length > MAX_SNAPSHOT_BYTES) throw new DecodeError(`snapshot of ${raw.length} bytes, at most ${MAX_SNAPSHOT_BYTES}`, 'too_large');
  const o = parse(unwrap(raw, secret));
  if (typeof o !== 'object' || o === null || Array.isArray(o)) throw new DecodeError('snapshot is not a JSON object');
  const r = o as Record<string, unknown>;
  const skip = (reason: BadReason) => { s.bad[reason] = (s.bad[reason] ?? 0) + 1; };
  if (safeSeq(r.seq)) s.seq = r.seq;
  if (typeof r.node === 'string') s.node = r.node;
  if (Array.isArray(r.nodes)) {
    for (const n of r.nodes) {
      if (n && typeof n.node === 'string' && safeSeq(n.seq)) s.nodes.set(n.node, n.seq);
      else skip('out_of_range');
    }
  }
  if (Array.isArray(r.keys)) {
    for (const k of r.keys) {
      if (k === null) continue;
      let e: HotEvent;
      try {
        e = eventFrom(k);
      } catch (err) {
        if (!(err instanceof DecodeError)) throw err;
        skip(err.reason);
        continue;
      }
      if (e.type !== TYPE_COLD) s.keys.push(e);
    }
  }
  return s;
}

/** hashIndex maps a hash reply, in whichever form the client library gives
 * it (flat array, Map or object), from field to value; null if it is none. */
export const hashIndex = (raw: unknown): Map<string, unknown> | null => {
  const m = new Map<string, unknown>();
  if (Array.isArray(raw)) {
    for (let i = 0; i + 1 < raw.length; i += 2) m.set(keyString(raw[i]), raw[i + 1]);
  } else if (raw instanceof Map) {
    for (const [f, v] of raw) m.set(keyString(f), v);
  } else if (raw && typeof raw === 'object') {
    for (const [f, v] of Object.entries(raw)) m.set(keyString(f), v);
  } else {
    return null;
  }
  return m;
};

/** copyRaw returns a shallow copy of a hash reply, so the caller's copy and
 * the cached one never share a container. */
export const copyRaw = (raw: unknown): unknown => (Array.isArray(raw) ? raw.slice() : raw instanceof Map ? new Map(raw) : raw && typeof raw === 'object' ? { ...raw } : raw);
