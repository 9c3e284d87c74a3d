// Bounded local memory and the big-hash verdict, against a real redis-server.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import IORedis from 'ioredis';
import { createClient } from 'redis';
import { install } from '../index';
import { Server, sleep } from './servers';

/* eslint-disable @typescript-eslint/no-explicit-any */
let srv: Server;
let admin: IORedis;
const calls = async (name: string) => Number(new RegExp(`cmdstat_${name}:calls=(\\d+)`).exec(await admin.info('commandstats'))?.[1] ?? 0);
const quiet = { info: () => {}, warn: () => {} };

before(async () => {
  srv = await Server.start();
  admin = new IORedis({ port: srv.port });
});

after(async () => {
  admin.disconnect();
  await srv.stop();
});

let seq = 0;
const publish = (ch: string, key: string, type = 'hot') =>
  admin.publish(ch, JSON.stringify({ v: 1, seq: ++seq, type, proto: 'redis', server: '', ns: '0', key, qps: 1, ttl_ms: 0, source: 'manual', node: 'b' }));

async function until(f: () => boolean, what: string) {
  for (let i = 0; !f(); i++) {
    if (i > 500) throw new Error(`never ${what}`);
    await sleep(10);
  }
}

async function client(lib: 'io' | 'nr'): Promise<{ c: any; hgetall: (k: string) => Promise<any>; done: () => Promise<void> }> {
  if (lib === 'io') {
    const c = new IORedis({ port: srv.port });
    return { c, hgetall: (k) => c.hgetall(k), done: async () => c.disconnect() };
  }
  const c: any = createClient({ socket: { port: srv.port } });
  await c.connect();
  return { c, hgetall: (k) => c.hGetAll(k), done: async () => { await c.quit(); } };
}

for (const lib of ['io', 'nr'] as const) {
  test(`${lib}: a too-big hash's verdict survives cold, hot and re-admission: HLEN once, never HGETALL'd by the shim`, async () => {
    const ch = `big-${lib}`;
    await admin.del('big');
    const args: string[] = [];
    for (let i = 0; i < 20; i++) args.push(`f${i}`, 'x');
    await admin.hset('big', ...args);
    const { c, hgetall, done } = await client(lib);
    const shim = await install(c, { channel: ch, maxHashFields: 10, localTtlMs: 60_000, logger: quiet });
    await shim.synced;
    const hlen0 = await calls('hlen');
    const hga0 = await calls('hgetall');
    for (let round = 0; round < 3; round++) {
      await publish(ch, 'big');
      await until(() => shim.isHot('big'), 'hot');
      for (let i = 0; i < 4; i++) assert.equal(Object.keys(await hgetall('big')).length, 20);
      await publish(ch, 'big', 'cold');
      await until(() => !shim.isHot('big'), 'cold');
    }
    assert.equal((await calls('hlen')) - hlen0, 1, 'HLEN sent once across three admissions');
    assert.equal((await calls('hgetall')) - hga0, 12, "only the callers' own HGETALLs");
    assert.equal(shim.stats().uncacheable, 1);
    await shim.close();
    await done();
  });

  test(`${lib}: local memory is bounded in bytes, and a value over the per-value limit is not cached`, async () => {
    const ch = `bytes-${lib}`;
    const { c, done } = await client(lib);
    const shim = await install(c, { channel: ch, maxBytes: 20_000, maxValueBytes: 4_000, localTtlMs: 60_000, logger: quiet });
    await shim.synced;
    for (let i = 0; i < 40; i++) {
      await admin.set(`m${i}`, 'y'.repeat(1000));
      await publish(ch, `m${i}`);
    }
    await admin.set('huge', 'z'.repeat(10_000));
    await publish(ch, 'huge');
    await until(() => shim.isHot('huge'), 'hot');
    for (let r = 0; r < 3; r++) for (let i = 0; i < 40; i++) assert.equal((await c.get(`m${i}`)).length, 1000);
    const st = shim.stats();
    assert.ok(st.bytes <= 20_000, `${st.bytes} bytes cached`);
    assert.ok(st.evictions.capacity > 0, 'evicted to stay within the bytes');
    const g = await calls('get');
    for (let r = 0; r < 5; r++) assert.equal((await c.get('huge')).length, 10_000);
    assert.equal(shim.stats().evictions.too_large, 1);
    assert.ok((await calls('get')) - g >= 4, 'the huge value is not served from memory');
    assert.ok(shim.stats().bytes <= 20_000);
    await shim.close();
    await done();
  });
}


