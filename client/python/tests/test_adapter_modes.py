"""The conformance adapter runs each client mode ("mode" in its JSON
configuration): the same requests, the same replies, values served
locally."""

import json
import os
import subprocess
import sys
import time

import pytest
import redis

from conftest import Publisher, unique

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Adapter:
    def __init__(self, cfg):
        env = dict(os.environ, PYTHONPATH=HERE)
        self.p = subprocess.Popen([sys.executable, "-m", "hotsniff_shim.conformance_adapter", json.dumps(cfg)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True, env=env, cwd=HERE)
        assert json.loads(self.p.stdout.readline()) == {"ready": True}

    def do(self, **req):
        self.p.stdin.write(json.dumps(req) + "\n")
        self.p.stdin.flush()
        return json.loads(self.p.stdout.readline())

    def close(self):
        try:
            self.do(op="close")
            self.p.wait(10)
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait()


@pytest.mark.parametrize("mode", ["sync", "single", "asyncio", "cluster", "asyncio-cluster"])
def test_adapter_mode(mode, server, request):
    if mode.endswith("cluster"):
        cl = request.getfixturevalue("cluster")
        cache_port = cl.nodes[0].port
        from redis.cluster import RedisCluster
        data = RedisCluster(host="127.0.0.1", port=cache_port)
    else:
        cache_port = server.port
        data = redis.Redis(port=cache_port)
    k, h = unique("ak"), unique("ah")
    data.set(k, "v")
    data.hset(h, "f", "1")
    ch = unique("adch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()
    a = Adapter({"cache": "127.0.0.1:%d" % cache_port, "channel_addr": "127.0.0.1:%d" % server.port,
                 "channel": ch, "local_ttl_ms": 5000, "mode": mode})
    try:
        pub.send(k)
        pub.send(h)
        deadline = time.monotonic() + 5
        while not (a.do(op="hot", key=k)["hot"] and a.do(op="hot", key=h)["hot"]):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        for _ in range(3):
            assert a.do(op="get", key=k) == {"value": "v"}
            assert a.do(op="hgetall", key=h) == {"hash": {"f": "1"}}
        assert a.do(op="mget", keys=[k]) == {"values": ["v"]}
        assert a.do(op="pipeline_write_read", key=k, value="w") == {"value": "w"}
        assert a.do(op="get", key=k) == {"value": "w"}
        assert a.do(op="burst", key=k, n=8) == {"values": ["w"] * 8}
        assert a.do(op="hburst", key=h, field="f", n=6) == {"values": ["1"] * 6}
        assert a.do(op="load", key=k, ms=200, threads=2, want="w")["bad"] == 0
        st = a.do(op="stats")
        assert st["mode"] == ("sync" if mode == "single" else mode)
        assert st["hits"] > 5 and st["channel_up"]
    finally:
        a.close()
        data.close()
