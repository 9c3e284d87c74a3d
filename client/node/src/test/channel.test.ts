// The channel rules against a real redis-server: hostile messages are
// counted once and change nothing, snapshots skip bad entries, a forged seq
// jump freezes a node for at most ~5 s, flapping verdicts are held, signed
// messages, reloads keep cached values, and an outage of the channel server
// does not stop serving. Served or not is read from the cache server's
// commandstats.
import { after, before, test } from 'node:test';
import * as assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import IORedis from 'ioredis';
import { createClient } from 'redis';
import { install } from '../index';
import { Server, sleep } from './servers';

/* eslint-disable @typescript-eslint/no-explicit-any */
let cache: Server;
let admin: IORedis;
const gets = async () => Number(/cmdstat_get:calls=(\d+)/.exec(await admin.info('commandstats'))?.[1] ?? 0);
const quiet = { info: () => {}, warn: () => {} };

before(async () => {
  cache = await Server.start();
  admin = new IORedis({ port: cache.port });
});

after(async () => {
  admin.disconnect();
  await cache.stop();
});

const ev = (o: Record<string, unknown>) => JSON.stringify({ v: 1, type: 'hot', proto: 'redis', server: '', ns: '0', qps: 1, ttl_ms: 0, source: 'detected', node: 'n1', ...o });

async function until(f: () => boolean | Promise<boolean>, what: string, ms = 5000) {
  const end = Date.now() + ms;
  while (!(await f())) {
    if (Date.now() > end) throw new Error(`never ${what}`);
    await sleep(10);
  }
}

/** A shim (ioredis or node-redis) with key k hot and cached. */
async function cached(lib: 'io' | 'nr', channel: string, opt: Record<string, unknown> = {}, pub: IORedis = admin) {
  await admin.set('k', 'v');
  let client: any;
  if (lib === 'io') client = new IORedis({ port: cache.port });
  else {
    client = createClient({ socket: { port: cache.port } });
    client.on('error', () => {});
    await client.connect();
  }
  const shim = await install(client, { channel, localTtlMs: 60_000, logger: quiet, ...opt });
  await shim.synced;
  await pub.publish(channel, ev({ seq: 1, key: 'k' }));
  await until(() => shim.isHot('k'), 'hot');
  await client.get('k');
  await client.get('k');
  const close = async () => {
    await shim.close();
    if (lib === 'io') client.disconnect();
    else await client.quit();
  };
  return { client, shim, close };
}

/** Whether a read of k is served locally (no GET reaches the cache server). */
async function served(client: any): Promise<boolean> {
  const g = await gets();
  assert.equal(await client.get('k'), 'v');
  return (await gets()) === g;
}

const HOSTILE: [string, string, string][] = [
  ['ttl_ms of 400 digits', ev({ seq: 2, key: 'k', ttl_ms: Number.NaN }).replace('null', '1'.repeat(400)), 'out_of_range'],
  ['ttl_ms 1e400', ev({ seq: 2, key: 'k', ttl_ms: 0 }).replace('"ttl_ms":0', '"ttl_ms":1e400'), 'out_of_range'],
  ['ttl_ms Infinity', ev({ seq: 2, key: 'k', ttl_ms: 0 }).replace('"ttl_ms":0', '"ttl_ms":Infinity'), 'out_of_range'],
  ['v 1e400', ev({ seq: 2, key: 'k' }).replace('"v":1', '"v":1e400'), 'out_of_range'],
  ['seq 2^53', ev({ seq: 2 ** 53, key: 'k' }), 'out_of_range'],
  ['qps -1', ev({ seq: 2, key: 'k', qps: -1 }), 'out_of_range'],
  ['sample 0', ev({ seq: 2, key: 'k', sample: 0 }), 'out_of_range'],
  ['cold with ttl 1e400', ev({ seq: 2, key: 'k', type: 'cold' }).replace('"ttl_ms":0', '"ttl_ms":1e400'), 'out_of_range'],
  ['a batch of 4097 events', JSON.stringify({ v: 2, node: 'n1', events: Array.from({ length: 4097 }, (_, i) => ({ seq: 2 + i, type: 'cold', key: 'k' })) }), 'too_large'],
  ['a message over 1 MiB', ev({ seq: 2, key: 'k', pad: 'x'.repeat(1 << 20) }), 'too_large'],
  ['a batch with one bad event', JSON.stringify({ v: 2, node: 'n1', events: [{ seq: 2, type: 'cold', key: 'k', proto: 'redis', ns: '0' }, { seq: 3, type: 'hot', key: 'x', ttl_ms: -1 }] }), 'out_of_range'],
];

