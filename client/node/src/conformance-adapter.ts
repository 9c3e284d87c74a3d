// The conformance adapter: drives this shim for client/conformance.
//   node dist/conformance-adapter.js CONFIG_JSON
// HOTSNIFF_NODE_CLIENT=ioredis (default) or node-redis picks the library;
// the config's "mode" the client: "single" (default: Redis / createClient),
// "cluster" (Cluster / createCluster, cache is one node's address) or
// "pool" (node-redis createClientPool, which install refuses). A refused
// install prints {"ready":false,"error":…} and exits 2.
// It prints {"ready":true} once the first snapshot is loaded, then answers
// one JSON request per stdin line with one JSON line on stdout (the
// protocol is in client/conformance/README.md).

import { performance } from 'node:perf_hooks';
import * as readline from 'node:readline';
import IORedis from 'ioredis';
import { createClient, createClientPool, createCluster } from 'redis';
import { install } from './index';

/* eslint-disable @typescript-eslint/no-explicit-any */

interface Config {
  cache: string; channel_addr: string; channel: string; db?: number; username?: string; password?: string;
  servers?: string[]; any_server?: boolean; local_ttl_ms?: number; stale_grace_ms?: number; linger_ms?: number; max_entries?: number;
  mode?: 'single' | 'cluster' | 'pool';
  cluster_addrs?: string[]; pool_size?: number; channel_secret?: string;
}

const MODES = ['single', 'cluster', 'pool'];

const wallNs = () => Math.round((performance.timeOrigin + performance.now()) * 1e6);

const seeds = (cfg: Config): [string, number][] => (cfg.cluster_addrs && cfg.cluster_addrs.length ? cfg.cluster_addrs : [cfg.cache]).map(split);

function split(a: string): [string, number] {
  const i = a.lastIndexOf(':');
  return [a.slice(0, i), Number(a.slice(i + 1))];
}

// The operations, written once per library.
interface Ops {
  get(k: any): Promise<any>; mget(ks: any[]): Promise<any>; hget(k: any, f: string): Promise<any>;
  hmget(k: any, fs: string[]): Promise<any>; hgetall(k: any): Promise<any>; set(k: any, v: string): Promise<any>;
  hset(k: any, f: string, v: string): Promise<any>; del(k: any): Promise<any>; do(args: string[]): Promise<any>;
  pipelineSet(k: any, v: string): Promise<any>; pipelineGet(k: any): Promise<any>; multiGet(k: any): Promise<any>;
  pipelineWriteRead(k: any, v: string): Promise<any>;
  select(db: number): Promise<any>; pipelineSelectGet(db: number, k: any): Promise<any>;
  watchGet(k: any): Promise<any>;
}

async function ioredisOps(cfg: Config): Promise<{ client: any; chan: any; ops: Ops; close(): Promise<void> }> {
  const [host, port] = split(cfg.cache);
  const [chost, cport] = split(cfg.channel_addr);
  if (cfg.mode === 'pool') throw new Refused('ioredis has no client pool');
  const r: any = cfg.mode === 'cluster'
    ? new IORedis.Cluster(seeds(cfg).map(([h, p]) => ({ host: h, port: p })), { lazyConnect: true, redisOptions: { username: cfg.username, password: cfg.password } })
    : new IORedis({ host, port, db: cfg.db ?? 0, username: cfg.username, password: cfg.password, lazyConnect: true });
  const chan = new IORedis({ host: chost, port: cport, lazyConnect: true });
  await r.connect();
  await chan.connect();
  const ops: Ops = {
    get: (k) => r.get(k), mget: (ks) => r.mget(ks), hget: (k, f) => r.hget(k, f), hmget: (k, fs) => r.hmget(k, ...fs),
    hgetall: (k) => r.hgetall(k), set: (k, v) => r.set(k, v), hset: (k, f, v) => r.hset(k, f, v), del: (k) => r.del(k),
    do: (args) => r.call(args[0], ...args.slice(1)),
    pipelineSet: (k, v) => r.pipeline().set(k, v).exec(),
    pipelineGet: async (k) => (await r.pipeline().get(k).exec())![0][1],
    pipelineWriteRead: async (k, v) => (await r.pipeline().set(k, v).get(k).exec())![1][1],
    select: (db) => r.select(db),
    pipelineSelectGet: async (db, k) => (await r.pipeline().select(db).get(k).exec())![1][1],
    multiGet: async (k) => (await r.multi().get(k).exec())![0][1],
    watchGet: async (k) => {
      await r.watch(k);
      const v = await r.get(k);
      await r.multi().get(k).exec();
      return v;
    },
  };
  return { client: r, chan, ops, async close() { r.disconnect(); chan.disconnect(); } };
}

