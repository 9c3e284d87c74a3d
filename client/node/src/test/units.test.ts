// Unit tests of the Node shim's pieces; behaviour against a real Redis is
// the conformance suite's job (client/conformance).
import { test } from 'node:test';
import * as assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { createHmac } from 'node:crypto';
import { DecodeError, decodeMessage, decodeSnapshot, keyString, unwrap } from '../events';
import { HotSet, MAX_HOT_ENTRIES } from '../subscriber';
import { writtenKeys } from '../writes';

const VECTORS = path.join(__dirname, '..', '..', '..', 'conformance', 'testdata', 'written_keys.json');

test('written keys agree with the shared vectors', () => {
  const vecs = JSON.parse(fs.readFileSync(VECTORS, 'utf8')) as { cmd: string[]; keys: string[]; all: boolean }[];
  assert.ok(vecs.length > 20);
  for (const v of vecs) {
    const got = writtenKeys(v.cmd);
    assert.deepEqual({ keys: got.keys, all: got.all }, { keys: v.keys, all: v.all }, v.cmd.join(' '));
  }
});

test('buffer arguments', () => {
  const got = writtenKeys([Buffer.from('DEL'), Buffer.from('a'), Buffer.from([0xff])]);
  assert.equal(got.keys.length, 2);
  assert.equal(keyString(got.keys[1]), '\xff');
});

test('v1 events and v2 batches', () => {
  const [e] = decodeMessage('{"v":1,"seq":3,"type":"hot","proto":"redis","server":"1.2.3.4:6379","ns":"0","key":"k","qps":1,"ttl_ms":60000,"ts":"x","source":"detected","node":"n","future":1}');
  assert.equal(e.key, 'k');
  assert.equal(e.seq, 3);
  assert.equal(e.cacheable, true);
  const evs = decodeMessage(Buffer.from('{"v":2,"node":"n","events":[{"seq":1,"type":"hot","key_b64":"/w==","cacheable":false},{"seq":2,"type":"cold","key":"é"}]}'));
  assert.deepEqual(evs.map((x) => x.key), ['\xff', Buffer.from('é').toString('latin1')]);
  assert.deepEqual(evs.map((x) => x.cacheable), [false, true]);
});

test('bad messages are rejected', () => {
  for (const m of ['not json', '[]', '{"seq":"x"}', '{"seq":-1}', '{"key":1}', '{"key_b64":"!!"}', '{"ttl_ms":-5}',
    '{"v":2,"events":[' + Array(4097).fill('{}').join(',') + ']}']) {
    assert.throws(() => decodeMessage(m), DecodeError, m);
  }
});

test('an envelope has at least one byte of body', () => {
  const secret = Buffer.from('s');
  const env = (body: string) => Buffer.from(`{"sig":"${createHmac('sha256', secret).update(body).digest('hex')}","body":${body}}`);
  assert.equal(unwrap(env('1'), secret).toString(), '1');
  // 82 bytes, the MAC right for an empty body: not an envelope, as in Go and Python.
  const empty = env('');
  assert.equal(empty.length, 82);
  assert.throws(() => unwrap(empty, secret), (e: unknown) => e instanceof DecodeError && e.reason === 'bad_signature');
  assert.equal(unwrap(empty).toString(), empty.toString());
});

test('snapshot', () => {
  const s = decodeSnapshot('{"v":1,"seq":9,"node":"a","nodes":[{"node":"a","seq":9,"keys":1}],"keys":[{"seq":8,"type":"hot","key":"k","ttl_ms":0,"node":"a"},{"seq":7,"type":"cold","key":"c"}]}');
  assert.deepEqual([...s.nodes], [['a', 9]]);
  assert.deepEqual(s.keys.map((k) => k.key), ['k']);
  assert.equal(decodeSnapshot(null).keys.length, 0);
});

test('hot set: nodes are independent, manual entries are shared', () => {
  const hs = new HotSet();
  const ev = (s: string) => decodeMessage(s)[0];
  hs.apply(ev('{"seq":1,"type":"hot","proto":"redis","ns":"0","key":"k","ttl_ms":1000,"node":"a"}'), 0);
  hs.apply(ev('{"seq":1,"type":"hot","proto":"redis","ns":"0","key":"k","ttl_ms":5000,"node":"b"}'), 0);
  hs.apply(ev('{"seq":2,"type":"cold","proto":"redis","ns":"0","key":"k","node":"a"}'), 500);
  assert.deepEqual(hs.hotUntil('redis', '0', 'k', 500), { hot: true, until: 5000, cacheable: true });
  assert.equal(hs.hotUntil('redis', '0', 'k', 5000).hot, false);
  hs.apply(ev('{"seq":1,"type":"hot","proto":"redis","ns":"0","key":"m","ttl_ms":0,"node":"x","source":"manual"}'), 0);
  assert.deepEqual(hs.hotUntil('redis', '0', 'm', 1e12), { hot: true, until: 0, cacheable: true });
  hs.apply(ev('{"seq":1,"type":"cold","proto":"redis","ns":"0","key":"m","node":"y","source":"manual"}'), 0);
  assert.equal(hs.hotUntil('redis', '0', 'm', 0).hot, false);
});

