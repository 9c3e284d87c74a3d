"""Hit-path cost of the Python shim, side by side in one run.

    /usr/bin/python3 client/python/bench.py [--n 200000]

Starts its own redis-server on a free loopback port, makes one key hot
through the channel, and times redis-py GETs per call:

  shim-hit        the shim installed, the key cached (served locally)
  shim-not-hot    the shim installed and in hot-running mode, another key
                  (passes through: the shim's overhead on everything else)
  plain           redis-py without the shim (a real round trip)

Every figure is the best of 5 repeats. The script checks with INFO
commandstats that the hit runs never reached Redis.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import timeit

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import redis  # noqa: E402

import hotsniff_shim  # noqa: E402


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=200000, help="calls per repeat for local paths")
    args = ap.parse_args()
    port = free_port()
    d = tempfile.mkdtemp()
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
    try:
        plain = redis.Redis(port=port)
        for _ in range(100):
            try:
                plain.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        plain.set("hot", "v" * 32)
        plain.set("cold", "v" * 32)
        app = redis.Redis(port=port)
        shim = hotsniff_shim.install(app, channel="bench", local_ttl=3600.0, any_server=True)
        shim.wait_synced(5)
        plain.publish("bench", json.dumps({"v": 1, "seq": 1, "type": "hot", "proto": "redis", "server": "",
                                           "ns": "0", "key": "hot", "qps": 1, "ttl_ms": 0, "ts": "",
                                           "source": "manual", "node": "bench"}))
        while not shim.is_hot("hot"):
            time.sleep(0.01)
        for _ in range(3):
            app.get("hot")
        gets = plain.info("commandstats")["cmdstat_get"]["calls"]

        def best(stmt, n):
            return min(timeit.repeat(stmt, number=n, repeat=5)) / n * 1e9

        hit = best(lambda: app.get("hot"), args.n)
        if plain.info("commandstats")["cmdstat_get"]["calls"] != gets:
            sys.exit("the hit runs reached Redis: the figure would not be a hit")
        rt_n = max(args.n // 20, 2000)
        not_hot = best(lambda: app.get("cold"), rt_n)
        plain_rt = best(lambda: plain.get("cold"), rt_n)
        print(f"redis-py {redis.__version__}, Python {sys.version.split()[0]}")
        print(f"shim-hit      {hit:10.0f} ns/op")
        print(f"shim-not-hot  {not_hot:10.0f} ns/op")
        print(f"plain         {plain_rt:10.0f} ns/op")
        print(f"plain/shim-hit {plain_rt / hit:.1f}x")
        shim.close()
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    main()
