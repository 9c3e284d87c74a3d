// The shim on an ioredis client: its sendCommand is wrapped. Commands sent
// on their own (redis.get, redis.call("GET")) may be served; commands of a
// pipeline or MULTI (they carry a stream) and everything after MULTI or
// WATCH until EXEC/DISCARD/UNWATCH go to Redis. Writes drop their keys
// either way.

import { keyString } from './events';
import { Act, Core, KIND_HASH, KIND_STRING, Ticket, Value } from './cache';
import { ChannelTransport, now } from './subscriber';
import type { Arg } from './writes';

/* eslint-disable @typescript-eslint/no-explicit-any */
type Cmd = any;

export function isIoredis(c: any): boolean {
  return c && typeof c.sendCommand === 'function' && typeof c.duplicate === 'function' && c.options && 'enableOfflineQueue' in c.options;
}

export function ioredisInfo(c: any) {
  const o = c.options;
  return { host: o.host, port: o.port, path: o.path, db: o.db ?? 0 };
}

export function ioredisTransport(c: any): ChannelTransport {
  const sub = c.duplicate({ lazyConnect: true });
  let first = true;
  return {
    async start(channel, h) {
      sub.on('message', (ch: string, msg: string) => {
        if (ch === channel) h.onMessage(msg);
      });
      sub.on('error', (err: unknown) => h.onLost(err));
      sub.on('close', () => h.onLost('connection closed'));
      sub.on('ready', () => {
        if (first) return;
        // ioredis resubscribes by itself; subscribing again waits for the
        // confirmation, so the snapshot is read only once messages queue.
        sub.subscribe(channel).then(() => h.onSubscribed(), (err: unknown) => h.onLost(err));
      });
      await sub.connect();
      await sub.subscribe(channel);
      first = false;
      h.onSubscribed();
    },
    get: (key) => c.get(key),
    async close() {
      sub.disconnect();
    },
  };
}

