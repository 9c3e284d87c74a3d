// ioredis Cluster and node-redis createCluster against a real 3-master
// cluster created here: events apply per master (server ip:port), reads are
// served, a refresh and its report reach the node holding the key, and a
// slot moved mid-run under a writer every 10 ms never yields a read older
// than LocalTTL + StaleGrace after its replacing write, nor an error.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { performance } from 'node:perf_hooks';
import IORedis from 'ioredis';
import { createCluster } from 'redis';
import { install } from '../index';
import { Cluster, cli, sleep } from './servers';

/* eslint-disable @typescript-eslint/no-explicit-any */
let cl: Cluster;
const LOCAL_TTL = 50;
const GRACE = 100;
const quiet = { info: () => {}, warn: () => {} };

before(async () => {
  cl = await Cluster.start(3);
});

after(async () => {
  await cl.stop();
});

const nodeId = (port: number) => cli(port, 'CLUSTER', 'MYID').trim();
const slotOf = (port: number, key: string) => Number(cli(port, 'CLUSTER', 'KEYSLOT', key).trim());
function ownerOf(slot: number): number {
  const lines = cli(cl.nodes[0].port, 'CLUSTER', 'NODES').trim().split('\n');
  for (const l of lines) {
    const f = l.split(' ');
    const port = Number(f[1].split('@')[0].split(':')[1]);
    for (const r of f.slice(8)) {
      const [a, b] = r.split('-').map(Number);
      if (slot >= a && slot <= (b ?? a)) return port;
    }
  }
  throw new Error(`no owner for slot ${slot}`);
}
const stat = (port: number, name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(cli(port, 'INFO', 'commandstats'))?.[1] ?? 0);
const clients = (port: number) => cli(port, 'CLIENT', 'LIST').trim().split('\n').filter((l) => l && !/cmd=client\|list/.test(l)).length;

/** Moves slot from one master to another, as redis-cli --cluster reshard does. */
function moveSlot(slot: number, from: number, to: number) {
  const fromId = nodeId(from), toId = nodeId(to);
  cli(to, 'CLUSTER', 'SETSLOT', String(slot), 'IMPORTING', fromId);
  cli(from, 'CLUSTER', 'SETSLOT', String(slot), 'MIGRATING', toId);
  for (;;) {
    const keys = cli(from, 'CLUSTER', 'GETKEYSINSLOT', String(slot), '100').trim().split('\n').filter(Boolean);
    if (keys.length === 0) break;
    cli(from, 'MIGRATE', '127.0.0.1', String(to), '', '0', '5000', 'KEYS', ...keys);
  }
  for (const s of cl.nodes) cli(s.port, 'CLUSTER', 'SETSLOT', String(slot), 'NODE', toId);
}

interface Lib {
  name: string;
  make(): Promise<{ c: any; get(k: string): Promise<any>; set(k: string, v: string): Promise<any>; publish(ch: string, m: string): Promise<any>; close(): Promise<void> }>;
}

const LIBS: Lib[] = [
  {
    name: 'ioredis Cluster',
    async make() {
      const c = new IORedis.Cluster([{ host: '127.0.0.1', port: cl.nodes[0].port }]);
      await new Promise<void>((ok, bad) => { c.once('ready', ok); c.once('error', bad); });
      return { c, get: (k) => c.get(k), set: (k, v) => c.set(k, v), publish: (ch, m) => c.publish(ch, m), close: async () => { c.disconnect(); } };
    },
  },
  {
    name: 'node-redis createCluster',
    async make() {
      const c: any = createCluster({ rootNodes: [{ socket: { host: '127.0.0.1', port: cl.nodes[0].port } }] });
      c.on('error', () => {});
      await c.connect();
      return { c, get: (k) => c.get(k), set: (k, v) => c.set(k, v), publish: (ch, m) => c.publish(ch, m), close: async () => { await c.close(); } };
    },
  },
];

