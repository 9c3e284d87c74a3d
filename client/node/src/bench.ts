// Hit-path cost of the Node shim, side by side in one run, for ioredis and
// node-redis:  npm run bench  (or node dist/bench.js [calls]).
// Starts its own redis-server on a free loopback port, makes one key hot
// through the channel, and times awaited GETs per call:
//   shim-hit      the shim installed, the key cached (served locally)
//   shim-not-hot  the shim installed and in hot-running mode, another key
//   plain         the same library without the shim (a real round trip)
// Each figure is the best of 5 repeats; INFO commandstats checks that the
// hit runs never reached Redis.

import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as net from 'node:net';
import * as os from 'node:os';
import * as path from 'node:path';
import IORedis from 'ioredis';
import { createClient } from 'redis';
import { install } from './index';

/* eslint-disable @typescript-eslint/no-explicit-any */

async function freePort(): Promise<number> {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => {
      const p = (s.address() as net.AddressInfo).port;
      s.close(() => resolve(p));
    });
  });
}

async function best(n: number, f: () => Promise<unknown>): Promise<number> {
  let b = Infinity;
  for (let r = 0; r < 5; r++) {
    const t0 = process.hrtime.bigint();
    for (let i = 0; i < n; i++) await f();
    b = Math.min(b, Number(process.hrtime.bigint() - t0) / n);
  }
  return b;
}

async function getCalls(c: IORedis): Promise<number> {
  const m = /cmdstat_get:calls=(\d+)/.exec(await c.info('commandstats'));
  return m ? Number(m[1]) : 0;
}

async function main() {
  const n = Number(process.argv[2] ?? 200000);
  const port = await freePort();
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'hsbench'));
  const srv = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], { stdio: 'ignore' });
  try {
    const admin = new IORedis({ port, lazyConnect: true, retryStrategy: () => 50 });
    for (let i = 0; ; i++) {
      try { await admin.connect(); break; } catch { if (i > 100) throw new Error('redis-server did not start'); await new Promise((r) => setTimeout(r, 50)); }
    }
    await admin.set('hot', 'v'.repeat(32));
    await admin.set('cold', 'v'.repeat(32));
    console.log(`node ${process.version}`);
    for (const lib of ['ioredis', 'node-redis']) {
      const mk = async () => {
        if (lib === 'ioredis') {
          const c = new IORedis({ port });
          await c.ping();
          return { c, get: (k: string) => c.get(k), close: async () => c.disconnect() };
        }
        const c: any = createClient({ socket: { port } });
        await c.connect();
        return { c, get: (k: string) => c.get(k), close: async () => c.quit() };
      };
      const app = await mk();
      const plain = await mk();
      const shim = await install(app.c, { channel: 'bench-' + lib, localTtlMs: 3_600_000, anyServer: true });
      await shim.synced;
      await admin.publish('bench-' + lib, JSON.stringify({ v: 1, seq: 1, type: 'hot', proto: 'redis', server: '', ns: '0', key: 'hot', qps: 1, ttl_ms: 0, ts: '', source: 'manual', node: 'bench' }));
      while (!shim.isHot('hot')) await new Promise((r) => setTimeout(r, 10));
      for (let i = 0; i < 3; i++) await app.get('hot');
      const before = await getCalls(admin);
      const hit = await best(n, () => app.get('hot'));
      if ((await getCalls(admin)) !== before) throw new Error('the hit runs reached Redis');
      const rt = Math.max(Math.floor(n / 20), 2000);
      const notHot = await best(rt, () => app.get('cold'));
      const plainRt = await best(rt, () => plain.get('cold'));
      console.log(`${lib.padEnd(10)} shim-hit ${hit.toFixed(0).padStart(7)} ns/op   shim-not-hot ${notHot.toFixed(0).padStart(7)} ns/op   plain ${plainRt.toFixed(0).padStart(7)} ns/op   plain/shim-hit ${(plainRt / hit).toFixed(1)}x`);
      await shim.close();
      await app.close();
      await plain.close();
    }
    admin.disconnect();
  } finally {
    srv.kill();
  }
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
