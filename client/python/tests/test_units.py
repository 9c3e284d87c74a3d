"""Unit tests of the Python shim's pieces; behaviour against a real Redis
is the conformance suite's job (client/conformance)."""

import json
import os

import pytest

from hotsniff_shim.events import DecodeError, decode_message, decode_snapshot
from hotsniff_shim.subscriber import HotSet
from hotsniff_shim.writes import written_keys

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "conformance", "testdata", "written_keys.json")


def test_written_keys_vectors():
    with open(VECTORS) as f:
        vecs = json.load(f)
    assert len(vecs) > 20
    for v in vecs:
        keys, all_ = written_keys(v["cmd"])
        assert (list(keys), all_) == (v["keys"], v["all"]), v["cmd"]


def test_bytes_arguments():
    keys, all_ = written_keys([b"DEL", b"a", b"\xff"])
    assert keys == [b"a", b"\xff"] and not all_


def test_decode_v1_and_batch():
    ev = decode_message('{"v":1,"seq":3,"type":"hot","proto":"redis","server":"1.2.3.4:6379","ns":"0",'
                        '"key":"k","qps":1,"ttl_ms":60000,"ts":"x","source":"detected","node":"n","future":1}')
    assert len(ev) == 1 and ev[0].key == b"k" and ev[0].seq == 3 and ev[0].cacheable
    evs = decode_message(b'{"v":2,"node":"n","events":[{"seq":1,"type":"hot","key_b64":"/w==","cacheable":false},'
                         b'{"seq":2,"type":"cold","key":"a"}]}')
    assert [e.key for e in evs] == [b"\xff", b"a"]
    assert not evs[0].cacheable and evs[1].cacheable


@pytest.mark.parametrize("msg", [
    "not json", "[]", '{"seq":"x"}', '{"seq":-1}', '{"key":1}', '{"key_b64":"!!"}', '{"ttl_ms":-5}',
    '{"v":2,"events":[' + ",".join(["{}"] * 4097) + "]}", b"\xff\xfe",
])
def test_decode_rejects(msg):
    with pytest.raises(DecodeError):
        decode_message(msg)


def test_snapshot():
    s = decode_snapshot('{"v":1,"seq":9,"node":"a","nodes":[{"node":"a","seq":9,"keys":1}],'
                        '"keys":[{"seq":8,"type":"hot","key":"k","ttl_ms":0,"node":"a"},{"seq":7,"type":"cold","key":"c"}]}')
    assert s.nodes == {"a": 9} and [e.key for e in s.keys] == [b"k"]
    assert decode_snapshot(None).keys == []


def test_hot_set_nodes_and_manual():
    hs = HotSet()
    a = decode_message('{"seq":1,"type":"hot","proto":"redis","ns":"0","key":"k","ttl_ms":1000,"node":"a"}')[0]
    b = decode_message('{"seq":1,"type":"hot","proto":"redis","ns":"0","key":"k","ttl_ms":5000,"node":"b"}')[0]
    hs.apply(a, 0.0)
    hs.apply(b, 0.0)
    cold_a = decode_message('{"seq":2,"type":"cold","proto":"redis","ns":"0","key":"k","node":"a"}')[0]
    hs.apply(cold_a, 0.5)
    until, hot, cacheable = hs.hot_until("redis", "0", b"k", 0.5)
    assert hot and until == 5.0 and cacheable
    assert not hs.hot_until("redis", "0", b"k", 5.0)[1]
    m1 = decode_message('{"seq":1,"type":"hot","proto":"redis","ns":"0","key":"m","ttl_ms":0,"node":"x","source":"manual"}')[0]
    m2 = decode_message('{"seq":1,"type":"cold","proto":"redis","ns":"0","key":"m","node":"y","source":"manual"}')[0]
    hs.apply(m1, 0.0)
    assert hs.hot_until("redis", "0", b"m", 1e9) == (0.0, True, True)
    u = decode_message('{"seq":3,"type":"hot","proto":"redis","ns":"0","key":"k","ttl_ms":9000,"node":"a","cacheable":false}')[0]
    hs.apply(u, 0.0)
    assert hs.hot_until("redis", "0", b"k", 0.5)[2], "b's entry still allows caching"
    hs.delete(("b", "redis", "", "0", False, b"k"))
    assert hs.hot_until("redis", "0", b"k", 0.5) == (9.0, True, False)
    hs.apply(m2, 0.0)
    assert not hs.hot_until("redis", "0", b"m", 0.0)[1]


