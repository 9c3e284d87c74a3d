// Namespaces: a value read in one DB is never served in another, whatever
// way the client changes DB (select, a raw SELECT, a pipeline or MULTI that
// selects, a DB in the URL). Counted by reading each DB's own value.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import IORedis from 'ioredis';
import { createClient, createClientPool } from 'redis';
import { install } from '../index';
import { Server, sleep } from './servers';

/* eslint-disable @typescript-eslint/no-explicit-any */
let srv: Server;
let admin: IORedis;
const gets = async () => Number(/cmdstat_get:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);

before(async () => {
  srv = await Server.start();
  admin = new IORedis({ port: srv.port });
});

after(async () => {
  admin.disconnect();
  await srv.stop();
});

let seq = 0;
async function publishHot(channel: string, key: string, ns: string) {
  await admin.publish(channel, JSON.stringify({ v: 1, seq: ++seq, type: 'hot', proto: 'redis', server: '', ns, key, qps: 1, ttl_ms: 0, source: 'manual', node: 'ns-test' }));
}

async function until(f: () => boolean, what: string) {
  for (let i = 0; !f(); i++) {
    if (i > 500) throw new Error(`never ${what}`);
    await sleep(10);
  }
}

// Both DBs hold their own k; k is hot in DB 0 and DB 1 (a hot DB 1 entry is
// what would let a copy refreshed from DB 1 be kept).
async function setup(channel: string) {
  const a0 = new IORedis({ port: srv.port, db: 0 });
  const a1 = new IORedis({ port: srv.port, db: 1 });
  await a0.set('k', 'db0');
  await a1.set('k', 'db1');
  a0.disconnect();
  a1.disconnect();
}

async function readMany(n: number, read: () => Promise<unknown>, want: string, bad: { n: number; total: number }) {
  for (let i = 0; i < n; i++) {
    const v = await read();
    bad.total++;
    if (v !== want) bad.n++;
    await sleep(2);
  }
}

test('ioredis: after select(1) no DB 0 value, after select(0) no DB 1 value (method, call, pipeline, multi)', async () => {
  await setup('ns-io');
  const r = new IORedis({ port: srv.port });
  const shim = await install(r, { channel: 'ns-io', localTtlMs: 60_000 });
  await shim.synced;
  await publishHot('ns-io', 'k', '0');
  await publishHot('ns-io', 'k', '1');
  await until(() => shim.isHot('k'), 'hot');
  const bad = { n: 0, total: 0 };
  await readMany(5, () => r.get('k'), 'db0', bad);
  const served = shim.stats().hits;
  assert.ok(served >= 2, `served ${served} on DB 0`);
  const forms: [string, (db: number) => Promise<unknown>][] = [
    ['select', (db) => r.select(db)],
    ['call', (db) => r.call('SELECT', String(db))],
    ['pipeline', (db) => r.pipeline().select(db).exec()],
    ['multi', (db) => r.multi().select(db).exec()],
  ];
  for (const [, sel] of forms) {
    await sel(1);
    await readMany(8, () => r.get('k'), 'db1', bad);
    await readMany(3, async () => (await r.pipeline().get('k').exec())![0][1], 'db1', bad);
    await readMany(3, async () => (await r.mget('k', 'k'))[0], 'db1', bad);
    await sel(0);
    await readMany(8, () => r.get('k'), 'db0', bad);
    await readMany(3, async () => (await r.pipeline().get('k').exec())![0][1], 'db0', bad);
  }
  assert.equal(bad.n, 0, `${bad.n} of ${bad.total} reads returned another DB's value`);
  // Back on DB 0 the shim serves again.
  const h = shim.stats().hits;
  await readMany(5, () => r.get('k'), 'db0', bad);
  assert.ok(shim.stats().hits > h, 'serving resumed on DB 0');
  await shim.close();
  r.disconnect();
});

test('ioredis: a DB in the URL is the namespace served', async () => {
  await setup('ns-url');
  const r = new IORedis(`redis://127.0.0.1:${srv.port}/1`);
  const shim = await install(r, { channel: 'ns-url', localTtlMs: 60_000 });
  await shim.synced;
  await publishHot('ns-url', 'k', '0');
  await sleep(50);
  assert.equal(shim.isHot('k'), false, 'a DB 0 event does not apply to a DB 1 client');
  await publishHot('ns-url', 'k', '1');
  await until(() => shim.isHot('k'), 'hot');
  const bad = { n: 0, total: 0 };
  await readMany(6, () => r.get('k'), 'db1', bad);
  assert.equal(bad.n, 0);
  assert.ok(shim.stats().hits >= 3);
  await shim.close();
  r.disconnect();
});

