"""An application process of the restart test: APP_READERS threads each
read APP_KEY from the cache at APP_CACHE at APP_RATE reads/s through the
Python shim (following the channel at APP_CHANNEL) until stdin closes.

It prints {"ready": true} once the shim loaded its first snapshot, then
once every 200 ms one JSON line: cumulative reads, errors, local hits,
reloads, channel_up, and "seen": for each value read, the wall-clock start
(Unix ns) of the last read that returned it (so the test can check the
staleness bound of a write)."""

import json
import os
import sys
import threading
import time

import redis

import hotsniff_shim


def main():
    host, port = os.environ["APP_CACHE"].rsplit(":", 1)
    chost, cport = os.environ["APP_CHANNEL"].rsplit(":", 1)
    key = os.environ["APP_KEY"]
    readers = int(os.environ["APP_READERS"])
    rate = float(os.environ["APP_RATE"])
    r = redis.Redis(host=host, port=int(port), max_connections=readers + 4)
    shim = hotsniff_shim.install(r, channel_client=redis.Redis(host=chost, port=int(cport)))
    if not shim.wait_synced(20):
        print(json.dumps({"error": "snapshot never loaded"}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)
    lock = threading.Lock()
    counts = {"reads": 0, "errors": 0}
    seen = {}
    stop = threading.Event()

    def reader():
        every = 1.0 / rate
        nxt = time.monotonic()
        n = err = 0
        last = {}
        while not stop.is_set():
            nxt += every
            d = nxt - time.monotonic()
            if d > 0:
                time.sleep(d)
            elif d < -0.1:
                nxt = time.monotonic()  # no catch-up burst after a stall
            start = time.time_ns()
            try:
                v = r.get(key)
            except Exception:  # noqa: BLE001 - counted, the test reads stderr
                err += 1
                continue
            n += 1
            last[v.decode() if v is not None else None] = start
            if n % 25 == 0 or err:
                flush(n, err, last)
                n = err = 0
                last = {}
        flush(n, err, last)

    def flush(n, err, last):
        with lock:
            counts["reads"] += n
            counts["errors"] += err
            for k, s in last.items():
                seen[k] = max(seen.get(k, 0), s)

    ts = [threading.Thread(target=reader, daemon=True) for _ in range(readers)]
    for t in ts:
        t.start()

    def report():
        while not stop.is_set():
            time.sleep(0.2)
            st = shim.stats()
            with lock:
                line = {"t": time.time_ns(), "reads": counts["reads"], "errors": counts["errors"],
                        "local": st["hits"] + st["stale_hits"], "reloads": st["channel_reloads"],
                        "channel_up": bool(st["channel_up"]), "seen": dict(seen)}
            print(json.dumps(line), flush=True)

    threading.Thread(target=report, daemon=True).start()
    sys.stdin.read()  # the test closes stdin to stop
    stop.set()
    for t in ts:
        t.join()
    shim.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