def test_metrics_collect():
    prom = pytest.importorskip("prometheus_client")
    import redis
    from hotsniff_shim.shim import Shim
    s = Shim(redis.Redis(port=1), any_server=True)
    reg = prom.CollectorRegistry()
    reg.register(s)
    text = prom.generate_latest(reg).decode()
    assert "hotsniff_client_hits_total 0.0" in text
    assert 'hotsniff_client_invalidations_total{reason="write"} 0.0' in text


@pytest.mark.parametrize("msg,reason", [
    ('{"seq":1,"ttl_ms":' + "9" * 400 + "}", "out_of_range"),
    ('{"seq":1,"ttl_ms":1e400}', "out_of_range"),
    ('{"seq":1,"ttl_ms":Infinity}', "out_of_range"),
    ('{"seq":1,"ttl_ms":86400001}', "out_of_range"),
    ('{"seq":1,"ttl_ms":1.5}', "out_of_range"),
    ('{"v":1e400,"seq":1}', "out_of_range"),
    ('{"v":3,"seq":1}', "out_of_range"),
    ('{"seq":9007199254740992}', "out_of_range"),
    ('{"seq":1,"qps":NaN}', "out_of_range"),
    ('{"seq":1,"qps":-1}', "out_of_range"),
    ('{"seq":1,"value_bytes":1e400}', "out_of_range"),
    ('{"seq":1,"sample":0}', "out_of_range"),
    ('{"seq":1,"sample":1.5}', "out_of_range"),
    ('{"seq":1,"key":"' + "k" * ((1 << 20) + 1) + '"}', "too_large"),
    ('{"v":2,"events":[{"seq":1},{"seq":2,"ttl_ms":1e400}]}', "out_of_range"),
    ("x" * ((1 << 20) + 1), "too_large"),
    ("{", "undecodable"),
])
def test_decode_reasons(msg, reason):
    with pytest.raises(DecodeError) as ei:
        decode_message(msg)
    assert ei.value.reason == reason


def test_in_range_accepted():
    e = decode_message('{"v":1,"seq":9007199254740991,"ttl_ms":86400000,"qps":1e300,"sample":1,'
                       '"value_bytes":0,"key":"k"}')[0]
    assert e.seq == 2 ** 53 - 1 and e.ttl_ms == 86400000


def test_signed_envelope():
    from hotsniff_shim.events import sign, unwrap
    body = b'{"v":1,"seq":1,"type":"hot","key":"k"}'
    env = sign(b"s", body)
    assert env[81:-1] == body and len(env) == len(body) + 82
    assert unwrap(env, b"s") == body
    assert unwrap(env, None) == body  # no secret: unwrapped unverified
    assert unwrap(body, None) == body
    for bad in (body, sign(b"other", body), env[:-1] + b" ", env.replace(b'"sig":"', b'"sig":"0', 1)[:len(env)]):
        with pytest.raises(DecodeError) as ei:
            decode_message(bad, b"s")
        assert ei.value.reason in ("bad_signature",)
    # Upper-case hex is not the form: rejected with a secret.
    up = env[:8] + env[8:72].upper() + env[72:]
    with pytest.raises(DecodeError):
        decode_message(up, b"s")
    assert [e.key for e in decode_message(env, b"s")] == [b"k"]
    # An envelope's body is at least one byte: 82 bytes with the MAC of an
    # empty body are no envelope (as in Go and Node).
    empty = sign(b"s", b"")
    assert len(empty) == 82
    with pytest.raises(DecodeError) as ei:
        unwrap(empty, b"s")
    assert ei.value.reason == "bad_signature"
    assert unwrap(empty, None) == empty


def test_snapshot_bad_entries_counted():
    s = decode_snapshot('{"seq":2,"nodes":[{"node":"a","seq":2},{"node":"b","seq":1e400}],'
                        '"keys":[{"type":"hot","key":"a","ttl_ms":1e400},{"type":"hot","key":"b"},5]}')
    assert [e.key for e in s.keys] == [b"b"]
    assert s.nodes == {"a": 2}
    assert s.bad == {"out_of_range": 2, "undecodable": 1}
    with pytest.raises(DecodeError) as ei:
        decode_snapshot(b"x" * ((64 << 20) + 1))
    assert ei.value.reason == "too_large"