async function nodeRedisOps(cfg: Config): Promise<{ client: any; chan: any; ops: Ops; close(): Promise<void> }> {
  const [host, port] = split(cfg.cache);
  const [chost, cport] = split(cfg.channel_addr);
  const auth = { username: cfg.username || undefined, password: cfg.password || undefined };
  const r: any = cfg.mode === 'cluster'
    ? createCluster({ rootNodes: seeds(cfg).map(([h, p]) => ({ socket: { host: h, port: p } })), defaults: auth })
    : cfg.mode === 'pool'
      ? createClientPool({ socket: { host, port }, database: cfg.db ?? 0, ...auth })
      : createClient({ socket: { host, port }, database: cfg.db ?? 0, ...auth });
  const chan: any = createClient({ socket: { host: chost, port: cport } });
  r.on('error', () => {});
  chan.on('error', () => {});
  // A pool is refused by install before it is used.
  if (cfg.mode !== 'pool') await r.connect();
  await chan.connect();
  const ops: Ops = {
    get: (k) => r.get(k), mget: (ks) => r.mGet(ks), hget: (k, f) => r.hGet(k, f), hmget: (k, fs) => r.hmGet(k, fs),
    hgetall: (k) => r.hGetAll(k), set: (k, v) => r.set(k, v), hset: (k, f, v) => r.hSet(k, f, v), del: (k) => r.del(k),
    do: (args) => (cfg.mode === 'cluster' ? r.sendCommand(args[1], false, args) : r.sendCommand(args)),
    pipelineSet: (k, v) => r.multi().set(k, v).execAsPipeline(),
    pipelineGet: async (k) => (await r.multi().get(k).execAsPipeline())[0],
    pipelineWriteRead: async (k, v) => (await r.multi().set(k, v).get(k).execAsPipeline())[1],
    select: (db) => r.select(db),
    pipelineSelectGet: async (db, k) => (await r.multi().select(db).get(k).execAsPipeline())[1],
    multiGet: async (k) => (await r.multi().get(k).exec())[0],
    watchGet: async (k) => {
      await r.watch(k);
      const v = await r.get(k);
      await r.multi().get(k).exec();
      return v;
    },
  };
  return { client: r, chan, ops, async close() { await (cfg.mode === 'single' || !cfg.mode ? r.quit() : r.close()); await chan.quit(); } };
}

const str = (v: any): any => (Buffer.isBuffer(v) ? v.toString('utf8') : v);

class Refused extends Error {}