for (const lib of ['io', 'nr'] as const) {
  test(`${lib}: hostile messages are each one counted bad message; the key stays served, no reload, no reconnect`, async () => {
    const ch = `hostile-${lib}`;
    const { client, shim, close } = await cached(lib, ch);
    assert.ok(await served(client));
    const st0 = shim.stats();
    for (const [what, msg, reason] of HOSTILE) {
      const before = shim.stats();
      await admin.publish(ch, msg);
      await until(() => shim.stats().channel.messages === before.channel.messages + 1, `received (${what})`);
      const after = shim.stats();
      assert.equal(after.badMessages[reason as keyof typeof after.badMessages], before.badMessages[reason as keyof typeof before.badMessages] + 1, `${what}: counted once as ${reason}`);
      assert.ok(shim.isHot('k'), `${what}: k still hot`);
      assert.ok(await served(client), `${what}: k still served`);
    }
    const st = shim.stats();
    assert.equal(st.channel.reloads, st0.channel.reloads, 'no snapshot reload');
    assert.equal(st.channel.reconnects, st0.channel.reconnects, 'no reconnect');
    // And the channel still works: a real cold applies.
    await admin.publish(ch, ev({ seq: 2, key: 'k', type: 'cold' }));
    await until(() => !shim.isHot('k'), 'cold applied');
    await close();
  });
}

test('snapshot: bad entries are skipped and counted, the rest applied; an oversized or unsigned document keeps the state', async () => {
  const ch = 'snap-bad';
  await admin.set('good', 'g');
  const doc = (keys: string[]) => `{"v":1,"seq":5,"node":"n1","nodes":[{"node":"n1","seq":5,"keys":2}],"keys":[${keys.join(',')}]}`;
  await admin.set(`${ch}:snapshot`, doc([
    ev({ seq: 4, key: 'good' }),
    ev({ seq: 5, key: 'bad' }).replace('"ttl_ms":0', '"ttl_ms":1e400'),
    ev({ seq: 5, key: 'bad2', ttl_ms: 86_400_001 }),
  ]));
  const r = new IORedis({ port: cache.port });
  const shim = await install(r, { channel: ch, logger: quiet });
  await shim.synced;
  assert.ok(shim.isHot('good'));
  assert.ok(!shim.isHot('bad') && !shim.isHot('bad2'));
  assert.equal(shim.stats().badMessages.out_of_range, 2);
  // A gap makes it reload a document over 64 MiB... we keep it to a
  // document that is not JSON: rejected whole, the hot set kept.
  await admin.set(`${ch}:snapshot`, '{"v":1,');
  await admin.publish(ch, ev({ seq: 9, key: 'other' }));
  await until(() => shim.stats().badMessages.undecodable === 1, 'bad snapshot counted');
  assert.ok(shim.isHot('good'), 'state kept');
  await shim.close();
  r.disconnect();
});

test('a forged seq jump freezes a node for at most ~5 s (rule 3)', async () => {
  const ch = 'seqjump';
  const snap = (s: number, keys: string[]) => `{"v":1,"seq":${s},"node":"n1","nodes":[{"node":"n1","seq":${s},"keys":${keys.length}}],"keys":[${keys.map((k) => ev({ seq: 1, key: k })).join(',')}]}`;
  await admin.set(`${ch}:snapshot`, snap(1, ['k']));
  const { shim, close } = await cached('io', ch);
  // As the daemon does: the section moves with each message.
  await admin.set(`${ch}:snapshot`, snap(2, ['k', 'real']));
  await admin.publish(ch, ev({ seq: 2, key: 'real' }));
  await until(() => shim.isHot('real'), 'real hot');
  // The forgery: seq far ahead, as if 2^20 messages were missed.
  await admin.publish(ch, ev({ seq: 2 + 2 ** 20 - 10, key: 'forged' }));
  await until(() => shim.stats().channel.gaps === 1, 'gap seen');
  const t0 = Date.now();
  // The node's real messages go on (its section one behind, as it is
  // rewritten every second): each makes a new key hot. Within ~5 s they
  // apply again.
  let s = 2;
  for (;;) {
    s++;
    await admin.set(`${ch}:snapshot`, snap(s - 1, ['k']));
    await admin.publish(ch, ev({ seq: s, key: `m${s}` }));
    await sleep(200);
    if (shim.isHot(`m${s}`)) break;
    assert.ok(Date.now() - t0 < 8000, 'the node stayed frozen past 8 s');
  }
  const took = Date.now() - t0;
  assert.ok(took >= 4000, `unfrozen after ${took} ms: a jump is believed for its 5 s`);
  assert.equal(shim.stats().badMessages.unconfirmed_seq, 1);
  assert.ok(shim.isHot('k'), 'the snapshot keys stay');
  await close();
});

