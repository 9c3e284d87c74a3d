// Channel messages: single v1 events and the v2 batch envelope
// {"v":2,"node":…,"events":[…]}. See docs/channel-protocol.md.

export const TYPE_HOT = 'hot';
export const TYPE_COLD = 'cold';
export const TYPE_INVALIDATE = 'invalidate';
export const SOURCE_MANUAL = 'manual';

/** A batch with more events than this is rejected whole. */
export const MAX_BATCH_EVENTS = 4096;

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

export class DecodeError extends Error {}

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
  const seq = r.seq ?? 0;
  if (typeof seq !== 'number' || !Number.isSafeInteger(seq) || seq < 0) throw new DecodeError('seq is not an unsigned integer');
  const ttl = r.ttl_ms ?? 0;
  if (typeof ttl !== 'number' || !(ttl >= 0)) throw new DecodeError('ttl_ms is not a non-negative number');
  let key = '';
  if (typeof r.key === 'string') {
    key = keyString(r.key);
  } else if (r.key !== undefined && r.key !== null) {
    throw new DecodeError('key is not a string');
  } else if (typeof r.key_b64 === 'string') {
    if (!B64.test(r.key_b64)) throw new DecodeError('key_b64 is not base64');
    key = Buffer.from(r.key_b64, 'base64').toString('latin1');
  }
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

function parse(payload: string | Buffer): unknown {
  try {
    return JSON.parse(typeof payload === 'string' ? payload : payload.toString('utf8'));
  } catch (err) {
    throw new DecodeError(`decode message: ${(err as Error).message}`);
  }
}

/** Decodes one channel message: a v1 event or a v2 batch of events. */
export function decodeMessage(payload: string | Buffer): HotEvent[] {
  const o = parse(payload);
  if (typeof o === 'object' && o !== null && Array.isArray((o as { events?: unknown }).events)) {
    const evs = (o as { events: unknown[] }).events;
    if (evs.length > MAX_BATCH_EVENTS) throw new DecodeError(`decode batch: ${evs.length} events, at most ${MAX_BATCH_EVENTS}`);
    return evs.map(eventFrom);
  }
  return [eventFrom(o)];
}

export interface Snapshot {
  seq: number;
  node: string;
  nodes: Map<string, number>;
  keys: HotEvent[];
}

/** Decodes the document at <channel>:snapshot (null: empty set). */
export function decodeSnapshot(payload: string | Buffer | null): Snapshot {
  const s: Snapshot = { seq: 0, node: '', nodes: new Map(), keys: [] };
  if (payload === null || payload === undefined) return s;
  const o = parse(payload);
  if (typeof o !== 'object' || o === null) throw new DecodeError('snapshot is not a JSON object');
  const r = o as Record<string, unknown>;
  if (typeof r.seq === 'number') s.seq = r.seq;
  if (typeof r.node === 'string') s.node = r.node;
  if (Array.isArray(r.nodes)) {
    for (const n of r.nodes) {
      if (n && typeof n.node === 'string' && typeof n.seq === 'number') s.nodes.set(n.node, n.seq);
    }
  }
  if (Array.isArray(r.keys)) {
    for (const k of r.keys) {
      if (k === null) continue;
      const e = eventFrom(k);
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
