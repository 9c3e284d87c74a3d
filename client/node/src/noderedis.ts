// The shim on a node-redis (v4+) client: its sendCommand, which every typed
// command goes through, is wrapped; pipelines and MULTI (_executePipeline,
// _executeMulti) never reach it. MULTI is never served; a plain pipeline
// (execAsPipeline) that writes nothing has its hot reads answered from
// memory. Writes drop their keys either way. After WATCH nothing is served until EXEC, DISCARD or
// UNWATCH.
//
// The DB: node-redis keeps the selected DB privately, so the shim follows
// it as node-redis does (client.select, a pipeline's or MULTI's select,
// reset), reading it from the server (CLIENT INFO) at install. A read is
// served only while the connection is on the cached values' DB. A SELECT
// sent raw (sendCommand(['SELECT', …])) moves the connection without
// node-redis knowing (it re-selects its own DB on reconnect), so after one
// the shim stops serving this client for good.
//
// A cluster (createCluster): every node client is wrapped the same way as
// node-redis hands it out, with one cache; a command reaches the node its
// slot names, and a refresh and its report go there. A cached value
// remembers the master its read went to (the slot's owner in node-redis'
// slot map); once node-redis routes the key elsewhere (it rediscovers the
// slots after a MOVED reply), that value is not served: the next read goes
// once to the new master and refreshes it there.

import { copyRaw, hashIndex, keyString } from './events';
import { Act, Core, KIND_HASH, KIND_STRING, Ticket, Value } from './cache';
import { keySlot } from './slot';
import { ChannelTransport, now } from './subscriber';
import type { Arg } from './writes';

/* eslint-disable @typescript-eslint/no-explicit-any */

export function isNodeRedis(c: any): boolean {
  return c && typeof c._executeCommand === 'function' && typeof c.sendCommand === 'function' && typeof c.execute !== 'function';
}

export function isNodeRedisCluster(c: any): boolean {
  return c && typeof c._execute === 'function' && typeof c.nodeClient === 'function' && !!(c._self ?? c)._slots;
}

export function isNodeRedisPool(c: any): boolean {
  return c && typeof c.execute === 'function' && 'totalClients' in c;
}

/** A node-redis client's DB now: the server's word (CLIENT INFO) when
 * connected, else its options (database, from the URL too). */
export async function nodeRedisDb(c: any): Promise<number> {
  const self = c._self ?? c;
  const opt = Number(self.options?.database ?? 0);
  if (!self.isReady) return opt;
  try {
    const info = String(await self.sendCommand(['CLIENT', 'INFO']));
    const m = / db=(\d+)/.exec(' ' + info);
    return m ? Number(m[1]) : opt;
  } catch {
    return opt;
  }
}

export function nodeRedisInfo(c: any, db: number) {
  const o = c.options ?? {};
  const s = o.socket ?? {};
  return { host: s.path ? undefined : s.host ?? 'localhost', port: s.path ? undefined : s.port ?? 6379, path: s.path, db };
}

export function nodeRedisClusterInfo(c: any) {
  const self = c._self ?? c;
  return {
    db: 0,
    nodes: () => {
      const out: string[] = [];
      for (const n of self.options?.rootNodes ?? []) if (n.socket?.host && n.socket?.port) out.push(`${n.socket.host}:${n.socket.port}`);
      for (const n of [...(self.masters ?? []), ...(self.replicas ?? [])]) if (n.host && n.port) out.push(`${n.host}:${n.port}`);
      return out;
    },
  };
}

// RESP blob strings as Buffers: the channel's bytes, as sent.
const BUFFERS = { 36: Buffer };

export function nodeRedisTransport(c: any): ChannelTransport {
  const sub = c.duplicate();
  let first = true;
  return {
    async start(channel, h) {
      sub.on('error', (err: unknown) => h.onLost(err));
      sub.on('ready', () => {
        // node-redis resubscribes on reconnect before it is ready again.
        if (!first) h.onSubscribed();
      });
      await sub.connect();
      await sub.subscribe(channel, (msg: Buffer) => h.onMessage(msg), true);
      first = false;
      h.onSubscribed();
    },
    ping: () => (isNodeRedisCluster(sub) ? sub.sendCommand(undefined, true, ['PING']) : sub.ping()),
    get: (key) => (c._self ?? c).withTypeMapping(BUFFERS).get(key),
    async close() {
      if (sub.isOpen) await sub.quit().catch(() => sub.disconnect?.());
    },
  };
}

