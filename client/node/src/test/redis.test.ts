// The shim against a real redis-server (started here), for what the
// conformance suite does not reach: reply forms and unwrapping.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { spawn, ChildProcess } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import IORedis from 'ioredis';
import { createClient } from 'redis';
import { install } from '../index';

/* eslint-disable @typescript-eslint/no-explicit-any */
let srv: ChildProcess;
let port = 0;
let admin: IORedis;

before(async () => {
  port = await new Promise<number>((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hsnode'));
  srv = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  admin = new IORedis({ port, lazyConnect: true });
  for (let i = 0; ; i++) {
    try { await admin.connect(); break; } catch { if (i > 200) throw new Error('no redis-server'); await new Promise((r) => setTimeout(r, 25)); }
  }
});

after(async () => {
  admin.disconnect();
  srv.kill();
});

const gets = async () => Number(/cmdstat_get:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);

async function makeHot(shim: { isHot(k: string): boolean }, channel: string, key: string) {
  await admin.publish(channel, JSON.stringify({ v: 1, seq: 1, type: 'hot', proto: 'redis', server: '', ns: '0', key, qps: 1, ttl_ms: 0, ts: '', source: 'manual', node: 't' }));
  for (let i = 0; !shim.isHot(key); i++) {
    if (i > 500) throw new Error('never hot');
    await new Promise((r) => setTimeout(r, 10));
  }
}

test('ioredis: get and getBuffer share the cached value, each in its own form', async () => {
  await admin.set('kb', 'vé');
  const r = new IORedis({ port });
  const shim = await install(r, { channel: 'tb', localTtlMs: 60_000 });
  await shim.synced;
  await makeHot(shim, 'tb', 'kb');
  await r.get('kb');
  await r.get('kb');
  const n = await gets();
  assert.equal(await r.get('kb'), 'vé');
  const b = await r.getBuffer('kb');
  assert.ok(Buffer.isBuffer(b) && b.equals(Buffer.from('vé')));
  assert.equal(await gets(), n);
  await shim.close();
  assert.equal(await r.get('kb'), 'vé');
  assert.equal(await gets(), n + 1, 'close unwraps the client');
  r.disconnect();
});

test('node-redis: served values, close unwraps', async () => {
  await admin.set('kn', 'v');
  const c: any = createClient({ socket: { port } });
  await c.connect();
  const shim = await install(c, { channel: 'tn', localTtlMs: 60_000 });
  await shim.synced;
  await makeHot(shim, 'tn', 'kn');
  await c.get('kn');
  await c.get('kn');
  const n = await gets();
  assert.equal(await c.get('kn'), 'v');
  assert.deepEqual(await c.mGet(['kn', 'kn']), ['v', 'v']);
  assert.equal(await gets(), n);
  await shim.close();
  assert.equal(await c.get('kn'), 'v');
  assert.equal(await gets(), n + 1);
  await c.quit();
});

test('a silent channel is checked with PING', async () => {
  const r = new IORedis({ port });
  const shim = await install(r, { channel: 'tp', subscriber: { pingIntervalMs: 1000 } });
  await shim.synced;
  const before = Number(/cmdstat_ping:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
  await new Promise((res) => setTimeout(res, 2500));
  const after = Number(/cmdstat_ping:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
  assert.ok(after > before, `PINGs ${before} -> ${after}`);
  await shim.close();
  r.disconnect();
});

const calls = async (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(await admin.info('commandstats'))?.[1] ?? 0);

async function hotSeq(shim: { isHot(k: string): boolean }, channel: string, key: string, seq: number) {
  await admin.publish(channel, JSON.stringify({ v: 1, seq, type: 'hot', proto: 'redis', server: '', ns: '0', key, qps: 1, ttl_ms: 0, ts: '', source: 'manual', node: 't' }));
  for (let i = 0; !shim.isHot(key); i++) {
    if (i > 500) throw new Error('never hot');
    await new Promise((r) => setTimeout(r, 10));
  }
}

// Both libraries: hk (string) and hh (hash) hot and cached, ck cold.
async function pipeSetup(channel: string, client: any, kind: 'io' | 'nr') {
  await admin.set('hk', 'hv');
  await admin.set('ck', 'cv');
  await admin.del('hh');
  await admin.hset('hh', 'f', '1', 'g', '2');
  await admin.set('str', 'x');
  const shim = await install(client, { channel, localTtlMs: 60_000 });
  await shim.synced;
  await hotSeq(shim, channel, 'hk', 1);
  await hotSeq(shim, channel, 'hh', 2);
  for (let i = 0; i < 2; i++) {
    await client.get('hk');
    await (kind === 'io' ? client.hgetall('hh') : client.hGetAll('hh'));
  }
  return shim;
}

test('ioredis pipeline: hot reads served, order and types kept, writes sent whole, multi never served', async () => {
  const r = new IORedis({ port });
  const shim = await pipeSetup('tpio', r, 'io');
  let g = await gets();
  let hits = shim.stats().hits;
  // All hot: nothing is sent at all.
  assert.deepEqual(await r.pipeline().get('hk').get('hk').exec(), [[null, 'hv'], [null, 'hv']]);
  assert.equal(await gets(), g);
  assert.equal(shim.stats().hits, hits + 2);
  // Mixed hot and cold, every reply form as ioredis gives it.
  const hg = await calls('hgetall');
  const res = await r.pipeline()
    .get('ck').get('hk').hgetall('hh').get('missing').hget('hh', 'g').hmget('hh', 'f', 'x')
    .mget('hk', 'hk').mget('hk', 'ck').getBuffer('hk').hlen('hh').hget('str', 'f').exec();
  assert.equal(res!.length, 11);
  assert.deepEqual(res!.slice(0, 9), [[null, 'cv'], [null, 'hv'], [null, { f: '1', g: '2' }], [null, null], [null, '2'], [null, ['1', null]],
    [null, ['hv', 'hv']], [null, ['hv', 'cv']], [null, Buffer.from('hv')]]);
  assert.deepEqual(res![9], [null, 2]);
  assert.ok(res![10][0] instanceof Error && /WRONGTYPE/.test(String(res![10][0])));
  assert.equal(await gets(), g + 2, 'only the cold GETs reach Redis');
  assert.equal(await calls('hgetall'), hg);
  // Callback form.
  const viaCb = await new Promise((ok, bad) => r.pipeline().get('hk').exec((err, out) => (err ? bad(err) : ok(out))));
  assert.deepEqual(viaCb, [[null, 'hv']]);
  // A pipeline that writes is sent whole, its reads see its write.
  g = await gets();
  const sets = await calls('set');
  assert.deepEqual(await r.pipeline().get('hk').set('hk', 'new').get('hk').exec(), [[null, 'hv'], [null, 'OK'], [null, 'new']]);
  assert.equal(await gets(), g + 2);
  assert.equal(await calls('set'), sets + 1);
  assert.equal(await r.get('hk'), 'new', 'the write dropped the cached value');
  // Transactions are never served.
  await r.get('hk');
  g = await gets();
  hits = shim.stats().hits;
  assert.deepEqual(await r.multi().get('hk').exec(), [[null, 'new']]);
  assert.deepEqual(await r.multi().get('hk').get('hk').exec(), [[null, 'new'], [null, 'new']]);
  assert.equal(await gets(), g + 3);
  assert.equal(shim.stats().hits, hits);
  await shim.close();
  r.disconnect();
});

test('node-redis execAsPipeline: hot reads served, order and types kept, writes sent whole, multi never served', async () => {
  const c: any = createClient({ socket: { port } });
  await c.connect();
  const shim = await pipeSetup('tpnr', c, 'nr');
  let g = await gets();
  let hits = shim.stats().hits;
  assert.deepEqual(await c.multi().get('hk').get('hk').execAsPipeline(), ['hv', 'hv']);
  assert.equal(await gets(), g);
  assert.equal(shim.stats().hits, hits + 2);
  // The hash in the form this node-redis version gives it (v5: a
  // null-prototype object, v6: a plain one).
  const plainC: any = createClient({ socket: { port } });
  await plainC.connect();
  const [hash] = await plainC.multi().hGetAll('hh').execAsPipeline();
  await plainC.quit();
  const hg = await calls('hgetall');
  const res = await c.multi()
    .get('ck').get('hk').hGetAll('hh').get('missing').hGet('hh', 'g').hmGet('hh', ['f', 'x'])
    .mGet(['hk', 'hk']).mGet(['hk', 'ck']).hLen('hh').execAsPipeline();
  assert.deepEqual(res, ['cv', 'hv', hash, null, '2', ['1', null], ['hv', 'hv'], ['hv', 'cv'], 2]);
  assert.equal(await gets(), g + 2, 'only the cold GETs reach Redis');
  assert.equal(await calls('hgetall'), hg);
  // An error among served replies: what node-redis itself would throw.
  const plain: any = createClient({ socket: { port } });
  await plain.connect();
  const want = await plain.multi().get('hk').hGet('str', 'f').execAsPipeline().then(() => null, (e: any) => e);
  await plain.quit();
  assert.ok(want instanceof Error);
  const got = await c.multi().get('hk').hGet('str', 'f').execAsPipeline().then(() => null, (e: any) => e);
  assert.equal(got?.constructor, want.constructor);
  assert.equal(got?.message, want.message);
  assert.deepEqual(got?.errorIndexes, (want as any).errorIndexes);
  g = await gets();
  const sets = await calls('set');
  assert.deepEqual(await c.multi().get('hk').set('hk', 'new').get('hk').execAsPipeline(), ['hv', 'OK', 'new']);
  assert.equal(await gets(), g + 2);
  assert.equal(await calls('set'), sets + 1);
  assert.equal(await c.get('hk'), 'new');
  await c.get('hk');
  g = await gets();
  hits = shim.stats().hits;
  assert.deepEqual(await c.multi().get('hk').exec(), ['new']);
  assert.equal(await gets(), g + 1);
  assert.equal(shim.stats().hits, hits);
  await shim.close();
  await c.quit();
});

// Holds the server for `us` microseconds: every command sent meanwhile
// waits, as behind a slow refresh under load.
const BUSY = "local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] " +
  "while true do local n = redis.call('TIME') if n[1] * 1000000 + n[2] - s > tonumber(ARGV[1]) then return 1 end end";

async function holdServer(us = 300_000): Promise<Promise<unknown>> {
  const h = new IORedis({ port });
  const done = h.eval(BUSY, 0, us).finally(() => h.disconnect());
  await new Promise((r) => setTimeout(r, 50)); // the script is running
  return done;
}

async function invalidate(shim: any, channel: string, key: string, seq: number) {
  const before = shim.stats().invalidations.event;
  await admin.publish(channel, JSON.stringify({ v: 1, seq, type: 'invalidate', proto: 'redis', server: '', ns: '0', key, ts: '', node: 't' }));
  for (let i = 0; shim.stats().invalidations.event === before; i++) {
    if (i > 500) throw new Error('invalidate not applied');
    await new Promise((r) => setTimeout(r, 10));
  }
}

// After an invalidate message (a write this client did not make), GETs
// arriving while the one refresh is in flight get its reply instead of each
// going to Redis, and all see the new value.
for (const lib of ['ioredis', 'node-redis']) {
  test(`${lib}: invalidated readers share the refresh in flight`, async () => {
    const key = `kw-${lib}`, channel = `tw-${lib}`;
    await admin.set(key, 'v1');
    const c: any = lib === 'ioredis' ? new IORedis({ port }) : createClient({ socket: { port } });
    if (lib !== 'ioredis') await c.connect();
    const shim = await install(c, { channel, localTtlMs: 60_000, staleGraceMs: 5000 });
    try {
      await shim.synced;
      await makeHot(shim, channel, key);
      await c.get(key);
      assert.equal(await c.get(key), 'v1');
      for (let round = 0; round < 2; round++) {
        const v = `v${round + 2}`;
        await admin.set(key, v);
        await invalidate(shim, channel, key, 2 + round);
        const n = await gets();
        const held = await holdServer();
        const vals = await Promise.all(Array.from({ length: 16 }, () => c.get(key)));
        await held;
        assert.deepEqual(vals, Array(16).fill(v));
        assert.equal(await gets() - n, 1, `16 reads after the invalidation sent ${await gets() - n} GETs`);
      }
      assert.equal(shim.stats().waitHits, 30);
      // A write through the client itself: readers after it never get a
      // refresh sent before it.
      await invalidate(shim, channel, key, 4);
      const held = await holdServer();
      const first = c.get(key); // the refresh, sent before the write
      const w = c.set(key, 'v9');
      const after = await Promise.all(Array.from({ length: 4 }, () => c.get(key)));
      await Promise.all([first, w, held]);
      assert.deepEqual(after, Array(4).fill('v9'));
    } finally {
      await shim.close();
      if (lib === 'ioredis') c.disconnect(); else await c.quit();
    }
  });
}

// The hash reads' form per library: read i is an HGET, HMGET or HGETALL as
// i mod 3 is 0, 1 or 2; its value of field f.
const hashReads = (lib: string, c: any, key: string, n: number) => Promise.all(Array.from({ length: n }, async (_, i) => {
  if (i % 3 === 0) return c[lib === 'ioredis' ? 'hget' : 'hGet'](key, 'f');
  if (i % 3 === 1) return (await c[lib === 'ioredis' ? 'hmget' : 'hmGet'](key, ['f']))[0];
  const h = await c[lib === 'ioredis' ? 'hgetall' : 'hGetAll'](key);
  assert.deepEqual({ ...h }, { f: h.f, g: 'x' });
  return h.f;
}));

// As for GETs: after an invalidate message, hash reads arriving while the
// one HGETALL refresh is in flight are answered from the hash it reads,
// each in its own command's form; a write through the client keeps the
// reads after it from a refresh sent before it.
for (const lib of ['ioredis', 'node-redis']) {
  test(`${lib}: invalidated hash readers share the HGETALL in flight`, async () => {
    const key = `hw-${lib}`, channel = `thw-${lib}`;
    await admin.hset(key, 'f', 'v1', 'g', 'x');
    const c: any = lib === 'ioredis' ? new IORedis({ port }) : createClient({ socket: { port } });
    if (lib !== 'ioredis') await c.connect();
    const shim = await install(c, { channel, localTtlMs: 60_000, staleGraceMs: 5000 });
    try {
      await shim.synced;
      await makeHot(shim, channel, key);
      await hashReads(lib, c, key, 2);
      let n = await calls('hgetall');
      assert.deepEqual(await hashReads(lib, c, key, 3), ['v1', 'v1', 'v1']);
      assert.equal(await calls('hgetall'), n);
      for (let round = 0; round < 2; round++) {
        const v = `v${round + 2}`;
        await admin.hset(key, 'f', v);
        await invalidate(shim, channel, key, 2 + round);
        const [h, g, m] = [await calls('hgetall'), await calls('hget'), await calls('hmget')];
        const held = await holdServer();
        const vals = await hashReads(lib, c, key, 16);
        await held;
        assert.deepEqual(vals, Array(16).fill(v));
        assert.deepEqual([await calls('hgetall') - h, await calls('hget') - g, await calls('hmget') - m], [1, 0, 0]);
      }
      assert.equal(shim.stats().waitHits, 30);
      await invalidate(shim, channel, key, 4);
      const held = await holdServer();
      const first = c[lib === 'ioredis' ? 'hget' : 'hGet'](key, 'f'); // the refresh, sent before the write
      const w = c[lib === 'ioredis' ? 'hset' : 'hSet'](key, 'f', 'v9');
      const after = await hashReads(lib, c, key, 6);
      await Promise.all([first, w, held]);
      assert.deepEqual(after, Array(6).fill('v9'));
    } finally {
      await shim.close();
      if (lib === 'ioredis') c.disconnect(); else await c.quit();
    }
  });

  // A user who may not send HGETALL: the shim's refresh is refused, and
  // the readers arriving meanwhile must not get its refusal: each sends its
  // own command.
  test(`${lib}: a refused HGETALL refresh is not shared`, async () => {
    const key = `hr-${lib}`, channel = `thr-${lib}`, user = `nohgetall-${lib}`;
    await admin.hset(key, 'f', 'v1', 'g', 'x');
    await admin.call('ACL', 'SETUSER', user, 'on', '>pw', '~*', '&*', '+@all', '-hgetall');
    const o = { username: user, password: 'pw' };
    const c: any = lib === 'ioredis' ? new IORedis({ port, ...o }) : createClient({ socket: { port }, ...o });
    if (lib !== 'ioredis') await c.connect();
    const shim = await install(c, { channel, localTtlMs: 60_000, staleGraceMs: 5000 });
    try {
      await shim.synced;
      await makeHot(shim, channel, key);
      for (let round = 0; round < 2; round++) {
        const held = await holdServer();
        const vals = await Promise.all(Array.from({ length: 8 }, () => c[lib === 'ioredis' ? 'hget' : 'hGet'](key, 'f')));
        await held;
        assert.deepEqual(vals, Array(8).fill('v1'));
      }
      assert.equal(shim.stats().waitHits, 0);
    } finally {
      await shim.close();
      if (lib === 'ioredis') c.disconnect(); else await c.quit();
      await admin.call('ACL', 'DELUSER', user);
    }
  });
}

// A hot key of another type: every hash read gets the server's WRONGTYPE
// (the refresher's own command too), and no copy of it is left unhandled
// (which would end a Node process).
test('ioredis: hash reads of a hot string get WRONGTYPE, no rejection unhandled', async () => {
  const key = 'hs-io', channel = 'ths-io';
  await admin.set(key, 'str');
  const unhandled: unknown[] = [];
  const on = (e: unknown) => unhandled.push(e);
  process.on('unhandledRejection', on);
  const c = new IORedis({ port });
  const shim = await install(c, { channel });
  try {
    await shim.synced;
    await makeHot(shim, channel, key);
    for (let i = 0; i < 4; i++) {
      await assert.rejects(c.hget(key, 'f'), /WRONGTYPE/);
      await assert.rejects(c.hgetall(key), /WRONGTYPE/);
    }
    await new Promise((r) => setTimeout(r, 50));
    assert.deepEqual(unhandled, []);
  } finally {
    process.off('unhandledRejection', on);
    await shim.close();
    c.disconnect();
  }
});
