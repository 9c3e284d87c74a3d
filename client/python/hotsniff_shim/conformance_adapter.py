"""The conformance adapter: drives this shim for client/conformance.

Not part of the shim's API: it ships in the package only so that the Go
suite can run it as ``python3 -m hotsniff_shim.conformance_adapter
CONFIG_JSON``. It installs the shim on a redis-py client, prints
{"ready":true} once the first snapshot is loaded, then answers one JSON
request per stdin line with one JSON line on stdout. The protocol is
described in client/conformance/README.md.

The configuration's ``"mode"`` picks the client: ``"sync"`` (default: a
pooled redis.Redis), ``"single"`` (redis.Redis with
single_connection_client=True), ``"asyncio"`` (redis.asyncio.Redis, driven
on an event loop thread), ``"cluster"`` (redis.cluster.RedisCluster, with
``cache`` one node of the cluster) or ``"asyncio-cluster"``
(redis.asyncio.cluster.RedisCluster, driven as ``"asyncio"``, its nodes
found as ``"cluster"``'s). ``"channel_secret"`` (a string) is
passed as ``channel_secret``.
"""

from __future__ import annotations

import asyncio
import base64
import inspect
import json
import logging
import sys
import threading
import time

import redis

from . import install


def _s(v):
    if v is None:
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "surrogateescape")
    return v


def hash_read(r, k, field, i):
    """Read i of an hburst: HGET, HMGET or HGETALL of k in turn; its value
    of field (None if missing), or the error's text."""
    try:
        if i % 3 == 0:
            return _s(r.hget(k, field))
        if i % 3 == 1:
            return _s(r.hmget(k, [field])[0])
        h = r.hgetall(k)
        return _s(h.get(field.encode() if isinstance(field, str) else field))
    except redis.RedisError as e:
        return str(e)


class Syncify:
    """A redis.asyncio client (or pipeline) called like a sync one: every
    awaitable result is run on the adapter's event loop thread."""

    def __init__(self, obj, loop):
        self._obj = obj
        self._loop = loop

    def _run(self, res):
        if inspect.isawaitable(res):
            async def aw():
                return await res
            res = asyncio.run_coroutine_threadsafe(aw(), self._loop).result()
        return res

    def __getattr__(self, name):
        a = getattr(self._obj, name)
        if not callable(a):
            return a

        def f(*args, **kw):
            res = a(*args, **kw)
            # A pipeline is awaitable too (redis.asyncio.cluster's awaits to
            # an empty queue): it is wrapped, never awaited.
            if res is self._obj or type(res).__name__.endswith("Pipeline"):
                return Syncify(res, self._loop)
            return self._run(res)
        return f

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.reset()


class Locked:
    """A single-connection redis-py 4 client is not thread-safe: the
    adapter's concurrent ops (burst, load) take turns, as an application
    sharing one connection must."""

    def __init__(self, obj):
        self._obj = obj
        self._lock = threading.RLock()

    def __getattr__(self, name):
        a = getattr(self._obj, name)
        if not callable(a) or name == "pipeline":
            return a

        def f(*args, **kw):
            with self._lock:
                return a(*args, **kw)
        return f


def loop_thread():
    """An event loop running on its own thread, for an asyncio client driven
    by the adapter's sync ops."""
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, name="adapter-loop", daemon=True).start()
    return loop