def test_flapping_holds_false():
    from hotsniff_shim.subscriber import Flapping
    f = Flapping()
    ev = decode_message('{"seq":1,"type":"hot","key":"k","node":"n"}')[0]
    verdicts = [True, False, True, False, True, False, True]
    applied = []
    for i, v in enumerate(verdicts):
        ev.cacheable = v
        ok = f.filter(ev, float(i) * 0.1)
        applied.append((ok, ev.cacheable))
    # Four changes pass, the fifth (a false) is held; a true always passes.
    assert applied[:5] == [(True, True), (True, False), (True, True), (True, False), (True, True)]
    assert applied[5] == (False, True)
    ev.cacheable = False
    assert f.filter(ev, 100.0) and ev.cacheable is False, "applied again after 10 s with no change"


def test_hot_set_bounded():
    hs = HotSet(max_entries=3)
    for i in range(5):
        hs.apply(decode_message('{"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"k%d","ttl_ms":1000,"node":"a"}'
                                % (i + 1, i))[0], 0.0)
    assert len(hs.m) == 3 and hs.refused == 2
    # Lapsed entries make room.
    hs.apply(decode_message('{"seq":9,"type":"hot","proto":"redis","ns":"0","key":"new","ttl_ms":1000,"node":"a"}')[0], 2.0)
    assert hs.hot_until("redis", "0", b"new", 2.0)[1]


def test_decode_mutations_only_decode_errors():
    """Random mutations of real messages, snapshots and envelopes: every
    outcome is events or one DecodeError, never another exception."""
    import random
    from hotsniff_shim.events import sign
    rnd = random.Random(26)
    seeds = [
        b'{"v":1,"seq":3,"type":"hot","proto":"redis","server":"1.2.3.4:6379","ns":"0","key":"k","qps":1.5,'
        b'"ttl_ms":60000,"ts":"x","source":"detected","node":"n","cacheable":false,"sample":0.25}',
        b'{"v":2,"node":"n","events":[{"seq":1,"type":"hot","key_b64":"/w=="},{"seq":2,"type":"cold","key":"a"}]}',
        sign(b"s", b'{"v":1,"seq":1,"type":"hot","key":"k"}'),
    ]
    tokens = [b"1e400", b"-1", b"NaN", b"Infinity", b"9" * 400, b"null", b"[]", b"{}", b'"x"', b"true", b"\xff", b"0.5"]
    n = 0
    for _ in range(4000):
        b = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 4)):
            op = rnd.random()
            i = rnd.randrange(len(b))
            if op < 0.4:
                b[i] = rnd.randrange(256)
            elif op < 0.7:
                b[i:i] = rnd.choice(tokens)
            else:
                del b[i:i + rnd.randint(1, 8)]
        for fn in (lambda x: decode_message(x), lambda x: decode_message(x, b"s"), lambda x: decode_snapshot(x)):
            try:
                fn(bytes(b))
                n += 1
            except DecodeError:
                pass
    assert n > 0
    deep = b"[" * 200000 + b"]" * 200000
    with pytest.raises(DecodeError):
        decode_message(deep)


class NoScan(dict):
    """A dict that fails the test when walked whole: a sweep must look only
    at the entries due."""

    def _scan(self, *a):
        raise AssertionError("walked the whole hot set")

    __iter__ = items = values = keys = _scan


def _hot(i, ttl_ms):
    return decode_message('{"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"k%d","ttl_ms":%d,"node":"a"}'
                          % (i + 1, i, ttl_ms))[0]


def test_hot_set_expire_touches_only_due():
    """40,000 entries with a far expiry and 5 due: a sweep looks at the 5,
    never at the rest, and an idle sweep at nothing."""
    hs = HotSet()
    hs.m = NoScan()
    for i in range(40_000):
        hs.apply(_hot(i, 3_600_000), 0.0)
    for i in range(40_000, 40_005):
        hs.apply(_hot(i, 1000), 0.0)
    hs.expire(0.5)
    assert hs.examined == 0 and len(hs.m) == 40_005
    hs.expire(1.0)
    assert hs.examined == 5 and len(hs.m) == 40_000
    assert not hs.hot_until("redis", "0", b"k40000", 1.0)[1]
    for _ in range(100):
        hs.expire(2.0)
    assert hs.examined == 5


