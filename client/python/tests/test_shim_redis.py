"""The shim against a real redis-server (started here): the redis-py 5 call
form, threads, and metrics. Cross-shim behaviour is the conformance suite's."""

import json
import shutil
import socket
import subprocess
import tempfile
import threading
import time

import pytest
import redis

import hotsniff_shim
from conftest import wait


def burst(read, n=16):
    """Runs read on n threads released together; returns their results."""
    bar = threading.Barrier(n)
    out = []

    def run():
        bar.wait()
        out.append(read())
    ts = [threading.Thread(target=run) for _ in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return out


@pytest.fixture(scope="module")
def port():
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server not installed")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    d = tempfile.mkdtemp()
    srv = subprocess.Popen(["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    c = redis.Redis(port=p)
    for _ in range(200):
        try:
            c.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.02)
    yield p
    srv.kill()
    srv.wait()
    shutil.rmtree(d, ignore_errors=True)


def gets(c):
    return c.info("commandstats").get("cmdstat_get", {}).get("calls", 0)


def hot(c, channel, key, seq=1):
    c.publish(channel, json.dumps({"v": 1, "seq": seq, "type": "hot", "proto": "redis", "server": "", "ns": "0",
                                   "key": key, "qps": 1, "ttl_ms": 0, "ts": "", "source": "manual", "node": "t"}))


def test_redis_py_5_call_form(port):
    plain = redis.Redis(port=port)
    plain.set("k5", "v")
    r = redis.Redis(port=port)
    shim = hotsniff_shim.install(r, channel="t5", local_ttl=60)
    try:
        assert shim.wait_synced(5)
        hot(plain, "t5", "k5")
        wait(lambda: shim.is_hot("k5"), what="k5 hot")
        # redis-py 5 typed reads pass keys=[...]; they are served all the same.
        r.get("k5")
        r.get("k5")
        before = gets(plain)
        assert r.execute_command("GET", "k5", keys=["k5"]) == b"v"
        assert gets(plain) == before
        # Any other option changes the reply: passed through.
        assert r.execute_command("GET", "k5", **{redis.client.NEVER_DECODE: True}) == b"v"
        assert gets(plain) == before + 1
    finally:
        shim.close()


def test_threads_single_refresh(port):
    plain = redis.Redis(port=port)
    plain.set("kt", "v")
    r = redis.Redis(port=port, max_connections=64)
    shim = hotsniff_shim.install(r, channel="tt", local_ttl=0.2, stale_grace=5)
    try:
        assert shim.wait_synced(5)
        hot(plain, "tt", "kt")
        wait(lambda: shim.is_hot("kt"), what="kt hot")
        r.get("kt")
        r.get("kt")
        time.sleep(0.25)
        before = gets(plain)
        out = burst(lambda: r.get("kt"))
        assert out == [b"v"] * 16
        assert gets(plain) == before + 1
        st = shim.stats()
        # One refresh; the others got the old value, or the new one if it
        # landed before they read.
        assert st["refreshes"] == 2 and st["stale_hits"] + st["hits"] == 15
    finally:
        shim.close()


def test_close_passes_through(port):
    plain = redis.Redis(port=port)
    plain.set("kc", "v")
    r = redis.Redis(port=port)
    shim = hotsniff_shim.install(r, channel="tc", local_ttl=60)
    assert shim.wait_synced(5)
    hot(plain, "tc", "kc")
    wait(lambda: shim.is_hot("kc"), what="kc hot")
    r.get("kc")
    r.get("kc")
    shim.close()
    before = gets(plain)
    assert r.get("kc") == b"v"
    assert gets(plain) == before + 1


def cmdcalls(c, name):
    return c.info("commandstats").get("cmdstat_" + name, {}).get("calls", 0)


def _warm(plain, r, shim, channel, keys):
    for k in keys:
        hot(plain, channel, k, seq=keys.index(k) + 1)
    deadline = time.time() + 5
    while not all(shim.is_hot(k) for k in keys) and time.time() < deadline:
        time.sleep(0.01)
    for k in keys:
        r.get(k)
        r.get(k)


@pytest.fixture
def served(port):
    plain = redis.Redis(port=port)
    plain.flushdb()
    plain.set("hk", "hv")
    plain.set("ck", "cv")
    plain.hset("hh", mapping={"f": "1", "g": "2"})
    r = redis.Redis(port=port)
    ch = "tp%d" % time.monotonic_ns()
    shim = hotsniff_shim.install(r, channel=ch, local_ttl=60)
    assert shim.wait_synced(5)
    _warm(plain, r, shim, ch, ["hk"])
    hot(plain, ch, "hh", seq=10)
    wait(lambda: shim.is_hot("hh"), what="hh hot")
    r.hgetall("hh")
    r.hgetall("hh")
    yield plain, r, shim
    shim.close()


def test_pipeline_hot_read_served(served):
    plain, r, shim = served
    before, hits = gets(plain), shim.stats()["hits"]
    p = r.pipeline(transaction=False)
    p.get("hk")
    p.get("hk")
    assert p.execute() == [b"hv", b"hv"]
    # Nothing was left to send: Redis saw no GET (and no pipeline at all).
    assert gets(plain) == before
    st = shim.stats()
    assert st["hits"] == hits + 2
    assert p.command_stack == []
    # The served reads count toward the absorbed report the next refresh carries.
    assert shim.cache.entries[b"hk"].hits >= 2


def test_pipeline_with_write_sent_whole(served):
    plain, r, shim = served
    before, sets = gets(plain), cmdcalls(plain, "set")
    p = r.pipeline(transaction=False)
    p.get("hk")
    p.set("hk", "new")
    p.get("hk")
    assert p.execute() == [b"hv", True, b"new"]
    assert gets(plain) == before + 2 and cmdcalls(plain, "set") == sets + 1
    # The write dropped the cached value: the next read sees it.
    assert r.get("hk") == b"new"


def test_transaction_never_served(served):
    plain, r, shim = served
    before, hits = gets(plain), shim.stats()["hits"]
    p = r.pipeline(transaction=True)
    p.get("hk")
    assert p.execute() == [b"hv"]
    assert gets(plain) == before + 1
    with r.pipeline(transaction=False) as p:
        p.watch("hk")
        assert p.get("hk") == b"hv"
        p.get("hk")  # immediate mode after WATCH: sent
        p.multi()
        p.get("hk")
        assert p.execute() == [b"hv"]
    assert gets(plain) == before + 4
    assert shim.stats()["hits"] == hits


def test_pipeline_mixed_order_and_types(served):
    plain, r, shim = served
    before, hgetalls = gets(plain), cmdcalls(plain, "hgetall")
    p = r.pipeline(transaction=False)
    p.get("ck")            # cold: sent
    p.get("hk")            # hot: local
    p.hgetall("hh")        # hot hash: local
    p.get("missing")       # cold, missing: sent
    p.hget("hh", "g")      # local
    p.hmget("hh", "f", "x")  # local
    p.mget("hk", "hk")     # every key fresh: local
    p.mget("hk", "ck")     # not all fresh: sent
    p.hlen("hh")           # not a served read: sent
    res = p.execute()
    assert res == [b"cv", b"hv", {b"f": b"1", b"g": b"2"}, None, b"2", [b"1", None],
                   [b"hv", b"hv"], [b"hv", b"cv"], 2]
    assert gets(plain) == before + 2
    assert cmdcalls(plain, "hgetall") == hgetalls
    # A cached dict is copied per reply.
    res[2][b"f"] = b"changed"
    p = r.pipeline(transaction=False)
    p.hgetall("hh")
    assert p.execute() == [{b"f": b"1", b"g": b"2"}]


def test_pipeline_error_order(served):
    plain, r, shim = served
    plain.set("str", "x")
    p = r.pipeline(transaction=False)
    p.get("hk")          # local
    p.hget("str", "f")   # WRONGTYPE from Redis
    with pytest.raises(redis.ResponseError) as ei:
        p.execute()
    assert "Command # 2 (HGET str f)" in str(ei.value)
    p = r.pipeline(transaction=False)
    p.get("hk")
    p.hget("str", "f")
    res = p.execute(raise_on_error=False)
    assert res[0] == b"hv" and isinstance(res[1], redis.ResponseError)


def test_pipeline_decoded_replies(port):
    plain = redis.Redis(port=port)
    plain.set("dk", "dv")
    r = redis.Redis(port=port, decode_responses=True)
    shim = hotsniff_shim.install(r, channel="tdec", local_ttl=60)
    try:
        assert shim.wait_synced(5)
        _warm(plain, r, shim, "tdec", ["dk"])
        before = gets(plain)
        p = r.pipeline(transaction=False)
        p.get("dk")
        p.get("nokey")
        assert p.execute() == ["dv", None]
        assert gets(plain) == before + 1
    finally:
        shim.close()


def test_pipeline_with_select_sent_whole(served):
    plain, r, shim = served
    before = gets(plain)
    p = r.pipeline(transaction=False)
    p.execute_command("SELECT", 1)
    p.get("hk")
    p.execute_command("SELECT", 0)
    assert p.execute() == [True, None, True]
    assert gets(plain) == before + 1


# Holds the server for ARGV[1] microseconds: every command sent meanwhile
# waits, as behind a slow refresh under load.
BUSY = ("local t = redis.call('TIME') local s = t[1] * 1000000 + t[2] "
        "while true do local n = redis.call('TIME') "
        "if n[1] * 1000000 + n[2] - s > tonumber(ARGV[1]) then return 1 end end")


def hold_server(port, us=300_000):
    """Starts holding the server (BUSY) and returns the thread to join."""
    th = threading.Thread(target=lambda: redis.Redis(port=port).eval(BUSY, 0, us))
    th.start()
    time.sleep(0.05)  # the script is running
    return th


def test_invalidated_readers_wait(port):
    """After an invalidate message (a write this client did not make), the
    concurrent readers wait for the one refresh instead of each going to
    Redis while it is in flight, and all get the new value."""
    plain = redis.Redis(port=port)
    plain.set("kw", "v1")
    r = redis.Redis(port=port, max_connections=64)
    shim = hotsniff_shim.install(r, channel="tw", local_ttl=60, stale_grace=5)
    try:
        assert shim.wait_synced(5)
        hot(plain, "tw", "kw")
        wait(lambda: shim.is_hot("kw"), what="kw hot")
        r.get("kw")
        assert r.get("kw") == b"v1"
        for rnd in range(2):
            v = b"v%d" % (rnd + 2)
            plain.set("kw", v)
            inv = shim.stats()["invalidations"]["event"]
            plain.publish("tw", json.dumps({"v": 1, "seq": 2 + rnd, "type": "invalidate", "proto": "redis",
                                            "server": "", "ns": "0", "key": "kw", "ts": "", "node": "t"}))
            deadline = time.time() + 5
            while shim.stats()["invalidations"]["event"] == inv:
                assert time.time() < deadline, "invalidate not applied"
                time.sleep(0.005)
            before = gets(plain)
            holder = hold_server(port)
            out = burst(lambda: r.get("kw"))
            holder.join()
            assert out == [v] * 16
            assert gets(plain) - before == 1, "16 reads after the invalidation sent %d GETs" % (gets(plain) - before)
        assert shim.stats()["wait_hits"] >= 16
    finally:
        shim.close()