test('prom-client metrics', async () => {
  const prom = require('prom-client');
  const { Core } = require('../cache');
  const core = new Core({ db: 0 }, { anyServer: true });
  core.sub = { stats: { reloads: 2, gaps: 1, reconnects: 0, messages: 7 }, bad: { too_large: 1, out_of_range: 2, undecodable: 0, bad_signature: 0, unconfirmed_seq: 0, flapping: 0 }, up: true };
  core.m.hits = 5;
  core.invalidations.write = 3;
  const { registerMetrics } = require('../metrics');
  const reg = new prom.Registry();
  registerMetrics(core, reg);
  const text: string = await reg.metrics();
  assert.match(text, /^hotsniff_client_hits_total 5$/m);
  assert.match(text, /^hotsniff_client_invalidations_total\{reason="write"\} 3$/m);
  assert.match(text, /^hotsniff_client_channel_messages_total 7$/m);
  assert.match(text, /^hotsniff_client_bad_messages_total\{reason="out_of_range"\} 2$/m);
  assert.match(text, /^hotsniff_client_channel_up 1$/m);
});

test('hot set: bounded, a flood of new keys is refused and counted', () => {
  const hs = new HotSet();
  const ev = (k: number) => decodeMessage(`{"seq":1,"type":"hot","proto":"redis","ns":"0","key":"k${k}","ttl_ms":0,"node":"a"}`)[0];
  for (let i = 0; i < MAX_HOT_ENTRIES + 10; i++) hs.apply(ev(i), 0);
  assert.equal(hs.m.size, MAX_HOT_ENTRIES);
  assert.equal(hs.refused, 10);
  // Known entries are still renewed.
  hs.apply(ev(0), 5);
  assert.equal(hs.refused, 10);
});

test('hostile numbers are out of range, never accepted or fatal', () => {
  const base = '{"v":1,"seq":1,"type":"hot","key":"k","ttl_ms":1}';
  const cases: [string, string][] = [
    [base.replace('"ttl_ms":1', '"ttl_ms":' + '9'.repeat(400)), 'out_of_range'],
    [base.replace('"ttl_ms":1', '"ttl_ms":1e400'), 'out_of_range'],
    [base.replace('"ttl_ms":1', '"ttl_ms":86400001'), 'out_of_range'],
    [base.replace('"ttl_ms":1', '"ttl_ms":1.5'), 'out_of_range'],
    [base.replace('"ttl_ms":1', '"ttl_ms":Infinity'), 'out_of_range'],
    [base.replace('"v":1', '"v":1e400'), 'out_of_range'],
    [base.replace('"v":1', '"v":3'), 'out_of_range'],
    [base.replace('"seq":1', '"seq":9007199254740992'), 'out_of_range'],
    [base.replace('}', ',"qps":1e400}'), 'out_of_range'],
    [base.replace('}', ',"sample":1.5}'), 'out_of_range'],
    ['{"v":2,"events":[' + Array(4097).fill('{}').join(',') + ']}', 'too_large'],
    [base.replace('}', `,"pad":"${'x'.repeat(1 << 20)}"}`), 'too_large'],
  ];
  for (const [m, reason] of cases) {
    assert.throws(() => decodeMessage(m), (err: unknown) => err instanceof DecodeError && err.reason === reason, m.slice(0, 80));
  }
  assert.equal(decodeMessage(base)[0].ttlMs, 1);
});

/** A Map that fails the test when walked whole: a sweep must look only at
 * the entries due. */
class NoScan<K, V> extends Map<K, V> {
  private scan(): never { throw new Error('walked the whole hot set'); }
  override entries(): MapIterator<[K, V]> { return this.scan(); }
  override values(): MapIterator<V> { return this.scan(); }
  override keys(): MapIterator<K> { return this.scan(); }
  override [Symbol.iterator](): MapIterator<[K, V]> { return this.scan(); }
  override forEach(): void { this.scan(); }
}

const hotEv = (i: number, ttlMs: number) =>
  decodeMessage(`{"seq":${i + 1},"type":"hot","proto":"redis","ns":"0","key":"k${i}","ttl_ms":${ttlMs},"node":"a"}`)[0];

test('hot set: a sweep looks only at the entries due, never at the rest', () => {
  // 40,000 entries with a far expiry and 5 due.
  const hs = new HotSet();
  hs.m = new NoScan();
  for (let i = 0; i < 40_000; i++) hs.apply(hotEv(i, 3_600_000), 0);
  for (let i = 40_000; i < 40_005; i++) hs.apply(hotEv(i, 1000), 0);
  hs.expire(500);
  assert.equal(hs.examined, 0);
  assert.equal(hs.m.size, 40_005);
  hs.expire(1000);
  assert.equal(hs.examined, 5);
  assert.equal(hs.m.size, 40_000);
  assert.equal(hs.hotUntil('redis', '0', 'k40000', 1000).hot, false);
  for (let i = 0; i < 100; i++) hs.expire(2000);
  assert.equal(hs.examined, 5);
});