def test_hot_set_expire_refresh_and_cold():
    """A refreshed entry lapses at its new expiry, one made until-cold or
    removed and re-added never by its old one; stale heap items stay bounded."""
    hs = HotSet()
    hs.apply(_hot(1, 1000), 0.0)
    hs.apply(_hot(1, 1000), 0.9)  # refreshed: until 1.9
    hs.apply(_hot(2, 1000), 0.0)
    hs.apply(_hot(2, 0), 0.5)  # until cold now
    hs.apply(_hot(3, 1000), 0.0)
    hs.apply(decode_message('{"seq":9,"type":"cold","proto":"redis","ns":"0","key":"k3","node":"a"}')[0], 0.1)
    hs.apply(_hot(3, 5000), 0.2)  # re-added: until 5.2
    hs.expire(1.5)
    assert {e.key for e in hs.live(1.5)} == {b"k1", b"k2", b"k3"}
    hs.expire(1.9)
    assert {x[0].key for x in hs.m.values()} == {b"k2", b"k3"}
    hs.expire(100.0)
    assert [x[0].key for x in hs.m.values()] == [b"k2"]
    # One key refreshed many times: the heap is compacted, not grown.
    for n in range(10_000):
        hs.apply(_hot(4, 1000), float(n))
    assert len(hs.heap) <= 2 * len(hs.m) + 1025
    hs.expire(10_000.5)
    assert [x[0].key for x in hs.m.values()] == [b"k2"]


def test_cache_housekeep_touches_only_due():
    """The cache's hot map: 40,000 keys hot for an hour and 3 due; the
    250 ms housekeeping and the mode check look at the 3 only."""
    from hotsniff_shim.cache import Cache
    c = Cache("0", lambda e: True)
    c.hot = NoScan()
    for i in range(40_000):
        c.set_hot(b"k%d" % i, 3600.0, True, True)
    for i in range(3):
        c.set_hot(b"due%d" % i, 1.0, True, True)
    c.set_hot(b"forever", 0.0, True, True)
    c.set_hot(b"due0", 0.5, True, True)  # its until changed
    c.housekeep(0.9)
    assert c.hot_examined == 1 and b"due0" not in c.hot and len(c.hot) == 40_003
    c.housekeep(1.0)
    # due1, due2 and due0's stale item (until 1.0), each once.
    assert c.hot_examined == 4 and len(c.hot) == 40_001
    for _ in range(100):
        c.housekeep(2.0)
    assert c.hot_examined == 4
    assert c.active
    c.set_hot(b"forever", 0.0, False, False)
    assert c.hot_forever == 0
    # Held (the channel is down): nothing lapses.
    c.on_channel(False)
    c.housekeep(7200.0)
    assert len(c.hot) == 40_000
    c.on_channel(True)
    c.housekeep(7200.0)
    assert len(c.hot) == 0


def _invalidated_cache(stale_grace=5.0):
    """A cache holding hot key k (admitted, fetched once), then invalidated
    (an invalidate message after a write the client did not make)."""
    import time as _t
    from hotsniff_shim.cache import ACT_FETCH, KIND_STRING, Cache
    c = Cache("0", lambda e: True, local_ttl=60.0, stale_grace=stale_grace)
    c.set_hot(b"k", 0.0, True, True)
    now = _t.monotonic()
    c.acquire(b"k", KIND_STRING, now)  # recorded
    act, _, t = c.acquire(b"k", KIND_STRING, now)
    assert act == ACT_FETCH
    c.store_value(t, b"v1")
    c.invalidate(b"k", "event")
    return c