/** Wraps every node client of a node-redis cluster as node-redis hands
 * it out (slots.nodeClient: every command's route goes through it). */
export function installNodeRedisCluster(cluster: any, core: Core): () => void {
  const slots = (cluster._self ?? cluster)._slots;
  const undo = new Map<any, () => void>();
  // The master of key's slot in node-redis' slot map, where node-redis
  // sends the key's commands.
  const owner = (key: Arg): string => slots.slots?.[keySlot(keyString(key))]?.master?.address ?? '?';
  const hook = (c: any) => {
    const self = c?._self ?? c;
    if (self && !undo.has(self)) undo.set(self, installNodeRedis(self, core, 0, owner));
    return c;
  };
  const origNodeClient = slots.nodeClient;
  slots.nodeClient = function (this: any, node: any) {
    return origNodeClient.call(this, node).then(hook);
  };
  for (const n of [...(slots.masters ?? []), ...(slots.replicas ?? [])]) if (n.client) hook(n.client);
  return () => {
    delete slots.nodeClient;
    if (slots.nodeClient !== origNodeClient) slots.nodeClient = origNodeClient;
    for (const u of undo.values()) u();
    undo.clear();
  };
}

/** ownerOf (a cluster's nodes): the master a read of key goes to now. */
export function installNodeRedis(client: any, core: Core, db0: number, ownerOf?: (key: Arg) => string): () => void {
  const self = client._self ?? client;
  const src = ownerOf ?? (() => undefined);
  const origSend = self.sendCommand;
  const origPipe = self._executePipeline;
  const origMulti = self._executeMulti;
  const origSelect = self.SELECT;
  const origReset = self.RESET;
  const send = (args: Arg[], options?: any): Promise<unknown> => origSend.call(self, args, options);
  let inMulti = false;
  let watching = false;
  // The DB this connection is on (-1: unknown, nothing served). Moved when
  // a SELECT is sent, so reads sent after it in the same order see it.
  let db = db0;
  let selecting = false; // inside client.select(): node-redis follows that one
  let lost = false; // a raw SELECT: node-redis and the connection may disagree
  const onDb = () => !lost && db === core.db;
  const moveTo = (p: Promise<unknown>, to: number, before: number) => {
    db = -1;
    p.then(() => { if (db === -1) db = to; }, () => { if (db === -1) db = before; });
  };
  const lose = () => {
    if (!lost) core.log.warn('hotsniff: a raw SELECT was sent through the client; its reads are not served from memory any more (use client.select())');
    lost = true;
    db = -1;
  };

  // The reply form depends on the typeMapping a command asked for; a value
  // is served only to commands asking the same way it was fetched.
  const tagOf = (options: any) => options?.typeMapping;

  const fetch = (tickets: Ticket[], args: Arg[], options: any): Promise<unknown> => {
    const p = send(args, options);
    // Same tick, same connection: the report directly follows the read.
    // The daemon pairs a report only with a read naming exactly one key:
    // an MGET of several keys carries none.
    const best = args.length === 2 && tickets.length === 1 ? tickets[0] : undefined;
    const t = now();
    const rep = best ? core.report(best, t) : null;
    if (best && rep) {
      send(['ECHO', rep.msg]).then(() => core.reported(best, rep.hits, t), (err) => core.refused(err));
    }
    return p;
  };

  // A hit's answer, now or on the next turn of the event loop (see shouldYield).
  const hit = (t: number, x: unknown): unknown =>
    core.shouldYield(t) ? new Promise((r) => setImmediate(() => r(x))) : x;

  const get = async (args: Arg[], options: any): Promise<unknown> => {
    const t = now();
    const a = core.acquireShared(keyString(args[1]), KIND_STRING, t, src(args[1]), tagOf(options));
    // The refresh in flight answers this read too (acquireShared).
    if (a.shared) return a.shared;
    if (a.act === Act.Hit && a.v!.tag === tagOf(options)) return hit(t, a.v!.raw);
    if (a.act !== Act.Fetch) return send(args, options);
    const tk = a.t!;
    try {
      const p = fetch([tk], args, options);
      core.share(tk, p, tagOf(options));
      const r = await p;
      // Missing keys are cached too: a hot missing key is the stampede.
      core.store(tk, { expires: 0, raw: r, tag: tagOf(options) });
      return r;
    } catch (err) {
      core.m.fetchErrors++;
      core.release(tk);
      throw err;
    }
  };

  const mget = async (args: Arg[], options: any): Promise<unknown> => {
    const t = now();
    const keys = args.slice(1);
    const plan = keys.map((k) => core.acquire(keyString(k), KIND_STRING, t, src(k)));
    const tag = tagOf(options);
    plan.forEach((p, i) => {
      if (p.act === Act.Hit && p.v!.tag !== tag) plan[i] = { act: Act.Pass };
    });
    const tickets = plan.filter((p) => p.act === Act.Fetch).map((p) => p.t!);
    const idx: number[] = [];
    const out: unknown[] = new Array(keys.length);
    plan.forEach((p, i) => (p.act === Act.Hit ? (out[i] = p.v!.raw) : idx.push(i)));
    if (idx.length === 0) return hit(t, out);
    try {
      const rv = (await fetch(tickets, [args[0], ...idx.map((i) => keys[i])], options)) as unknown[];
      if (!Array.isArray(rv) || rv.length !== idx.length) throw new Error('mget: reply length does not match the keys sent');
      idx.forEach((i, j) => {
        out[i] = rv[j];
        // A nil is not cached: MGET also answers nil for a key of another
        // type, and a later GET must get WRONGTYPE.
        if (plan[i].act === Act.Fetch) {
          if (rv[j] === null) core.release(plan[i].t!);
          else core.store(plan[i].t!, { expires: 0, raw: rv[j], tag });
        }
      });
      return out;
    } catch (err) {
      for (const tk of tickets) {
        core.m.fetchErrors++;
        core.release(tk);
      }
      throw err;
    }
  };

  const hash = async (args: Arg[], options: any, answer: (v: Value) => unknown): Promise<unknown> => {
    const t = now();
    const tag = tagOf(options);
    const a = core.acquireShared(keyString(args[1]), KIND_HASH, t, src(args[1]), tag);
    if (a.shared) {
      // The refresh in flight answers this read too (acquireShared), from
      // the hash it read, as a hit would.
      const v = (await a.shared) as Value | null;
      return v === null ? send(args, options) : answer(v);
    }
    if (a.act === Act.Hit && a.v!.tag === tag) return hit(t, answer(a.v!));
    if (a.act !== Act.Fetch) return send(args, options);
    const tk = a.t!;
    let v: Value | null;
    try {
      if (!tk.e.sized) {
        // Sized before the first fetch: a hash too big to cache is never
        // read whole, and the verdict stays with the entry.
        const n = Number(await send(['HLEN', args[1]]));
        tk.e.sized = true;
        if (n > core.maxHashFields) {
          core.tooBig(tk);
          return send(args, options);
        }
      }
      const p = fetch([tk], ['HGETALL', args[1]], options).then((r): Value | null => {
        const hidx = hashIndex(r);
        return hidx === null ? null : { expires: 0, raw: r, hidx, tag };
      });
      // Sent: the hash reads of the key arriving meanwhile answer from it.
      core.share(tk, p, tag);
      v = await p;
    } catch {
      // WRONGTYPE and the like: the caller's own command gets the answer.
      core.m.fetchErrors++;
      core.release(tk);
      return send(args, options);
    }
    if (v === null) {
      tk.e.uncacheable = true;
      core.release(tk);
      return send(args, options);
    }
    if (v.hidx!.size > core.maxHashFields) {
      core.tooBig(tk);
      return send(args, options);
    }
    core.store(tk, v);
    return answer(v);
  };

  const write = (args: Arg[], run: () => Promise<unknown>): Promise<unknown> => {
    // Before and after: a refresh sent in between may have read the old
    // value; the second drop (a new gen) keeps it from being stored.
    if (!core.active || !core.invalidateWritten(args)) return run();
    const again = () => { core.invalidateWritten(args); };
    const p = run();
    p.then(again, again);
    return p;
  };

  self.sendCommand = function (args: Arg[], options?: any): Promise<unknown> {
    const name = typeof args[0] === 'string' ? args[0].toUpperCase() : String(args[0]).toUpperCase();
    if (name === 'EXEC' || name === 'DISCARD' || name === 'RESET') {
      inMulti = false;
      watching = false;
    } else if (name === 'MULTI') inMulti = true;
    else if (name === 'WATCH') watching = true;
    else if (name === 'UNWATCH') watching = false;
    else if (name === 'SELECT') {
      if (!selecting) lose();
      const p = send(args, options);
      if (selecting) moveTo(p, Number(String(args[1])), db);
      return p;
    }
    if (!core.active) return send(args, options);
    const n = args.length;
    if (!inMulti && !watching && onDb()) {
      switch (name) {
        case 'GET': if (n === 2) return get(args, options); break;
        case 'MGET': if (n >= 2) return mget(args, options); break;
        case 'HGET': if (n === 3) return hash(args, options, (v) => v.hidx!.get(keyString(args[2])) ?? null); break;
        case 'HMGET': if (n >= 3) return hash(args, options, (v) => args.slice(2).map((f) => v.hidx!.get(keyString(f)) ?? null)); break;
        case 'HGETALL': if (n === 2) return hash(args, options, (v) => copyRaw(v.raw)); break;
      }
    }
    return write(args, () => send(args, options));
  };

  const batch = (orig: any) => function (this: any, commands: { args: Arg[] }[], ...rest: unknown[]) {
    if (!core.active) return orig.call(this, commands, ...rest);
    let wrote = false;
    for (const c of commands) wrote = core.invalidateWritten(c.args) || wrote;
    const p: Promise<unknown> = orig.call(this, commands, ...rest);
    if (wrote) {
      const again = () => { for (const c of commands) core.invalidateWritten(c.args); };
      p.then(again, again);
    }
    return p;
  };
  // A batch that selects: node-redis sets its DB to selectedDB when the
  // batch succeeds; a SELECT it does not know of (added raw) is lost, and
  // so is the DB after a failed batch that selected (partly applied).
  const selects = (commands: { args: Arg[] }[], selectedDB: unknown, p: Promise<unknown>) => {
    const raw = (commands ?? []).some((c) => String(c.args[0]).toUpperCase() === 'SELECT');
    if (selectedDB !== undefined) {
      db = -1;
      p.then(() => { if (db === -1) db = Number(selectedDB); }, () => lose());
    } else if (raw) lose();
  };
  const wholePipe0 = batch(origPipe);
  const wholePipe = function (this: any, commands: { args: Arg[] }[], selectedDB?: unknown, ...rest: unknown[]) {
    const p = wholePipe0.call(this, commands, selectedDB, ...rest);
    selects(commands, selectedDB, p);
    return p;
  };
  // A plain pipeline (multi().execAsPipeline()) that writes nothing and
  // changes no session state: hot reads are answered from memory and the
  // rest sent as one pipeline, in their order; the raw replies come back in
  // command order for node-redis to transform, as if all had been sent.
  self._executePipeline = async function (this: any, commands: { args: Arg[] }[], selectedDB?: unknown, ...rest: unknown[]) {
    if (!core.active || selectedDB !== undefined || !onDb() || !core.servable(commands.map((c) => c.args))) {
      return wholePipe.call(this, commands, selectedDB, ...rest);
    }
    const tag = this._commandOptions?.typeMapping;
    const t = now();
    type Slot = { local: true; raw: unknown } | { local: false; tk?: Ticket };
    const plan: Slot[] = commands.map(({ args }): Slot => {
      const name = String(args[0]).toUpperCase();
      const n = args.length;
      switch (name) {
        case 'GET': {
          if (n !== 2) break;
          const a = core.acquire(keyString(args[1]), KIND_STRING, t, src(args[1]));
          if (a.act === Act.Hit && a.v!.tag === tag) return { local: true, raw: a.v!.raw };
          if (a.act === Act.Fetch) return { local: false, tk: a.t };
          break;
        }
        case 'HGET': case 'HMGET': case 'HGETALL': {
          if ((name === 'HGET' && n !== 3) || (name === 'HMGET' && n < 3) || (name === 'HGETALL' && n !== 2)) break;
          const en = core.fresh(keyString(args[1]), KIND_HASH, t, src(args[1]));
          if (en === null || en.val!.tag !== tag) break;
          const v = core.peek(keyString(args[1]), KIND_HASH, t, src(args[1]))!;
          if (name === 'HGET') return { local: true, raw: v.hidx!.get(keyString(args[2])) ?? null };
          if (name === 'HMGET') return { local: true, raw: args.slice(2).map((f) => v.hidx!.get(keyString(f)) ?? null) };
          return { local: true, raw: copyRaw(v.raw) };
        }
        case 'MGET': {
          // Served only when every key has a fresh value.
          if (n < 2) break;
          const ents = args.slice(1).map((k) => core.fresh(keyString(k), KIND_STRING, t, src(k)));
          if (ents.some((e) => e === null || e.val!.tag !== tag)) break;
          core.m.hits += ents.length;
          for (const e of ents) e!.hits++;
          return { local: true, raw: ents.map((e) => e!.val!.raw) };
        }
      }
      return { local: false };
    });
    const remote = commands.filter((_, i) => !plan[i].local);
    const tickets = plan.flatMap((sl) => (!sl.local && sl.tk ? [sl.tk] : []));
    if (remote.length === commands.length && tickets.length === 0) return origPipe.call(this, commands, selectedDB, ...rest);
    const out: unknown[] = plan.map((sl) => (sl.local ? sl.raw : undefined));
    // Nothing left to send: nothing is sent.
    if (remote.length === 0) return out;
    let rv: unknown[];
    try {
      rv = (await origPipe.call(this, remote, selectedDB, ...rest)) as unknown[];
    } catch (err) {
      for (const tk of tickets) {
        core.m.fetchErrors++;
        core.release(tk);
      }
      throw err;
    }
    let j = 0;
    plan.forEach((sl, i) => {
      if (sl.local) return;
      const r = rv[j++];
      out[i] = r;
      if (!sl.tk) return;
      if (r instanceof Error) {
        core.m.fetchErrors++;
        core.release(sl.tk);
      } else {
        core.store(sl.tk, { expires: 0, raw: r, tag });
      }
    });
    return out;
  };
  const multi = batch(origMulti);
  self._executeMulti = function (this: any, ...a: any[]) {
    // EXEC ends a WATCH, whatever its outcome.
    const p = multi.apply(this, a as any);
    const clear = () => { watching = false; };
    p.then(clear, clear);
    selects(a[0], a[1], p);
    return p;
  };
  // client.select(n): node-redis sends SELECT through sendCommand, then
  // remembers n (and re-selects it on reconnect): the shim follows it.
  self.SELECT = self.select = function (this: any, ...a: unknown[]) {
    selecting = true;
    try {
      return origSelect.apply(this, a);
    } finally {
      selecting = false;
    }
  };
  // client.reset(): back to the client's own DB.
  if (typeof origReset === 'function') {
    self.RESET = self.reset = function (this: any, ...a: unknown[]) {
      const p: Promise<unknown> = origReset.apply(this, a);
      lost = false;
      moveTo(p, Number(self.options?.database ?? 0), -1);
      return p;
    };
  }
  return () => {
    self.sendCommand = origSend;
    self._executePipeline = origPipe;
    self._executeMulti = origMulti;
    self.SELECT = self.select = origSelect;
    if (typeof origReset === 'function') self.RESET = self.reset = origReset;
  };
}