test('flapping cacheable verdicts are held cacheable (rule 4)', async () => {
  const ch = 'flap';
  const { client, shim, close } = await cached('nr', ch);
  let s = 1;
  // Four changes: each applied.
  for (let i = 0; i < 4; i++) {
    const cacheable = i % 2 === 1;
    await admin.publish(ch, ev({ seq: ++s, key: 'k', cacheable }));
    await until(() => shim.stats().channel.messages >= s - 1, 'received');
  }
  assert.equal(shim.stats().badMessages.flapping, 0);
  // A further false is held: the key stays cacheable and served.
  await admin.publish(ch, ev({ seq: ++s, key: 'k', cacheable: false }));
  await until(() => shim.stats().badMessages.flapping === 1, 'held');
  assert.ok(shim.isHot('k'));
  await client.get('k');
  await client.get('k');
  assert.ok(await served(client), 'served while flapping');
  await close();
});

test('signed channel (rule 5): unsigned and wrongly signed messages are bad_signature; signed ones apply; a signed snapshot loads', async () => {
  const ch = 'signed';
  const secret = 's3cret';
  const sign = (body: string, key = secret) => `{"sig":"${createHmac('sha256', key).update(Buffer.from(body)).digest('hex')}","body":${body}}`;
  await admin.set('sk', 'v');
  await admin.set(`${ch}:snapshot`, sign(`{"v":1,"seq":1,"node":"n1","nodes":[{"node":"n1","seq":1,"keys":1}],"keys":[${ev({ seq: 1, key: 'sk' })}]}`));
  const r = new IORedis({ port: cache.port });
  const shim = await install(r, { channel: ch, channelSecret: secret + '\n'.slice(1), logger: quiet });
  await shim.synced;
  assert.ok(shim.isHot('sk'), 'signed snapshot loaded');
  await admin.publish(ch, ev({ seq: 2, key: 'u' }));
  await admin.publish(ch, sign(ev({ seq: 2, key: 'w' }), 'wrong'));
  await admin.publish(ch, sign(ev({ seq: 2, key: 'ok' })));
  await until(() => shim.isHot('ok'), 'signed applied');
  assert.equal(shim.stats().badMessages.bad_signature, 2);
  assert.ok(!shim.isHot('u') && !shim.isHot('w'));
  await shim.close();
  r.disconnect();
  // Without a secret, an envelope is unwrapped and applied.
  const r2 = new IORedis({ port: cache.port });
  const s2 = await install(r2, { channel: ch, logger: quiet });
  await s2.synced;
  assert.ok(s2.isHot('sk'));
  await admin.publish(ch, sign(ev({ seq: 3, key: 'ok2' })));
  await until(() => s2.isHot('ok2'), 'envelope applied unverified');
  await s2.close();
  r2.disconnect();
});

test('a publisher restart reloads the snapshot without emptying the cache (rule 6)', async () => {
  const ch = 'restart';
  await admin.set(`${ch}:snapshot`, `{"v":1,"seq":1,"node":"n1","nodes":[{"node":"n1","seq":1,"keys":1}],"keys":[${ev({ seq: 1, key: 'k' })}]}`);
  const { client, shim, close } = await cached('io', ch);
  await admin.publish(ch, ev({ seq: 5_000_000, key: 'other' }));
  await until(() => shim.isHot('other'), 'seen');
  const reloads = shim.stats().channel.reloads;
  // The restarted daemon starts from seq 1; its snapshot still lists k.
  await admin.set(`${ch}:snapshot`, `{"v":1,"seq":1,"node":"n1","nodes":[{"node":"n1","seq":1,"keys":1}],"keys":[${ev({ seq: 1, key: 'k' })}]}`);
  await admin.publish(ch, ev({ seq: 1, key: 'k' }));
  await until(() => shim.stats().channel.reloads > reloads, 'reloaded');
  assert.equal(shim.stats().channel.restarts, 1);
  assert.ok(await served(client), 'the cached value survived the reload');
  assert.ok(!shim.isHot('other'), 'a key absent from the snapshot is dropped');
  await close();
});