test('node-redis: select, pipeline and MULTI selects followed; a raw SELECT stops serving; DB in the URL', async () => {
  await setup('ns-nr');
  const c: any = createClient({ socket: { port: srv.port } });
  c.on('error', () => {});
  await c.connect();
  const logs: string[] = [];
  const shim = await install(c, { channel: 'ns-nr', localTtlMs: 60_000, logger: { info: () => {}, warn: (m: string) => logs.push(m) } });
  await shim.synced;
  await publishHot('ns-nr', 'k', '0');
  await publishHot('ns-nr', 'k', '1');
  await until(() => shim.isHot('k'), 'hot');
  const bad = { n: 0, total: 0 };
  await readMany(5, () => c.get('k'), 'db0', bad);
  assert.ok(shim.stats().hits >= 2);
  const forms: ((db: number) => Promise<unknown>)[] = [
    (db) => c.select(db),
    (db) => c.multi().select(db).execAsPipeline(),
    (db) => c.multi().select(db).exec(),
  ];
  for (const sel of forms) {
    await sel(1);
    await readMany(8, () => c.get('k'), 'db1', bad);
    await readMany(3, async () => (await c.multi().get('k').execAsPipeline())[0], 'db1', bad);
    await readMany(3, async () => (await c.mGet(['k', 'k']))[0], 'db1', bad);
    await sel(0);
    await readMany(8, () => c.get('k'), 'db0', bad);
  }
  assert.equal(bad.n, 0, `${bad.n} of ${bad.total} reads returned another DB's value`);
  let h = shim.stats().hits;
  await readMany(5, () => c.get('k'), 'db0', bad);
  assert.ok(shim.stats().hits > h, 'serving resumed on DB 0');
  // A raw SELECT: node-redis does not know of it; the shim stops serving.
  await c.sendCommand(['SELECT', '1']);
  await readMany(6, () => c.get('k'), 'db1', bad);
  await c.sendCommand(['SELECT', '0']);
  h = shim.stats().hits;
  const g = await gets();
  await readMany(6, () => c.get('k'), 'db0', bad);
  assert.equal(shim.stats().hits, h, 'nothing served after a raw SELECT');
  assert.equal(await gets(), g + 6);
  assert.equal(bad.n, 0);
  assert.ok(logs.some((m) => /raw SELECT/.test(m)), 'said once why');
  await shim.close();
  await c.quit();

  const u: any = createClient({ url: `redis://127.0.0.1:${srv.port}/1` });
  await u.connect();
  const s2 = await install(u, { channel: 'ns-nr', localTtlMs: 60_000 });
  await s2.synced;
  await publishHot('ns-nr', 'k', '1');
  await until(() => s2.isHot('k'), 'hot');
  await readMany(6, () => u.get('k'), 'db1', bad);
  assert.equal(bad.n, 0);
  await s2.close();
  await u.quit();
});

test('node-redis: a client pool is refused at install with what is supported', async () => {
  const pool: any = createClientPool({ socket: { port: srv.port } });
  await assert.rejects(install(pool, { channel: 'ns-pool' }), /createClientPool\) is not supported; install takes an ioredis Redis or Cluster, or a node-redis client \(createClient\) or cluster \(createCluster\)/);
  await assert.rejects(install({}, {}), /install takes an ioredis Redis or Cluster/);
  // Connected and in use: refused the same way, and left as it was.
  await pool.connect();
  await pool.set('pool-k', 'v');
  const pooledSend = pool._self?.sendCommand ?? pool.sendCommand;
  await assert.rejects(install(pool, { channel: 'ns-pool' }), /createClientPool\) is not supported; install takes an ioredis Redis or Cluster/);
  assert.equal(pool._self?.sendCommand ?? pool.sendCommand, pooledSend);
  assert.equal(await pool.get('pool-k'), 'v');
  // Nor is it taken as the channel client.
  const c: any = createClient({ socket: { port: srv.port } });
  await c.connect();
  await assert.rejects(install(c, { channel: 'ns-pool', channelClient: pool }), /channelClient must be an ioredis Redis or Cluster, or a node-redis client \(createClient\) or cluster \(createCluster\)/);
  assert.equal(await c.get('pool-k'), 'v');
  await c.quit();
  await pool.close();
});
