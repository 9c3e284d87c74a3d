// An application process of the restart test: APP_READERS async workers
// each read APP_KEY from the cache at APP_CACHE at APP_RATE reads/s through
// the Node shim on ioredis (following the channel at APP_CHANNEL) until
// stdin closes. HOTSNIFF_NODE_DIR is client/node (with its node_modules),
// HOTSNIFF_NODE_DIST the shim compiled (default client/node/dist; NODE_PATH
// then names client/node/node_modules). Output as testdata/app.py.
'use strict';
const path = require('node:path');

const dir = process.env.HOTSNIFF_NODE_DIR;
const IORedis = require(path.join(dir, 'node_modules', 'ioredis'));
const { install } = require(path.join(process.env.HOTSNIFF_NODE_DIST || path.join(dir, 'dist'), 'index.js'));

const split = (a) => { const i = a.lastIndexOf(':'); return [a.slice(0, i), Number(a.slice(i + 1))]; };
const wallNs = () => BigInt(Math.round(performance.timeOrigin * 1e3)) * 1000n + BigInt(Math.round(performance.now() * 1e6));

async function main() {
  const [host, port] = split(process.env.APP_CACHE);
  const [chost, cport] = split(process.env.APP_CHANNEL);
  const key = process.env.APP_KEY;
  const readers = Number(process.env.APP_READERS);
  const rate = Number(process.env.APP_RATE);
  const r = new IORedis({ host, port, lazyConnect: true });
  const chan = new IORedis({ host: chost, port: cport, lazyConnect: true });
  r.on('error', () => {});
  chan.on('error', () => {});
  await r.connect();
  await chan.connect();
  const shim = await install(r, { channelClient: chan, logger: { info: (m) => console.error(m), warn: (m) => console.error(m) } });
  const timeout = new Promise((_, rej) => setTimeout(() => rej(new Error('snapshot never loaded')), 20_000).unref());
  await Promise.race([shim.synced, timeout]);
  process.stdout.write(JSON.stringify({ ready: true }) + '\n');

  let reads = 0, errors = 0, stop = false;
  const seen = new Map(); // value -> last read start (Unix ns, bigint)
  const sleep = (ms) => new Promise((res) => setTimeout(res, ms));
  const worker = async () => {
    const every = 1000 / rate;
    let next = performance.now();
    while (!stop) {
      next += every;
      const d = next - performance.now();
      if (d > 0) await sleep(d);
      else if (d < -100) next = performance.now(); // no catch-up burst after a stall
      const start = wallNs();
      try {
        const v = await r.get(key);
        reads++;
        const prev = seen.get(v);
        if (prev === undefined || prev < start) seen.set(v, start);
      } catch {
        errors++;
      }
    }
  };
  const workers = Array.from({ length: readers }, worker);
  const tick = setInterval(() => {
    const st = shim.stats();
    const s = {};
    for (const [v, t] of seen) s[v] = Number(t);
    process.stdout.write(JSON.stringify({ t: Number(wallNs()), reads, errors, local: st.hits + st.staleHits,
      reloads: st.channel.reloads, channel_up: !!st.channelUp, seen: s }) + '\n');
  }, 200);
  process.stdin.resume();
  await new Promise((res) => process.stdin.on('end', res));
  stop = true;
  clearInterval(tick);
  await Promise.all(workers);
  await shim.close();
  r.disconnect();
  chan.disconnect();
  return 0;
}

main().then((code) => process.exit(code), (err) => {
  console.error('restart app:', err);
  process.exit(1);
});