def test_invalidated_read_waits_for_refresh_in_flight():
    """After an invalidation, a read arriving while another caller's refresh
    is in flight waits for it and serves what it stored, instead of going
    to Redis itself; a plain acquire (MGET, pipelines) does not wait."""
    import threading
    import time as _t
    from hotsniff_shim.cache import ACT_FETCH, ACT_HIT, ACT_PASS, KIND_STRING
    c = _invalidated_cache()
    act, _, t = c.acquire(b"k", KIND_STRING, _t.monotonic())
    assert act == ACT_FETCH  # the refresh, in flight until stored below
    assert c.acquire(b"k", KIND_STRING, _t.monotonic())[0] == ACT_PASS
    got = []
    ts = [threading.Thread(target=lambda: got.append(c.acquire_wait(b"k", KIND_STRING, _t.monotonic())))
          for _ in range(4)]
    for th in ts:
        th.start()
    _t.sleep(0.2)
    assert got == [], "the readers went on before the refresh ended"
    c.store_value(t, b"v2")
    for th in ts:
        th.join(2)
    assert [(a, v.data if v else None, tk) for a, v, tk in got] == [(ACT_HIT, b"v2", None)] * 4
    st = c.stats()
    assert st["wait_hits"] == 4 and st["refreshes"] == 2, st


def test_invalidated_read_wait_bounded():
    """The wait ends stale_grace after the refresh began: a hung refresh
    hands its token to the waiting read, which fetches itself."""
    import time as _t
    from hotsniff_shim.cache import ACT_FETCH, KIND_STRING
    c = _invalidated_cache(stale_grace=0.15)
    t0 = _t.monotonic()
    act, _, t = c.acquire(b"k", KIND_STRING, t0)
    assert act == ACT_FETCH
    act, _, t2 = c.acquire_wait(b"k", KIND_STRING, _t.monotonic())
    waited = _t.monotonic() - t0
    assert act == ACT_FETCH and 0.14 <= waited < 1.0, waited
    # The hung refresh ends late: its reply is not the token holder's.
    c.store_value(t, b"late")
    c.store_value(t2, b"v2")
    assert c.acquire(b"k", KIND_STRING, _t.monotonic())[1].data == b"v2"


def test_invalidated_read_wait_asyncio():
    import asyncio
    import time as _t
    from hotsniff_shim.cache import ACT_FETCH, ACT_HIT, KIND_STRING
    c = _invalidated_cache()

    async def main():
        act, _, t = c.acquire(b"k", KIND_STRING, _t.monotonic())
        assert act == ACT_FETCH
        ws = [asyncio.ensure_future(c.acquire_wait_async(b"k", KIND_STRING, _t.monotonic())) for _ in range(4)]
        await asyncio.sleep(0.1)
        assert not any(w.done() for w in ws)
        c.store_value(t, b"v2")
        got = await asyncio.wait_for(asyncio.gather(*ws), 2)
        assert [(a, v.data) for a, v, _ in got] == [(ACT_HIT, b"v2")] * 4
    asyncio.run(main())
    assert c.stats()["wait_hits"] == 4


def test_asyncio_cluster_twin_options():
    """The channel's sync cluster client reaches the nodes as the asyncio
    cluster client's connections do: its credentials, and TLS with its
    settings where the nodes' connections are SSLConnection (redis-py
    versions whose asyncio cluster has TLS)."""
    from types import SimpleNamespace

    from redis.asyncio.cluster import RedisCluster as AsyncCluster

    from hotsniff_shim.asyncio_cluster import twin_cluster_options

    plain = AsyncCluster(host="127.0.0.1", port=7000, password="pw", socket_timeout=2.0)
    nodes, opts = twin_cluster_options(plain)
    assert [(n.host, n.port) for n in nodes] == [("127.0.0.1", 7000)]
    assert opts == {"password": "pw", "socket_timeout": 2.0}

    class SSLConnection:  # the class name is what is checked
        pass
    node = SimpleNamespace(host="10.0.0.1", port=7001, connection_class=SSLConnection,
                           connection_kwargs={"username": "u", "password": "pw", "ssl_ca_certs": "/ca.pem",
                                              "ssl_cert_reqs": "required", "ssl_keyfile": None})
    tls = SimpleNamespace(nodes_manager=SimpleNamespace(nodes_cache={}, startup_nodes={"n": node}),
                          get_connection_kwargs=lambda: {"password": "pw"})
    nodes, opts = twin_cluster_options(tls)
    assert nodes == [node]
    assert opts == {"username": "u", "password": "pw", "ssl": True, "ssl_ca_certs": "/ca.pem",
                    "ssl_cert_reqs": "required", "ssl_keyfile": None}