for (const lib of LIBS) {
  test(`${lib.name}: served per master, slot moved under a writer every 10 ms: no read too old, no error, connections closed`, async () => {
    const ch = `cl-${lib.name.split(' ')[0]}`;
    const key = `hot-${lib.name.split(' ')[0]}`;
    const slot = slotOf(cl.nodes[0].port, key);
    const owner = ownerOf(slot);
    const other = cl.nodes.map((s) => s.port).find((p) => p !== owner)!;
    const writer = await LIBS[0].make();
    const app = await lib.make();
    await writer.set(key, '0');
    const shim = await install(app.c, { channel: ch, localTtlMs: LOCAL_TTL, staleGraceMs: GRACE, logger: quiet });
    await shim.synced;
    let seq = 0;
    const hot = (port: number, node: string) =>
      writer.publish(ch, JSON.stringify({ v: 1, seq: ++seq, type: 'hot', proto: 'redis', server: `127.0.0.1:${port}`, ns: '0', key, qps: 1000, ttl_ms: 0, source: 'detected', node }));
    // An event for a server that is not in the cluster does not apply.
    await writer.publish(ch, JSON.stringify({ v: 1, seq: ++seq, type: 'hot', proto: 'redis', server: '127.0.0.9:1', ns: '0', key, qps: 1, ttl_ms: 0, source: 'detected', node: 'elsewhere' }));
    await sleep(100);
    assert.equal(shim.isHot(key), false, 'an event about another server applies');
    await hot(owner, 'd1');
    for (let i = 0; !shim.isHot(key); i++) {
      assert.ok(i < 500, 'never hot');
      await sleep(10);
    }

    // The writer: a new value every 10 ms, each with when its write was acknowledged.
    const acked: number[] = [];
    let writing = true;
    let wErr = 0;
    const w = (async () => {
      for (let v = 1; writing; v++) {
        try {
          await writer.set(key, String(v));
          acked[v] = performance.now();
        } catch {
          wErr++;
        }
        await sleep(10);
      }
    })();
    const gets0 = cl.nodes.reduce((n, s) => n + stat(s.port, 'get'), 0);
    const echo0 = stat(owner, 'echo');
    let reads = 0, errors = 0, tooOld = 0, worst = 0;
    const run = async (ms: number) => {
      const end = performance.now() + ms;
      while (performance.now() < end) {
        const t0 = performance.now();
        let v: number;
        try {
          v = Number(await app.get(key));
        } catch {
          errors++;
          continue;
        }
        reads++;
        // The write that replaced v: the read started after it by at most the bound.
        const rep = acked[v + 1];
        if (rep !== undefined && t0 > rep) {
          worst = Math.max(worst, t0 - rep);
          if (t0 - rep > LOCAL_TTL + GRACE) tooOld++;
        }
      }
    };
    await run(1500);
    assert.ok(stat(owner, 'echo') > echo0, 'absorbed reports reach the owner');
    moveSlot(slot, owner, other);
    await hot(other, 'd2');
    await run(1500);
    writing = false;
    await w;
    const sent = cl.nodes.reduce((n, s) => n + stat(s.port, 'get'), 0) - gets0;
    // The figures, for the docs.
    console.error(`${lib.name}: ${reads} reads, ${sent} GETs at the masters (${((1 - sent / reads) * 100).toFixed(2)}% served), ` +
      `${acked.length - 1} writes (${wErr} failed during the move), oldest read after its replacing write ${worst.toFixed(1)} ms`);
    assert.equal(errors, 0, 'errors reached the application');
    assert.equal(tooOld, 0, `${tooOld} of ${reads} reads older than ${LOCAL_TTL + GRACE} ms after their replacing write (worst ${worst.toFixed(1)} ms)`);
    assert.ok(reads > 500, `${reads} reads`);
    assert.ok(1 - sent / reads >= 0.95, `served ${((1 - sent / reads) * 100).toFixed(2)}% (${sent} GETs of ${reads} reads)`);
    assert.ok(stat(other, 'get') > 0, 'refreshes follow the slot to its new owner');
    void wErr;
    await shim.close();
    await app.close();
    await writer.close();
    // Nothing the shim opened stays open (the channel's duplicate included).
    for (let i = 0; ; i++) {
      const now = cl.nodes.map((s) => clients(s.port));
      if (now.every((n) => n === 0)) break;
      assert.ok(i < 200, `connections left open after closing everything: ${now}`);
      await sleep(25);
    }
  });
}

for (const lib of LIBS) {
  test(`${lib.name}: one read is one read; after the slot moves, the first read goes once to the new master, then reads are served again`, async (tt) => {
    const ch = `mv-${lib.name.split(' ')[0]}`;
    const tag = `{mv-${lib.name.split(' ')[0]}}`;
    const key = `${tag}k`;
    const slot = slotOf(cl.nodes[0].port, key);
    const owner = ownerOf(slot);
    const other = cl.nodes.map((s) => s.port).find((p) => p !== owner)!;
    const writer = await LIBS[0].make();
    const app = await lib.make();
    await writer.set(key, 'v1');
    // A local TTL far longer than the test: only the move can end the copy.
    const shim = await install(app.c, { channel: ch, localTtlMs: 60_000, staleGraceMs: GRACE, logger: quiet });
    // Closed even when an assertion fails, so the run ends.
    tt.after(async () => {
      await shim.close();
      await app.close();
      await writer.close();
    });
    await shim.synced;
    await writer.publish(ch, JSON.stringify({ v: 1, seq: 1, type: 'hot', proto: 'redis', server: `127.0.0.1:${owner}`, ns: '0', key, qps: 1000, ttl_ms: 0, source: 'detected', node: 'd1' }));
    for (let i = 0; !shim.isHot(key); i++) {
      assert.ok(i < 500, 'never hot');
      await sleep(10);
    }
    const gets = () => cl.nodes.reduce((n, s) => n + stat(s.port, 'get'), 0);
    const read = async (want: string, remote: number, what: string) => {
      const g0 = gets();
      assert.equal(await app.get(key), want, what);
      assert.equal(gets() - g0, remote, `${what}: GETs that reached the masters`);
    };
    // The first read of a node's connection waits for it to connect: it
    // still counts once (recorded, sent), the second fetches, the third is local.
    await read('v1', 1, 'first read');
    await read('v1', 1, 'second read');
    await read('v1', 0, 'third read');
    moveSlot(slot, owner, other);
    // Written at the new master by another client: no event says so.
    cli(other, 'SET', key, 'v2');
    // The application writes another key of the slot: the library follows
    // the MOVED reply and now routes the slot to the new master.
    await app.set(`${tag}other`, 'x');
    const g0 = stat(other, 'get');
    await read('v2', 1, 'first read after the move');
    assert.equal(stat(other, 'get') - g0, 1, 'the read after the move went to the new master');
    await read('v2', 0, 'second read after the move');
    await read('v2', 0, 'third read after the move');
  });
}
