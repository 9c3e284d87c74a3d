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