test('a channel outage: held keys are served on past their ttl, stated in stats, resynchronised after (rule 7)', async () => {
  const chSrv = await Server.start();
  const pub = new IORedis({ port: chSrv.port, maxRetriesPerRequest: 0, retryStrategy: () => 100 });
  pub.on('error', () => {});
  const ch = 'outage';
  const chan = new IORedis({ port: chSrv.port, retryStrategy: () => 100 });
  chan.on('error', () => {});
  const { client, shim, close } = await cached('io', ch, { channelClient: chan, localTtlMs: 50 }, pub);
  // ttl 1 s: without the outage rule, k would lapse a second after this.
  await pub.publish(ch, ev({ seq: 2, key: 'k', ttl_ms: 1000 }));
  await sleep(50);
  await chSrv.stop();
  await until(() => !shim.stats().channelUp, 'channel seen down');
  await sleep(1500);
  assert.ok(shim.isHot('k'), 'still hot past its ttl');
  assert.equal(shim.stats().servedWithoutChannel, 1);
  // Served (with refreshes every local TTL): far fewer GETs than reads.
  const g = await gets();
  let reads = 0;
  const end = Date.now() + 500;
  while (Date.now() < end) {
    assert.equal(await client.get('k'), 'v');
    reads++;
    await sleep(1);
  }
  const sent = (await gets()) - g;
  // Served: at most one refresh per local TTL reaches the server (without
  // serving, every read would).
  assert.ok(reads >= sent + 10 && sent <= 500 / 50 + 2, `${reads} reads, ${sent} reached the cache server`);
  // The channel returns empty: the snapshot has no k, so k goes.
  await chSrv.run();
  await until(() => shim.stats().channelUp, 'channel back', 10_000);
  await until(() => !shim.isHot('k'), 'resynchronised');
  assert.equal(shim.stats().servedWithoutChannel, 0);
  await close();
  chan.disconnect();
  pub.disconnect();
  await chSrv.stop();
});

test('the channel\'s Redis restarts empty: held keys are kept until the snapshot is rewritten, and go if it never is', async () => {
  const chSrv = await Server.start();
  const pub = new IORedis({ port: chSrv.port, maxRetriesPerRequest: 0, retryStrategy: () => 100 });
  pub.on('error', () => {});
  const ch = 'empty-restart';
  const snapOf = (seq: number, keys: string[]) =>
    `{"v":1,"seq":${seq},"node":"n1","nodes":[{"node":"n1","seq":${seq},"keys":${keys.length}}],"keys":[${keys.map((k) => ev({ seq, key: k })).join(',')}]}`;
  await pub.set(`${ch}:snapshot`, snapOf(1, ['k']));
  const chan = new IORedis({ port: chSrv.port, retryStrategy: () => 100 });
  chan.on('error', () => {});
  // k is hot until cold (ttl 0): nothing but the snapshot can drop it.
  const { client, shim, close } = await cached('io', ch, { channelClient: chan }, pub);
  assert.ok(await served(client));
  const restart = async () => {
    const reconnects = shim.stats().channel.reconnects;
    await chSrv.stop();
    await until(() => !shim.stats().channelUp, 'channel seen down');
    await chSrv.run();
    await until(() => shim.stats().channel.reconnects > reconnects && shim.stats().channelUp, 'channel back', 10_000);
  };
  await restart();
  // Up again, with no snapshot document yet: a restarted Redis, not a
  // publisher saying nothing is hot.
  await sleep(1000);
  assert.ok(shim.isHot('k'), 'k dropped on a missing snapshot document');
  assert.ok(await served(client), 'k no longer served on a missing snapshot document');
  // The publisher rewrites its section, without k: k goes.
  await pub.set(`${ch}:snapshot`, snapOf(2, []));
  await until(() => !shim.isHot('k'), 'the rewritten snapshot applied', 3000);
  // Hot again; the channel restarts empty and the document never comes
  // back: k is not held forever.
  await pub.publish(ch, ev({ seq: 3, key: 'k' }));
  await until(() => shim.isHot('k'), 'hot again');
  await restart();
  const back = Date.now();
  await until(() => !shim.isHot('k'), 'dropped once the document stayed missing', 10_000);
  const held = Date.now() - back;
  assert.ok(held >= 3000, `k dropped ${held} ms after the channel came back, before the publishers could rewrite the snapshot`);
  await close();
  chan.disconnect();
  pub.disconnect();
  await chSrv.stop();
});