async function main(): Promise<number> {
  const cfg: Config = JSON.parse(process.argv[process.argv.length - 1]);
  const lib = process.env.HOTSNIFF_NODE_CLIENT || 'ioredis';
  const out = (o: unknown) => process.stdout.write(JSON.stringify(o) + '\n');
  let env: Awaited<ReturnType<typeof ioredisOps>>;
  let shim: Awaited<ReturnType<typeof install>>;
  const logger = { info: (m: string) => console.error(m), warn: (m: string) => console.error(m) };
  try {
    if (cfg.mode && !MODES.includes(cfg.mode)) throw new Refused(`unknown mode ${JSON.stringify(cfg.mode)}: the Node adapter takes ${MODES.join(', ')}`);
    env = lib === 'node-redis' ? await nodeRedisOps(cfg) : await ioredisOps(cfg);
    shim = await install(env.client, {
      channelClient: env.chan, channel: cfg.channel, servers: cfg.servers, anyServer: cfg.any_server,
      localTtlMs: cfg.local_ttl_ms, staleGraceMs: cfg.stale_grace_ms, hotModeLingerMs: cfg.linger_ms,
      maxEntries: cfg.max_entries, logger, channelSecret: cfg.channel_secret || undefined,
    });
  } catch (err) {
    if (!(err instanceof Refused) && !(err instanceof TypeError)) throw err;
    out({ ready: false, error: (err as Error).message });
    return 2;
  }
  const { ops } = env;
  const timeout = new Promise((_, rej) => setTimeout(() => rej(new Error('snapshot never loaded')), 10_000).unref());
  await Promise.race([shim.synced, timeout]);
  out({ ready: true });

  const rl = readline.createInterface({ input: process.stdin });
  // Requests are answered one at a time, in order.
  for await (const line of rl) {
    const req = JSON.parse(line);
    const k = req.key_b64 !== undefined ? Buffer.from(req.key_b64, 'base64') : req.key;
    let res: any = {};
    try {
      switch (req.op) {
        case 'get': res = { value: str(await ops.get(k)) }; break;
        case 'mget': res = { values: (await ops.mget(req.keys)).map(str) }; break;
        case 'hget': res = { value: str(await ops.hget(k, req.field)) }; break;
        case 'hmget': res = { values: (await ops.hmget(k, req.fields)).map(str) }; break;
        case 'hgetall': res = { hash: await ops.hgetall(k) }; break;
        case 'set': await ops.set(k, req.value); break;
        case 'hset': await ops.hset(k, req.field, req.value); break;
        case 'del': await ops.del(k); break;
        case 'do': await ops.do(req.args); break;
        case 'pipeline_set': await ops.pipelineSet(k, req.value); break;
        case 'pipeline_get': res = { value: str(await ops.pipelineGet(k)) }; break;
        case 'select': await ops.select(Number(req.db)); break;
        case 'pipeline_select_get': res = { value: str(await ops.pipelineSelectGet(Number(req.db), k)) }; break;
        case 'pipeline_write_read': res = { value: str(await ops.pipelineWriteRead(k, req.value)) }; break;
        case 'multi_get': res = { value: str(await ops.multiGet(k)) }; break;
        case 'watch_get': res = { value: str(await ops.watchGet(k)) }; break;
        case 'burst': {
          const n = Number(req.n);
          res = { values: (await Promise.all(Array.from({ length: n }, () => ops.get(k)))).map(str) };
          break;
        }
        case 'hburst': {
          // Read i: HGET, HMGET or HGETALL in turn; its value of field.
          const n = Number(req.n), f = req.field;
          const one = async (i: number) => {
            try {
              if (i % 3 === 0) return str(await ops.hget(k, f));
              if (i % 3 === 1) return str((await ops.hmget(k, [f]))[0]);
              const h = await ops.hgetall(k);
              return str(h instanceof Map ? h.get(f) : h[f]) ?? null;
            } catch (err) {
              return String((err as Error).message);
            }
          };
          res = { values: await Promise.all(Array.from({ length: n }, (_, i) => one(i))) };
          break;
        }
        case 'hot': res = { hot: shim.isHot(k) }; break;
        case 'stats': {
          const st = shim.stats();
          res = { entries: st.entries, hot_keys: st.hotKeys, hot_mode: st.hotMode, hits: st.hits + st.staleHits,
            reloads: st.channel.reloads, messages: st.channel.messages, bad_messages: st.badMessages, channel_up: st.channelUp };
          break;
        }
        case 'watch': {
          const end = performance.now() + req.ms;
          let reads = 0, lastBad = 0;
          while (performance.now() < end) {
            const start = wallNs();
            const v = str(await ops.get(k));
            reads++;
            if (v !== req.want) lastBad = start;
          }
          res = { reads, last_bad_ns: lastBad };
          break;
        }
        case 'load': {
          const end = performance.now() + req.ms;
          let reads = 0, bad = 0;
          const loop = async () => {
            while (performance.now() < end) {
              const v = str(await ops.get(k));
              reads++;
              if (req.want !== undefined && v !== req.want) bad++;
            }
          };
          await Promise.all(Array.from({ length: Math.max(Number(req.threads) || 1, 1) }, loop));
          res = { reads, bad };
          break;
        }
        case 'trace': {
          // For each value seen, the wall-clock start (Unix ns) of the last
          // read that returned it; errors are counted, not thrown.
          const end = performance.now() + req.ms;
          const last: Record<string, number> = {};
          let reads = 0, errors = 0, nil = 0, firstError = '';
          const loop = async () => {
            while (performance.now() < end) {
              const start = wallNs();
              let v: any;
              try {
                v = str(await ops.get(k));
              } catch (err) {
                errors++;
                firstError = firstError || String((err as Error).message ?? err);
                continue;
              }
              reads++;
              if (v === null || v === undefined) nil++;
              else if (!(v in last) || last[v] < start) last[v] = start;
            }
          };
          await Promise.all(Array.from({ length: Math.max(Number(req.threads) || 1, 1) }, loop));
          res = { reads, errors, nil, first_error: firstError, last_ns: last };
          break;
        }
        case 'read_keys': {
          let reads = 0, errors = 0;
          for (let i = 0; i < Math.max(Number(req.n) || 1, 1); i++) {
            for (const key of req.keys) {
              try {
                await ops.get(key);
                reads++;
              } catch {
                errors++;
              }
            }
          }
          res = { reads, errors };
          break;
        }
        case 'close':
          await shim.close();
          out({});
          await env.close();
          return 0;
        default: res = { error: `unknown op ${req.op}` };
      }
    } catch (err) {
      res = { error: String((err as Error).message ?? err) };
    }
    out(res);
  }
  await shim.close();
  await env.close();
  return 0;
}

main().then((code) => process.exit(code), (err) => {
  console.error('node adapter:', err);
  process.exit(1);
});
