// The shim on an ioredis client: its sendCommand is wrapped. Commands sent
// on their own (redis.get, redis.call("GET")) may be served, and so may
// the hot reads of a plain redis.pipeline() that writes nothing (its exec
// is wrapped); MULTI and everything after MULTI or WATCH until
// EXEC/DISCARD/UNWATCH go to Redis. Writes drop their keys either way.
// A read is served only while the connection is on the cached values' DB
// (ioredis tags every command with the DB it will run on, SELECT included
// however sent), so a SELECT never gets another DB's value served. On a
// Cluster, every node's Redis instance is wrapped the same way, with one
// cache: a command reaches the node ioredis routes it to, a refresh and its
// report go to that node, and a MOVED refresh is retried by ioredis as any
// command. A cached value remembers the master its read went to (the slot's
// owner in ioredis' slot map); once ioredis routes the key elsewhere (a
// MOVED reply, a slot map refresh), that value is not served: the next read
// goes once to the new master and refreshes it there.

import { copyRaw, hashIndex, keyString } from './events';
import { Act, Core, KIND_HASH, KIND_STRING, Ticket, Value } from './cache';
import { keySlot } from './slot';
import { ChannelTransport, now } from './subscriber';
import type { Arg } from './writes';

/* eslint-disable @typescript-eslint/no-explicit-any */
type Cmd = any;

export function isIoredis(c: any): boolean {
  return c && c.isCluster !== true && typeof c.sendCommand === 'function' && typeof c.duplicate === 'function' && c.options && 'enableOfflineQueue' in c.options;
}

export function isIoredisCluster(c: any): boolean {
  return c && c.isCluster === true && typeof c.sendCommand === 'function' && typeof c.nodes === 'function' && c.connectionPool;
}

/** The DB the next command sent through c runs on. */
const dbOf = (c: any): number => Number(c.condition?.select ?? c.options.db ?? 0);

export function ioredisInfo(c: any) {
  const o = c.options;
  return { host: o.host, port: o.port, path: o.path, db: dbOf(c) };
}

/** The node addresses of an ioredis Cluster, as it knows them now. */
export function ioredisClusterInfo(c: any) {
  return {
    db: 0,
    nodes: () => {
      const out: string[] = (c.startupNodes ?? []).map((n: any) => (typeof n === 'object' ? `${n.host ?? 'localhost'}:${n.port ?? 6379}` : String(n)));
      for (const r of c.nodes('all')) out.push(`${r.options.host}:${r.options.port}`);
      return out.filter((a) => /:\d+$/.test(a));
    },
  };
}

