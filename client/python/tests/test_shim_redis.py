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
        deadline = time.time() + 5
        while not shim.is_hot("k5") and time.time() < deadline:
            time.sleep(0.01)
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
        while not shim.is_hot("kt"):
            time.sleep(0.01)
        r.get("kt")
        r.get("kt")
        time.sleep(0.25)
        before = gets(plain)
        bar = threading.Barrier(16)
        out = []

        def run():
            bar.wait()
            out.append(r.get("kt"))
        ts = [threading.Thread(target=run) for _ in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
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
    while not shim.is_hot("kc"):
        time.sleep(0.01)
    r.get("kc")
    r.get("kc")
    shim.close()
    before = gets(plain)
    assert r.get("kc") == b"v"
    assert gets(plain) == before + 1