def clients(cfg):
    """(client to install on, the object ops call, a plain client)."""
    mode = cfg.get("mode") or "sync"
    host, port = cfg["cache"].rsplit(":", 1)
    kw = {}
    if cfg.get("username"):
        kw["username"] = cfg["username"]
    if cfg.get("password"):
        kw["password"] = cfg["password"]
    if mode == "cluster":
        from redis.cluster import RedisCluster
        r = RedisCluster(host=host, port=int(port), **kw)
        return r, r, RedisCluster(host=host, port=int(port), **kw)
    if mode == "asyncio-cluster":
        from redis.asyncio.cluster import RedisCluster as AsyncCluster
        from redis.cluster import RedisCluster
        r = AsyncCluster(host=host, port=int(port), **kw)
        return r, Syncify(r, loop_thread()), RedisCluster(host=host, port=int(port), **kw)
    db = int(cfg.get("db", 0))
    plain = redis.Redis(host=host, port=int(port), db=db, **kw)
    # pool_size bounds a pooled client's connections the way go-redis's
    # PoolSize does: a caller waits for a free connection (redis-py's
    # BlockingConnectionPool). A single-connection client has no pool of
    # its own to bound.
    size = int(cfg.get("pool_size") or 0)
    if mode == "single":
        r = redis.Redis(host=host, port=int(port), db=db, single_connection_client=True, **kw)
        return r, Locked(r), plain
    if mode == "asyncio":
        import redis.asyncio as aioredis
        loop = loop_thread()
        if size:
            pool = aioredis.BlockingConnectionPool(host=host, port=int(port), db=db, max_connections=size, **kw)
            r = aioredis.Redis(connection_pool=pool)
        else:
            r = aioredis.Redis(host=host, port=int(port), db=db, **kw)
        return r, Syncify(r, loop), plain
    if mode != "sync":
        raise SystemExit("conformance adapter: unknown mode %r (sync, single, asyncio, cluster, asyncio-cluster)" % mode)
    if size:
        pool = redis.BlockingConnectionPool(host=host, port=int(port), db=db, max_connections=size, **kw)
        return redis.Redis(connection_pool=pool), None, plain
    return redis.Redis(host=host, port=int(port), db=db, **kw), None, plain


def main() -> int:
    cfg = json.loads(sys.argv[1])
    logging.basicConfig(stream=sys.stderr, level=logging.INFO)
    target, facade, plain = clients(cfg)
    r = facade if facade is not None else target
    chost, cport = cfg["channel_addr"].rsplit(":", 1)
    ch = redis.Redis(host=chost, port=int(cport))
    shim = install(
        target, channel_client=ch, channel=cfg.get("channel", "hotsniff:hotkeys"),
        channel_secret=cfg.get("channel_secret") or None,
        servers=cfg.get("servers") or (), any_server=bool(cfg.get("any_server")),
        local_ttl=cfg.get("local_ttl_ms", 50) / 1000.0,
        stale_grace=cfg.get("stale_grace_ms", 100) / 1000.0,
        max_entries=int(cfg.get("max_entries", 10000)),
        hot_mode_linger=cfg.get("linger_ms", 120000) / 1000.0,
    )
    if not shim.wait_synced(10):
        print(json.dumps({"error": "snapshot never loaded"}), flush=True)
        return 1
    print(json.dumps({"ready": True}), flush=True)

    def key(req, name="key"):
        if name + "_b64" in req:
            return base64.b64decode(req[name + "_b64"])
        return req[name]

    for line in sys.stdin:
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "get":
                out = {"value": _s(r.get(key(req)))}
            elif op == "mget":
                out = {"values": [_s(v) for v in r.mget(req["keys"])]}
            elif op == "hget":
                out = {"value": _s(r.hget(key(req), req["field"]))}
            elif op == "hmget":
                out = {"values": [_s(v) for v in r.hmget(key(req), req["fields"])]}
            elif op == "hgetall":
                out = {"hash": {_s(k): _s(v) for k, v in r.hgetall(key(req)).items()}}
            elif op == "set":
                r.set(key(req), req["value"])
                out = {}
            elif op == "hset":
                r.hset(key(req), req["field"], req["value"])
                out = {}
            elif op == "del":
                r.delete(key(req))
                out = {}
            elif op == "do":
                r.execute_command(*req["args"])
                out = {}
            elif op == "pipeline_set":
                p = r.pipeline(transaction=False)
                p.set(key(req), req["value"])
                p.execute()
                out = {}
            elif op == "pipeline_get":
                p = r.pipeline(transaction=False)
                p.get(key(req))
                out = {"value": _s(p.execute()[0])}
            elif op == "pipeline_write_read":
                p = r.pipeline(transaction=False)
                p.set(key(req), req["value"])
                p.get(key(req))
                out = {"value": _s(p.execute()[1])}
            elif op == "select":
                # Through the client the application uses: on a pool it
                # moves one pooled connection, on a single-connection client
                # its connection.
                r.select(int(req["db"]))
                out = {}
            elif op == "pipeline_select_get":
                p = r.pipeline(transaction=False)
                p.select(int(req["db"]))
                p.get(key(req))
                out = {"value": _s(p.execute()[1])}
            elif op == "multi_get":
                p = r.pipeline(transaction=True)
                p.get(key(req))
                out = {"value": _s(p.execute()[0])}
            elif op == "watch_get":
                with r.pipeline() as p:
                    p.watch(key(req))
                    v = p.get(key(req))
                    p.multi()
                    p.get(key(req))
                    p.execute()
                out = {"value": _s(v)}
            elif op == "burst":
                k = key(req)
                out = {"values": burst(int(req["n"]), lambda i: _s(r.get(k)))}
            elif op == "hburst":
                k, field = key(req), req["field"]
                out = {"values": burst(int(req["n"]), lambda i: hash_read(r, k, field, i))}
            elif op == "hot":
                out = {"hot": shim.is_hot(key(req))}
            elif op == "stats":
                st = shim.stats()
                out = {"entries": st["entries"], "hot_keys": st["hot_keys"], "hot_mode": st["hot_mode"],
                       "hits": st["hits"] + st["stale_hits"], "reloads": st["channel_reloads"],
                       "messages": st["channel_messages"], "bad_messages": st["bad_messages"],
                       "channel_up": st["channel_up"], "mode": st["mode"]}
            elif op == "watch":
                out = watch(r, key(req), req["want"], req["ms"])
            elif op == "load":
                out = load(r, key(req), req.get("want"), req["ms"], int(req.get("threads", 1)))
            elif op == "trace":
                out = trace(r, key(req), req["ms"], int(req.get("threads", 1)))
            elif op == "read_keys":
                out = read_keys(r, req["keys"], int(req.get("n", 1)))
            elif op == "plain_get":
                out = {"value": _s(plain.get(key(req)))}
            elif op == "close":
                shim.close()
                print(json.dumps({}), flush=True)
                return 0
            else:
                out = {"error": "unknown op " + op}
        except Exception as err:  # noqa: BLE001 - any failure is the op's reply
            out = {"error": "%s: %s" % (type(err).__name__, err)}
        print(json.dumps(out), flush=True)
    shim.close()
    return 0