test('hot set: refreshed, until-cold and re-added entries lapse by their current expiry', () => {
  const hs = new HotSet();
  const keys = () => [...hs.m.values()].map((en) => en.ev.key).sort();
  hs.apply(hotEv(1, 1000), 0);
  hs.apply(hotEv(1, 1000), 900); // refreshed: until 1900
  hs.apply(hotEv(2, 1000), 0);
  hs.apply(hotEv(2, 0), 500); // until cold now
  hs.apply(hotEv(3, 1000), 0);
  hs.apply(decodeMessage('{"seq":9,"type":"cold","proto":"redis","ns":"0","key":"k3","node":"a"}')[0], 100);
  hs.apply(hotEv(3, 5000), 200); // re-added: until 5200
  hs.expire(1500);
  assert.deepEqual(keys(), ['k1', 'k2', 'k3']);
  hs.expire(1900);
  assert.deepEqual(keys(), ['k2', 'k3']);
  hs.expire(100_000);
  assert.deepEqual(keys(), ['k2']);
  // One key refreshed many times: the heap is compacted, not grown.
  for (let n = 0; n < 10_000; n++) hs.apply(hotEv(4, 1000), n * 1000);
  assert.ok(hs.heap.length <= 2 * hs.m.size + 1025, `heap of ${hs.heap.length}`);
  hs.expire(10_000_500);
  assert.deepEqual(keys(), ['k2']);
  // Popped in expiry order.
  const h = new HotSet();
  const order = [5, 1, 4, 2, 3, 9, 7, 8, 6];
  order.forEach((s, i) => h.apply(hotEv(100 + i, s * 1000), 0));
  for (let s = 1; s <= 9; s++) {
    h.expire(s * 1000);
    assert.equal(h.m.size, 9 - s);
  }
});

test('a hash read after an invalidation shares the hash refresh in flight: same master, generation and reply form, within staleGrace', async () => {
  const { Core, KIND_HASH, KIND_STRING } = require('../cache');
  const PASS = 0, HIT = 1, FETCH = 2; // Act
  const core = new Core({ db: 0 }, { anyServer: true, staleGraceMs: 100 });
  core.hot.set('h', 0); // hot until cold
  const read = (t: number, src = 'a', tag: unknown = 'T', kind = KIND_HASH) => core.acquireShared('h', kind, t, src, tag);
  const hashOf = (v: string) => ({ expires: 0, raw: ['f', v], hidx: new Map([['f', v]]), tag: 'T' });
  assert.equal(read(1000).act, PASS); // recorded
  const first = read(1000);
  assert.equal(first.act, FETCH); // admitted: the first fetch
  core.share(first.t, Promise.resolve(hashOf('v1')), 'T');
  // No HGETALL of the key answered with a hash yet: not offered (it may be
  // refused where the reader's own command is not).
  assert.deepEqual(read(1001), { act: PASS });
  core.store(first.t, hashOf('v1'));
  assert.equal(read(1002).v.hidx.get('f'), 'v1');

  core.invalidate('h', 'event');
  const r2 = read(1010);
  assert.equal(r2.act, FETCH);
  const p2 = Promise.resolve(hashOf('v2'));
  core.share(r2.t, p2, 'T');
  const s = read(1011);
  assert.equal(s.act, HIT);
  assert.equal(s.shared, p2);
  assert.equal((await s.shared).hidx.get('f'), 'v2');
  assert.equal(core.m.waitHits, 1);
  assert.deepEqual(read(1012, 'b'), { act: PASS }, 'another master');
  assert.deepEqual(read(1012, 'a', 'U'), { act: PASS }, 'another reply form');
  assert.deepEqual(read(1012, 'a', 'T', KIND_STRING), { act: PASS }, 'a GET of a hash');
  assert.equal(read(1110).shared, p2, 'staleGrace after the refresh began');
  core.invalidate('h', 'event');
  assert.deepEqual(read(1110), { act: PASS }, 'invalidated since the refresh was sent');
  // Older than staleGrace: the next reader refreshes (and offers its own).
  const r3 = read(1111);
  assert.equal(r3.act, FETCH);
  assert.equal(r3.shared, undefined);
  const p3 = Promise.resolve(hashOf('v3'));
  core.share(r3.t, p3, 'T');
  assert.equal(read(1112).shared, p3);
  core.store(r2.t, hashOf('v2')); // the older refresh ends: not stored (gen), p3 still offered
  assert.equal(core.entries.get('h').val, null);
  assert.equal(read(1113).shared, p3);
  core.release(r3.t); // over: not offered any more
  assert.equal(read(1114).act, FETCH);
  assert.equal(core.m.waitHits, 4);
});