export function ioredisTransport(c: any): ChannelTransport {
  // Cluster.duplicate takes (startupNodes, options): its lazyConnect must
  // be passed there, or the copy connects at once and is never closed.
  const sub = c.isCluster ? c.duplicate([], { lazyConnect: true }) : c.duplicate({ lazyConnect: true });
  let first = true;
  return {
    async start(channel, h) {
      sub.on('messageBuffer', (ch: Buffer, msg: Buffer) => {
        if (ch.toString() === channel) h.onMessage(msg);
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
    ping: () => sub.ping(),
    get: (key) => c.getBuffer(key),
    async close() {
      sub.disconnect();
    },
  };
}

/** Wraps every node of an ioredis Cluster, now and as ioredis adds them. */
export function installIoredisCluster(cluster: any, core: Core): () => void {
  const undo = new Map<any, () => void>();
  // The master of key's slot in ioredis' slot map ("host:port"), where
  // ioredis sends the key's commands (Command.getSlot caches the slot on
  // the command it routed).
  const owner = (key: Arg, cmd?: Cmd): string => {
    const s = typeof cmd?.getSlot === 'function' ? cmd.getSlot() : null;
    return cluster.slots[typeof s === 'number' ? s : keySlot(keyString(key))]?.[0] ?? '?';
  };
  const hook = (r: any) => {
    if (!undo.has(r)) undo.set(r, installIoredis(r, core, owner));
  };
  const onNode = (r: any) => hook(r);
  const onGone = (r: any) => {
    undo.get(r)?.();
    undo.delete(r);
  };
  cluster.connectionPool.on('+node', onNode);
  cluster.connectionPool.on('-node', onGone);
  for (const r of cluster.nodes('all')) hook(r);
  return () => {
    cluster.connectionPool.off('+node', onNode);
    cluster.connectionPool.off('-node', onGone);
    for (const u of undo.values()) u();
    undo.clear();
  };
}

/** ownerOf (a cluster's nodes): the master a read of key goes to now. */
export function installIoredis(redis: any, core: Core, ownerOf?: (key: Arg, cmd?: Cmd) => string): () => void {
  const orig = redis.sendCommand;
  // Commands already handled here, on their way to Redis: ioredis hands a
  // command to sendCommand again when it replays its offline queue (a
  // command sent before the connection was ready) or follows a cluster
  // redirection. It goes on as it is: one read is one read for the cache.
  const sent = new WeakSet<object>();
  const send = (cmd: Cmd, stream?: unknown, node?: unknown) => {
    sent.add(cmd);
    return orig.call(redis, cmd, stream, node);
  };
  const src = ownerOf ?? (() => undefined);
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
    const t = now();
    const a = core.acquireShared(key, KIND_STRING, t, src(cmd.args[0], cmd));
    if (a.shared) {
      // The refresh in flight answers this read too (acquireShared).
      a.shared.then((r: unknown) => cmd.resolve(r), (err: unknown) => cmd.reject(err));
      return cmd.promise;
    }
    if (a.act === Act.Hit) {
      const raw = a.v!.raw;
      if (core.shouldYield(t)) setImmediate(() => cmd.resolve(raw));
      else cmd.resolve(raw);
      return cmd.promise;
    }
    if (a.act === Act.Pass) return send(cmd);
    const tk = a.t!;
    const p = fetch(cmd, [tk], 'get', [cmd.args[0]]);
    core.share(tk, p);
    p.then(
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
    const plan = args.map((k) => core.acquire(keyString(k), KIND_STRING, t, src(k, cmd)));
    const tickets = plan.filter((p) => p.act === Act.Fetch).map((p) => p.t!);
    if (plan.every((p) => p.act === Act.Pass)) return send(cmd);
    const idx: number[] = [];
    const out: unknown[] = new Array(args.length);
    plan.forEach((p, i) => (p.act === Act.Hit ? (out[i] = p.v!.raw) : idx.push(i)));
    if (idx.length === 0) {
      if (core.shouldYield(t)) setImmediate(() => cmd.resolve(out));
      else cmd.resolve(out);
      return cmd.promise;
    }
    fetch(cmd, tickets, 'mget', idx.map((i) => args[i])).then(
      (rv: any) => {
        if (!Array.isArray(rv) || rv.length !== idx.length) throw new Error('mget: reply length does not match the keys sent');
        idx.forEach((i, j) => {
          out[i] = rv[j];
          // A nil is not cached: MGET also answers nil for a key of another
          // type, and a later GET must get WRONGTYPE.
          if (plan[i].act === Act.Fetch) {
            if (rv[j] === null) core.release(plan[i].t!);
            else core.store(plan[i].t!, { expires: 0, raw: rv[j] });
          }
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

  // hashValue makes an HGETALL reply a hash Value (not stored yet); null if
  // it is no hash. ioredis applies its hgetall transformer even to our raw
  // command (an object of field -> Buffer); the RESP2 form, a flat array,
  // is kept, so each caller's command converts and transforms it as it
  // would a reply.
  const hashValue = (r: unknown): Value | null => {
    if (r && typeof r === 'object' && !Array.isArray(r) && !Buffer.isBuffer(r)) {
      const flat: unknown[] = [];
      const entries = r instanceof Map ? [...r] : Object.entries(r as Record<string, unknown>);
      for (const [f, v] of entries) flat.push(Buffer.isBuffer(f) ? f : Buffer.from(String(f)), v);
      r = flat;
    }
    const hidx = hashIndex(r);
    return hidx === null ? null : { expires: 0, raw: r, hidx };
  };

  // fetchHash reads the whole hash with HGETALL for the refreshing caller;
  // null: not cacheable here, send the caller's own command.
  const fetchHash = async (cmd: Cmd, tk: Ticket): Promise<Value | null> => {
    let v: Value | null;
    try {
      if (!tk.e.sized) {
        // Sized before the first fetch: a hash too big to cache is never
        // read whole, and the verdict stays with the entry.
        const n = Number(await send(raw(cmd, 'hlen', [cmd.args[0]])));
        tk.e.sized = true;
        if (n > core.maxHashFields) {
          core.tooBig(tk);
          return null;
        }
      }
      const p = fetch(cmd, [tk], 'hgetall', [cmd.args[0]]).then(hashValue);
      // Sent: the hash reads of the key arriving meanwhile answer from it.
      core.share(tk, p);
      v = await p;
    } catch {
      // WRONGTYPE and the like: the caller's own command gets the answer.
      core.m.fetchErrors++;
      core.release(tk);
      return null;
    }
    if (v === null) {
      tk.e.uncacheable = true;
      core.release(tk);
      return null;
    }
    if (v.hidx!.size > core.maxHashFields) {
      core.tooBig(tk);
      return null;
    }
    core.store(tk, v);
    return v;
  };

  const hash = (cmd: Cmd, answer: (v: Value) => unknown): unknown => {
    // No hash to answer from: the caller's own command goes, its reply (an
    // error too) settling cmd.promise, which the caller holds; returning
    // it from a then() would leave a copy of its rejection unhandled.
    const settle = (v: Value | null) => {
      if (v === null) send(cmd);
      else cmd.resolve(answer(v));
    };
    const t = now();
    const a = core.acquireShared(keyString(cmd.args[0]), KIND_HASH, t, src(cmd.args[0], cmd));
    if (a.shared) {
      // The refresh in flight answers this read too (acquireShared), from
      // the hash it read, as a hit would.
      a.shared.then((v: unknown) => settle(v as Value | null), (err: unknown) => cmd.reject(err));
      return cmd.promise;
    }
    if (a.act === Act.Hit) {
      const v = a.v!;
      if (core.shouldYield(t)) setImmediate(() => cmd.resolve(answer(v)));
      else cmd.resolve(answer(v));
      return cmd.promise;
    }
    if (a.act === Act.Pass) return send(cmd);
    fetchHash(cmd, a.t!).then(settle, (err) => cmd.reject(err));
    return cmd.promise;
  };

  // servePipeline answers the hot reads of a plain pipeline (p._queue, not
  // yet sent) and sends the rest as one pipeline, in their order; false:
  // not servable, let ioredis send it whole. Each command's own promise is
  // settled (locally, or by its reply), so the pipeline's result, in
  // command order, is what ioredis would have given.
  const servePipeline = (p: any): boolean => {
    const q: Cmd[] = p._queue;
    if (!core.servable(q.map((c) => [String(c.name), ...c.args]))) return false;
    const t = now();
    type Slot = { local: true; raw: unknown } | { local: false; tk?: Ticket };
    const plan: Slot[] = q.map((c): Slot => {
      const name = String(c.name).toLowerCase();
      const n = c.args.length;
      switch (name) {
        case 'get': {
          if (n !== 1) break;
          const a = core.acquire(keyString(c.args[0]), KIND_STRING, t, src(c.args[0]));
          if (a.act === Act.Hit) return { local: true, raw: a.v!.raw };
          if (a.act === Act.Fetch) return { local: false, tk: a.t };
          break;
        }
        case 'hget': case 'hmget': case 'hgetall': {
          if ((name === 'hget' && n !== 2) || (name === 'hmget' && n < 2) || (name === 'hgetall' && n !== 1)) break;
          const v = core.peek(keyString(c.args[0]), KIND_HASH, t, src(c.args[0]));
          if (v === null) break;
          if (name === 'hget') return { local: true, raw: v.hidx!.get(keyString(c.args[1])) ?? null };
          if (name === 'hmget') return { local: true, raw: c.args.slice(1).map((f: Arg) => v.hidx!.get(keyString(f)) ?? null) };
          return { local: true, raw: copyRaw(v.raw) };
        }
        case 'mget': {
          // Served only when every key has a fresh value.
          if (n < 1) break;
          const ents = c.args.map((k: Arg) => core.fresh(keyString(k), KIND_STRING, t, src(k)));
          if (ents.some((e: unknown) => e === null)) break;
          core.m.hits += ents.length;
          for (const e of ents) e.hits++;
          return { local: true, raw: ents.map((e: any) => e.val.raw) };
        }
      }
      return { local: false };
    });
    // Nothing answered here and no refresh: ioredis sends it as it is.
    if (!plan.some((sl) => sl.local || sl.tk)) return false;
    return sendPlan(p, q, plan);
  };

  const sendPlan = (p: any, q: Cmd[], plan: ({ local: true; raw: unknown } | { local: false; tk?: Ticket })[]): boolean => {
    p.replyPending = q.length;
    let sub: any = null;
    q.forEach((c, i) => {
      const sl = plan[i];
      if (sl.local) {
        c.resolve(sl.raw);
        return;
      }
      if (!sub) sub = origPipeline.call(redis);
      if (!sl.tk) {
        sub.sendCommand(c);
        return;
      }
      // The refresh: sent raw, stored, then converted for the caller.
      const tk = sl.tk;
      const rc = raw(c, 'get', [c.args[0]]);
      rc.promise.then(
        (r: unknown) => {
          core.store(tk, { expires: 0, raw: r });
          c.resolve(r);
        },
        (err: unknown) => {
          core.m.fetchErrors++;
          core.release(tk);
          c.reject(err);
        },
      );
      sub.sendCommand(rc);
    });
    // Nothing left to send: nothing is sent.
    if (sub) sub.exec().catch(() => {});
    return true;
  };

  const origPipeline = redis.pipeline;
  redis.pipeline = function (this: any, ...a: unknown[]) {
    const p = origPipeline.apply(this, a);
    const exec = p.exec;
    p.exec = function (this: any, callback?: (err: unknown, res?: unknown) => void) {
      if (!core.active || dbOf(redis) !== core.db || this._transactions > 0 || this.isCluster || !this._queue.length || this.nodeifiedPromise || !servePipeline(this)) {
        return exec.call(this, callback);
      }
      this.nodeifiedPromise = true;
      if (callback) this.promise.then((r: unknown) => callback(null, r), (err: unknown) => callback(err));
      return this.promise;
    };
    return p;
  };

  redis.sendCommand = function (cmd: Cmd, stream?: unknown, node?: unknown) {
    if (sent.has(cmd)) return orig.call(redis, cmd, stream, node);
    // Typed methods name commands in lower case; redis.call keeps the case given.
    const name: string = typeof cmd.name === 'string' ? cmd.name.toLowerCase() : String(cmd.name);
    if (name === 'select' && cmd.name !== 'select' && /^-?\d+$/.test(String(cmd.args[0]))) {
      // ioredis follows the DB only for a command named "select" in lower
      // case (redis.call('SELECT', 1) keeps the case): named so, ioredis
      // tags the commands after it with the new DB, and re-selects it on
      // reconnect, as for redis.select().
      cmd.name = 'select';
    }
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
    // dbOf is read before the command is sent: it is the DB this command,
    // and a refresh sent in its place, will run on.
    if (!stream && !inMulti && !watching && dbOf(redis) === core.db) {
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
    if (redis.pipeline !== origPipeline) delete redis.pipeline;
  };
}