const hashIndex = (raw: unknown): Map<string, unknown> | null => {
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

const copyRaw = (raw: unknown): unknown => (Array.isArray(raw) ? raw.slice() : raw instanceof Map ? new Map(raw) : raw && typeof raw === 'object' ? { ...raw } : raw);

export function installIoredis(redis: any, core: Core): () => void {
  const orig = redis.sendCommand;
  const send = (cmd: Cmd, stream?: unknown, node?: unknown) => orig.call(redis, cmd, stream, node);
  let inMulti = false;
  let watching = false;

  // A command of our own whose reply stays raw (Buffers): values are cached
  // raw, and each caller's command converts them as it asked (getBuffer vs
  // get).
  const raw = (proto: Cmd, name: string, args: Arg[]): Cmd => new proto.constructor(name, args, { replyEncoding: null });

  // fetch sends the refresh read and, right after it in the same tick (so
  // on the same connection with nothing between), the absorbed report.
  const fetch = (proto: Cmd, tickets: Ticket[], name: string, args: Arg[]): Promise<unknown> => {
    const c = raw(proto, name, args);
    const p = send(c);
    // The daemon pairs a report only with a read naming exactly one key:
    // an MGET of several keys carries none.
    const best = args.length === 1 && tickets.length === 1 ? tickets[0] : undefined;
    const t = now();
    const rep = best ? core.report(best, t) : null;
    if (best && rep) {
      send(raw(proto, 'echo', [rep.msg])).then(
        () => core.reported(best, rep.hits, t),
        (err: unknown) => core.refused(err),
      );
    }
    return p;
  };

  const afterWrite = (cmd: Cmd, args: Arg[]) => {
    const again = () => { core.invalidateWritten(args); };
    cmd.promise.then(again, again);
  };

  const get = (cmd: Cmd): unknown => {
    const key = keyString(cmd.args[0]);
    const a = core.acquire(key, KIND_STRING, now());
    if (a.act === Act.Hit) {
      cmd.resolve(a.v!.raw);
      return cmd.promise;
    }
    if (a.act === Act.Pass) return send(cmd);
    const tk = a.t!;
    fetch(cmd, [tk], 'get', [cmd.args[0]]).then(
      (r: unknown) => {
        // Missing keys are cached too: a hot missing key is the stampede.
        core.store(tk, { expires: 0, raw: r });
        cmd.resolve(r);
      },
      (err: unknown) => {
        core.m.fetchErrors++;
        core.release(tk);
        cmd.reject(err);
      },
    );
    return cmd.promise;
  };

  const mget = (cmd: Cmd): unknown => {
    const t = now();
    const args: Arg[] = cmd.args;
    const plan = args.map((k) => core.acquire(keyString(k), KIND_STRING, t));
    const tickets = plan.filter((p) => p.act === Act.Fetch).map((p) => p.t!);
    if (plan.every((p) => p.act === Act.Pass)) return send(cmd);
    const idx: number[] = [];
    const out: unknown[] = new Array(args.length);
    plan.forEach((p, i) => (p.act === Act.Hit ? (out[i] = p.v!.raw) : idx.push(i)));
    if (idx.length === 0) {
      cmd.resolve(out);
      return cmd.promise;
    }
    fetch(cmd, tickets, 'mget', idx.map((i) => args[i])).then(
      (rv: any) => {
        if (!Array.isArray(rv) || rv.length !== idx.length) throw new Error('mget: reply length does not match the keys sent');
        idx.forEach((i, j) => {
          out[i] = rv[j];
          if (plan[i].act === Act.Fetch) core.store(plan[i].t!, { expires: 0, raw: rv[j] });
        });
        cmd.resolve(out);
      },
    ).catch((err: unknown) => {
      for (const tk of tickets) {
        core.m.fetchErrors++;
        core.release(tk);
      }
      cmd.reject(err);
    });
    return cmd.promise;
  };

  // fetchHash reads the whole hash with HGETALL for the refreshing caller;
  // null: not cacheable here, send the caller's own command.
  const fetchHash = async (cmd: Cmd, tk: Ticket): Promise<Value | null> => {
    let r: unknown;
    try {
      r = await fetch(cmd, [tk], 'hgetall', [cmd.args[0]]);
    } catch {
      // WRONGTYPE and the like: the caller's own command gets the answer.
      core.m.fetchErrors++;
      core.release(tk);
      return null;
    }
    // ioredis applies its hgetall transformer even to our raw command (an
    // object of field -> Buffer); cache the RESP2 form, a flat array, so
    // each caller's command converts and transforms it as it would a reply.
    if (r && typeof r === 'object' && !Array.isArray(r) && !Buffer.isBuffer(r)) {
      const flat: unknown[] = [];
      const entries = r instanceof Map ? [...r] : Object.entries(r as Record<string, unknown>);
      for (const [f, v] of entries) flat.push(Buffer.isBuffer(f) ? f : Buffer.from(String(f)), v);
      r = flat;
    }
    const hidx = hashIndex(r);
    if (hidx === null || hidx.size > core.maxHashFields) {
      tk.e.uncacheable = true;
      core.release(tk);
      return null;
    }
    const v: Value = { expires: 0, raw: r, hidx };
    core.store(tk, v);
    return v;
  };

  const hash = (cmd: Cmd, answer: (v: Value) => unknown): unknown => {
    const a = core.acquire(keyString(cmd.args[0]), KIND_HASH, now());
    if (a.act === Act.Hit) {
      cmd.resolve(answer(a.v!));
      return cmd.promise;
    }
    if (a.act === Act.Pass) return send(cmd);
    fetchHash(cmd, a.t!).then(
      (v) => (v === null ? send(cmd) : cmd.resolve(answer(v))),
      (err) => cmd.reject(err),
    );
    return cmd.promise;
  };

  redis.sendCommand = function (cmd: Cmd, stream?: unknown, node?: unknown) {
    // Typed methods name commands in lower case; redis.call keeps the case given.
    const name: string = typeof cmd.name === 'string' ? cmd.name.toLowerCase() : String(cmd.name);
    if (name === 'exec' || name === 'discard' || name === 'reset') {
      inMulti = false;
      watching = false;
    } else if (!stream) {
      if (name === 'multi') inMulti = true;
      else if (name === 'watch') watching = true;
      else if (name === 'unwatch') watching = false;
    }
    if (!core.active) return send(cmd, stream, node);
    const n = cmd.args.length;
    if (!stream && !inMulti && !watching) {
      switch (name) {
        case 'get': if (n === 1) return get(cmd); break;
        case 'mget': if (n >= 1) return mget(cmd); break;
        case 'hget': if (n === 2) return hash(cmd, (v) => v.hidx!.get(keyString(cmd.args[1])) ?? null); break;
        case 'hmget': if (n >= 2) return hash(cmd, (v) => cmd.args.slice(1).map((f: Arg) => v.hidx!.get(keyString(f)) ?? null)); break;
        case 'hgetall': if (n === 1) return hash(cmd, (v) => copyRaw(v.raw)); break;
      }
    }
    const args = [name, ...cmd.args];
    // Before and after: a refresh sent in between may have read the old
    // value; the second drop (a new gen) keeps it from being stored.
    if (core.invalidateWritten(args)) afterWrite(cmd, args);
    return send(cmd, stream, node);
  };
  return () => {
    redis.sendCommand = orig;
  };
}