def burst(n, read):
    """read(i) from n threads released together; their values in order."""
    vals = [None] * n
    bar = threading.Barrier(n)

    def one(i):
        bar.wait()
        vals[i] = read(i)
    ts = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return vals


def watch(r, k, want, ms):
    """Reads k for ms; reports when the last read that did not see want
    started (wall clock ns), so the driver can compare it with its write."""
    end = time.monotonic() + ms / 1000.0
    reads, last_bad = 0, 0
    while time.monotonic() < end:
        start = time.time_ns()
        v = _s(r.get(k))
        reads += 1
        if v != want:
            last_bad = start
    return {"reads": reads, "last_bad_ns": last_bad}


def load(r, k, want, ms, threads):
    end = time.monotonic() + ms / 1000.0
    counts = [0] * threads
    bad = [0] * threads

    def run(i):
        while time.monotonic() < end:
            v = _s(r.get(k))
            counts[i] += 1
            if want is not None and v != want:
                bad[i] += 1
    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return {"reads": sum(counts), "bad": sum(bad)}


def trace(r, k, ms, threads):
    """Reads k for ms from threads loops; for each value seen, the wall-clock
    start (Unix ns) of the last read that returned it, so the driver can
    compare it with the write that replaced it. Errors are counted, not
    raised: the driver checks that none reached the application."""
    end = time.monotonic() + ms / 1000.0
    lock = threading.Lock()
    last = {}
    tot = {"reads": 0, "errors": 0, "nil": 0, "first_error": ""}

    def run():
        mine, reads, errors, nils, first = {}, 0, 0, 0, ""
        while time.monotonic() < end:
            start = time.time_ns()
            try:
                v = _s(r.get(k))
            except Exception as err:  # noqa: BLE001 - counted for the driver
                errors += 1
                first = first or "%s: %s" % (type(err).__name__, err)
                continue
            reads += 1
            if v is None:
                nils += 1
            else:
                mine[v] = start
        with lock:
            for v, ns in mine.items():
                last[v] = max(last.get(v, 0), ns)
            tot["reads"] += reads
            tot["errors"] += errors
            tot["nil"] += nils
            tot["first_error"] = tot["first_error"] or first
    ts = [threading.Thread(target=run) for _ in range(max(threads, 1))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    tot["last_ns"] = last
    return tot


def read_keys(r, keys, n):
    """Reads each key n times in turn (admits a large hot set)."""
    reads, errors = 0, 0
    for _ in range(n):
        for k in keys:
            try:
                r.get(k)
                reads += 1
            except Exception:  # noqa: BLE001 - counted for the driver
                errors += 1
    return {"reads": reads, "errors": errors}


if __name__ == "__main__":
    sys.exit(main())
