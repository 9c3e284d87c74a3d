"""The redis-py shim: serves reads of hot keys from local memory.

It behaves as the Go shim does (docs/client-shim.md): only keys the channel
marks hot for this client's server and DB are cached, each on its second
read; a value is served for ``local_ttl`` from when the read that fetched it
was sent, then exactly one caller refreshes it while the others keep the
current value (never past ``local_ttl + stale_grace``); invalidate, cold, a
snapshot reload and any write through the client drop it; pipelines and
transactions are never served.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from typing import Any, Dict, Iterable, List, Optional, Tuple

import redis
from redis.exceptions import ResponseError

from .events import TYPE_COLD, TYPE_HOT, TYPE_INVALIDATE, Event
from .subscriber import DEFAULT_CHANNEL, Handler, Subscriber
from .writes import written_keys

log = logging.getLogger("hotsniff_shim")

KIND_STRING = 1
KIND_HASH = 2

ACT_PASS, ACT_HIT, ACT_FETCH = 0, 1, 2

INVAL_REASONS = ("write", "event", "tracking", "cold", "snapshot", "flush")
EVICT_REASONS = ("capacity", "not_hot", "idle", "mode_end")

#: Entries whose value expired this long ago leave the cache.
IDLE_AFTER = 10.0


class _Value:
    """One cached reply; never modified once stored, so readers share it."""

    __slots__ = ("expires", "data", "hidx")

    def __init__(self, data: Any, hidx: Optional[Dict[bytes, Any]] = None) -> None:
        self.expires = 0.0
        self.data = data  # GET: bytes/str or None; hash: the dict HGETALL returned
        self.hidx = hidx  # hash: field bytes -> value


class _Entry:
    __slots__ = ("key", "kind", "hot_until", "val", "refreshing", "gen",
                 "uncacheable", "hits", "report_at")

    def __init__(self, key: bytes, kind: int, hot_until: float, now: float) -> None:
        self.key = key
        self.kind = kind
        self.hot_until = hot_until  # 0.0: until cold
        self.val: Optional[_Value] = None
        self.refreshing = 0.0  # start of the one fetch in flight
        self.gen = 0  # moves on every invalidation
        self.uncacheable = False  # a hash larger than max_hash_fields
        self.hits = 0  # served locally since the last absorbed report
        self.report_at = now


class _Ticket:
    __slots__ = ("e", "gen", "token")

    def __init__(self, e: _Entry, gen: int, token: float) -> None:
        self.e, self.gen, self.token = e, gen, token


class Shim(Handler):
    """Install with :func:`install`. ``close()`` stops it (the client keeps
    working, everything passes through)."""

    def __init__(self, client: "redis.Redis", channel_client: Optional["redis.Redis"] = None,
                 channel: str = DEFAULT_CHANNEL, servers: Iterable[str] = (),
                 any_server: bool = False, local_ttl: float = 0.05, stale_grace: float = 0.1,
                 max_entries: int = 10000, max_hash_fields: int = 1000,
                 hot_mode_linger: float = 120.0, report_absorbed: bool = True,
                 logger: Optional[logging.Logger] = None, **subscriber_opts: Any) -> None:
        self.client = client
        self.log = logger or log
        self.local_ttl = local_ttl if local_ttl > 0 else 0.05
        self.stale_grace = stale_grace if stale_grace > 0 else 0.1
        self.max_entries = max_entries if max_entries > 0 else 10000
        self.max_hash_fields = max_hash_fields if max_hash_fields > 0 else 1000
        self.linger = hot_mode_linger if hot_mode_linger > 0 else 120.0
        self.any_server = any_server
        self.extra_servers = [_norm_addr(a) for a in servers]
        self.report_absorbed = report_absorbed
        kw = client.connection_pool.connection_kwargs
        self.ns = str(kw.get("db", 0) or 0)
        self._encoder = client.connection_pool.get_encoder()
        self._servers: frozenset = frozenset()
        self._resolve()

        self._lock = threading.Lock()
        self._hot: Dict[bytes, float] = {}  # hot (and cacheable) keys -> until (0: until cold)
        self._entries: Dict[bytes, _Entry] = {}
        self._seen: Dict[bytes, None] = {}  # hot keys read once, not yet admitted
        self._active = False
        self._last_hot = 0.0
        self._closed = False
        self.m = dict(hits=0, stale_hits=0, misses=0, admissions=0, refreshes=0,
                      fetch_errors=0, absorbed_reports=0)
        self.invalidations = {r: 0 for r in INVAL_REASONS}
        self.evictions = {r: 0 for r in EVICT_REASONS}

        self._orig_execute = client.execute_command
        self._orig_pipeline = client.pipeline
        self._pipe_classes: Dict[type, type] = {}
        self.sub = Subscriber(channel_client if channel_client is not None else client,
                              channel=channel, handler=self, logger=self.log, **subscriber_opts)
        self._stop = threading.Event()
        self._house = threading.Thread(target=self._housekeep, name="hotsniff-housekeep", daemon=True)

    # -- install -------------------------------------------------------------------
    def _install(self) -> None:
        self.client.execute_command = self.execute_command
        self.client.pipeline = self.pipeline
        self.sub.start()
        self._house.start()

    def wait_synced(self, timeout: Optional[float] = None) -> bool:
        """Wait until the first snapshot was loaded."""
        return self.sub.synced.wait(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._active = False
        # Unwrap the client (its class methods show through again).
        for name, ours in (("execute_command", self.execute_command), ("pipeline", self.pipeline)):
            if self.client.__dict__.get(name) == ours:
                del self.client.__dict__[name]
        self._stop.set()
        self.sub.close()
        self._house.join(timeout=5)
        with self._lock:
            self._entries.clear()
            self._seen.clear()

    # -- which events apply ----------------------------------------------------------
    def _resolve(self) -> None:
        kw = self.client.connection_pool.connection_kwargs
        s = set(self.extra_servers)
        host, port = kw.get("host"), kw.get("port")
        if host is not None and port is not None and "path" not in kw:
            try:
                for ai in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP):
                    s.add(_norm_addr(_join(ai[4][0], port)))
            except OSError as err:
                self.log.warning("resolve cache server %s; using the configured servers only: %s", host, err)
        self._servers = frozenset(s)

    def matches(self, e: Event) -> bool:
        if e.proto != "redis" or e.ns != self.ns or e.prefix:
            return False
        if self.any_server or e.server == "":
            return True
        return _norm_addr(e.server) in self._servers

    # -- subscriber callbacks (subscriber thread) --------------------------------------------
    def on_event(self, e: Event) -> None:
        if not self.matches(e):
            return
        if e.type in (TYPE_HOT, TYPE_COLD):
            # Ask the hot set rather than trust this one message: another
            # node may still report the key hot after this node's cold.
            until, hot, cacheable = self.sub.hot_until("redis", self.ns, e.key, self.matches)
            if e.type == TYPE_HOT:
                self._last_hot = time.monotonic()
            self._set_hot(e.key, until, hot, cacheable)
        elif e.type == TYPE_INVALIDATE:
            self._invalidate(e.key, "event")

    def on_snapshot(self, snap) -> None:
        hot: Dict[bytes, float] = {}
        for e in self.sub.hot_set():
            if self.matches(e):
                until, ok, cacheable = self.sub.hot_until("redis", self.ns, e.key, self.matches)
                if ok and cacheable:
                    hot[e.key] = until
        now = time.monotonic()
        with self._lock:
            if hot:
                self._last_hot = now
            self._hot = hot
            for k in list(self._entries):
                if k in hot:
                    self._entries[k].hot_until = hot[k]
                else:
                    self._drop_locked(k, "not_hot")
            # An invalidate may have been among the messages a gap or a
            # reconnect lost: drop the values, keep the hot set.
            for en in self._entries.values():
                en.gen += 1
                en.val = None
            self.invalidations["snapshot"] += 1
        self._update_mode(now)

    def _set_hot(self, key: bytes, until: float, hot: bool, cacheable: bool) -> None:
        with self._lock:
            if hot and cacheable:
                self._hot[key] = until
                en = self._entries.get(key)
                if en is not None:
                    en.hot_until = until
            else:
                self._hot.pop(key, None)
                self._seen.pop(key, None)
                if key in self._entries:
                    self._drop_locked(key, "not_hot")
                    self.invalidations["cold"] += 1
        self._update_mode(time.monotonic())

    def _update_mode(self, now: float) -> None:
        if self._closed:
            return
        with self._lock:
            forever = any(u == 0.0 for u in self._hot.values())
            on = bool(self._hot) and (forever or now - self._last_hot < self.linger)
            was, self._active = self._active, on
            if was and not on:
                self.log.info("hot-running mode ended")
                self.evictions["mode_end"] += len(self._entries)
                for en in self._entries.values():
                    en.gen += 1
                self._entries.clear()
                self._seen.clear()

    def _housekeep(self) -> None:
        last_resolve = time.monotonic()
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                for k, u in list(self._hot.items()):
                    if u and now >= u:
                        del self._hot[k]
                        self._seen.pop(k, None)
                        if k in self._entries:
                            self._drop_locked(k, "not_hot")
                for k, en in list(self._entries.items()):
                    v = en.val
                    if v is not None and now - v.expires > IDLE_AFTER:
                        self._drop_locked(k, "idle")
            self._update_mode(now)
            if now - last_resolve > 30.0:
                last_resolve = now
                self._resolve()

    # -- the cache -----------------------------------------------------------------
    def _key(self, k: Any) -> bytes:
        return self._encoder.encode(k) if not isinstance(k, bytes) else k

    def _acquire(self, key: bytes, kind: int, now: float):
        with self._lock:
            en = self._entries.get(key)
            if en is None:
                return self._admit_locked(key, kind, now)
            if en.kind != kind or en.uncacheable:
                self.m["misses"] += 1
                return ACT_PASS, None, None
            if en.hot_until and now >= en.hot_until:
                self._drop_locked(key, "not_hot")
                self.m["misses"] += 1
                return ACT_PASS, None, None
            v = en.val
            if v is not None and now < v.expires:
                self.m["hits"] += 1
                en.hits += 1
                return ACT_HIT, v, None
            # Expired or invalidated: exactly one caller refreshes; a refresh
            # hanging past stale_grace gives its token to the next caller.
            if en.refreshing == 0.0 or now - en.refreshing > self.stale_grace:
                en.refreshing = now
                self.m["misses"] += 1
                self.m["refreshes"] += 1
                return ACT_FETCH, None, _Ticket(en, en.gen, now)
            if v is not None and now < v.expires + self.stale_grace:
                self.m["stale_hits"] += 1
                en.hits += 1
                return ACT_HIT, v, None
            self.m["misses"] += 1
            return ACT_PASS, None, None

    def _admit_locked(self, key: bytes, kind: int, now: float):
        until = self._hot.get(key)
        if until is None or (until and now >= until):
            return ACT_PASS, None, None
        self.m["misses"] += 1
        if key not in self._seen:
            if len(self._seen) >= max(4 * self.max_entries, 1024):
                # A doorkeeper, not a history: start over when full.
                self._seen.clear()
            self._seen[key] = None
            return ACT_PASS, None, None
        del self._seen[key]
        if len(self._entries) >= self.max_entries:
            self._evict_one_locked(now)
        en = _Entry(key, kind, until, now)
        en.refreshing = now
        self._entries[key] = en
        self.m["admissions"] += 1
        self.m["refreshes"] += 1
        return ACT_FETCH, None, _Ticket(en, en.gen, now)

    def _evict_one_locked(self, now: float) -> None:
        victim = None
        keys = list(self._entries)
        for k in random.sample(keys, min(8, len(keys))):
            en = self._entries[k]
            if victim is None:
                victim = k
            v = en.val
            if v is None or now > v.expires + self.stale_grace:
                victim = k
                break
        if victim is not None:
            self._entries.pop(victim).gen += 1
            self.evictions["capacity"] += 1

    def _store(self, t: _Ticket, v: Optional[_Value]) -> None:
        en = t.e
        with self._lock:
            if v is not None and en.gen == t.gen:
                # Expiry counts from when the read was sent: what bounds
                # staleness is the age of the read at the server.
                v.expires = t.token + self.local_ttl
                en.val = v
            if en.refreshing == t.token:
                en.refreshing = 0.0

    def _release(self, t: Optional[_Ticket]) -> None:
        if t is None:
            return
        with self._lock:
            if t.e.refreshing == t.token:
                t.e.refreshing = 0.0

    def _invalidate(self, key: bytes, reason: str) -> None:
        with self._lock:
            en = self._entries.get(key)
            if en is not None:
                en.gen += 1
                en.val = None
                self.invalidations[reason] += 1

    def _invalidate_all(self, reason: str) -> None:
        with self._lock:
            for en in self._entries.values():
                en.gen += 1
                en.val = None
            self.invalidations[reason] += 1

    def _drop_locked(self, key: bytes, reason: str) -> None:
        en = self._entries.pop(key, None)
        if en is not None:
            en.gen += 1
            en.val = None
            self.evictions[reason] += 1

    def _invalidate_written(self, keys: List, all_: bool) -> None:
        if all_:
            self._invalidate_all("flush")
            return
        for k in keys:
            self._invalidate(self._key(k), "write")

    # -- the absorbed-demand report ------------------------------------------------------
    def _report_msg(self, t: _Ticket, now: float) -> Optional[Tuple[bytes, int]]:
        """The ECHO payload to pipeline after this refresh read, if any."""
        if not self.report_absorbed:
            return None
        with self._lock:
            hits = t.e.hits
            if hits <= 0:
                return None
            window = max(1, int((now - t.e.report_at) * 1000))
        return b"hotsniff:absorbed:1 %d %d " % (hits, window) + t.e.key, hits

    def _read_with_report(self, t: _Ticket, args: Tuple, options: Dict) -> Any:
        """The refresh read, with the absorbed report pipelined right after
        it on the same connection when there is something to report."""
        now = time.monotonic()
        rep = self._report_msg(t, now)
        if rep is None:
            return self._orig_execute(*args, **options)
        msg, hits = rep
        p = self._orig_pipeline(transaction=False)
        p.execute_command(*args, **options)
        p.execute_command("ECHO", msg)
        res = p.execute(raise_on_error=False)
        if isinstance(res[1], Exception):
            if self.report_absorbed:
                self.report_absorbed = False
                self.log.warning("absorbed-demand report refused by the server; not reporting again: %s", res[1])
        else:
            with self._lock:
                t.e.hits -= hits
                t.e.report_at = now
                self.m["absorbed_reports"] += 1
        if isinstance(res[0], Exception):
            raise res[0]
        return res[0]

    # -- the client's command path -------------------------------------------------------
    def execute_command(self, *args: Any, **options: Any) -> Any:
        if not self._active or not args:
            return self._orig_execute(*args, **options)
        # redis-py 5 passes keys=[...] with typed reads (for its own
        # client-side cache); any other option (NEVER_DECODE, ...) changes
        # the reply, so such a read is not served.
        if options and (len(options) > 1 or "keys" not in options):
            return self._write(args, options)
        name = args[0]
        n = len(args)
        if isinstance(name, str):
            u = name.upper()
            if u == "GET" and n == 2:
                return self._get(args, options)
            if u == "MGET" and n >= 2:
                return self._mget(args, options)
            if u == "HGET" and n == 3:
                return self._hget(args, options)
            if u == "HMGET" and n >= 3:
                return self._hmget(args, options)
            if u == "HGETALL" and n == 2:
                return self._hgetall(args, options)
        return self._write(args, options)

    def _write(self, args: Tuple, options: Dict) -> Any:
        if not self._active:
            return self._orig_execute(*args, **options)
        keys, all_ = written_keys(args)
        if not keys and not all_:
            return self._orig_execute(*args, **options)
        # Before and after: a refresh sent in between by another thread may
        # have read the old value; the second drop keeps it from landing.
        self._invalidate_written(keys, all_)
        try:
            return self._orig_execute(*args, **options)
        finally:
            self._invalidate_written(keys, all_)

    def _get(self, args: Tuple, options: Dict) -> Any:
        key = self._key(args[1])
        act, v, t = self._acquire(key, KIND_STRING, time.monotonic())
        if act == ACT_HIT:
            return v.data
        if act == ACT_PASS:
            return self._orig_execute(*args, **options)
        try:
            r = self._read_with_report(t, args, options)
        except BaseException:
            self.m["fetch_errors"] += 1
            self._release(t)
            raise
        # Missing keys are cached too: a hot missing key is the stampede
        # this exists to stop.
        self._store(t, _Value(r))
        return r

    def _mget(self, args: Tuple, options: Dict) -> Any:
        now = time.monotonic()
        keys = [self._key(a) for a in args[1:]]
        plan = [self._acquire(k, KIND_STRING, now) for k in keys]
        hits = sum(1 for p in plan if p[0] == ACT_HIT)
        fetch = [i for i, p in enumerate(plan) if p[0] == ACT_FETCH]
        if hits == 0:
            try:
                vals = self._mget_read(args, [plan[i][2] for i in fetch], options)
            except BaseException:
                for i in fetch:
                    self.m["fetch_errors"] += 1
                    self._release(plan[i][2])
                raise
            for i in fetch:
                self._store(plan[i][2], _Value(vals[i]) if len(vals) == len(keys) else None)
            return vals
        out: List[Any] = [None] * len(keys)
        idx = [i for i, p in enumerate(plan) if p[0] != ACT_HIT]
        for i, p in enumerate(plan):
            if p[0] == ACT_HIT:
                out[i] = p[1].data
        if idx:
            try:
                sent = [args[i + 1] for i in idx]
                rv = self._mget_read((args[0], *sent), [plan[i][2] for i in fetch],
                                     {"keys": sent} if options else {})
                if len(rv) != len(idx):
                    raise redis.RedisError("mget: reply length does not match the keys sent")
            except BaseException:
                for i in fetch:
                    self.m["fetch_errors"] += 1
                    self._release(plan[i][2])
                raise
            for j, i in enumerate(idx):
                out[i] = rv[j]
                if plan[i][0] == ACT_FETCH:
                    self._store(plan[i][2], _Value(rv[j]))
        return out

    def _mget_read(self, args: Tuple, tickets: List[_Ticket], options: Dict) -> Any:
        """The MGET to Redis. When it names one key and refreshes it, the
        absorbed report follows it: the daemon pairs a report only with a
        read naming exactly that one key, so a longer MGET carries none (its
        keys keep counting until a refresh that can carry one)."""
        if len(args) == 2 and len(tickets) == 1:
            return self._read_with_report(tickets[0], args, options)
        return self._orig_execute(*args, **options)

    def _hash_for(self, key_arg: Any, options: Dict) -> Optional[_Value]:
        key = self._key(key_arg)
        act, v, t = self._acquire(key, KIND_HASH, time.monotonic())
        if act == ACT_HIT:
            return v
        if act == ACT_PASS:
            return None
        try:
            m = self._read_with_report(t, ("HGETALL", key_arg), {"keys": [key_arg]} if options else {})
        except redis.RedisError:
            # WRONGTYPE and the like: the caller's own command gets the
            # server's answer.
            self.m["fetch_errors"] += 1
            self._release(t)
            return None
        except BaseException:
            self._release(t)
            raise
        if len(m) > self.max_hash_fields:
            with self._lock:
                t.e.uncacheable = True
            self._release(t)
            return None
        v = _Value(m, {self._key(f): x for f, x in m.items()})
        self._store(t, v)
        return v

    def _hget(self, args: Tuple, options: Dict) -> Any:
        v = self._hash_for(args[1], options)
        if v is None:
            return self._orig_execute(*args, **options)
        return v.hidx.get(self._key(args[2]))

    def _hmget(self, args: Tuple, options: Dict) -> Any:
        v = self._hash_for(args[1], options)
        if v is None:
            return self._orig_execute(*args, **options)
        return [v.hidx.get(self._key(f)) for f in args[2:]]

    def _hgetall(self, args: Tuple, options: Dict) -> Any:
        v = self._hash_for(args[1], options)
        if v is None:
            return self._orig_execute(*args, **options)
        return dict(v.data)  # a copy: the cached dict is shared

    # -- pipelines and transactions ---------------------------------------------------------
    def pipeline(self, transaction: bool = True, shard_hint: Any = None):
        """The client's pipeline, never served locally (answering part of a
        transaction locally would break its atomicity); its writes drop the
        keys they name."""
        p = self._orig_pipeline(transaction, shard_hint)
        base = type(p)
        cls = self._pipe_classes.get(base)
        if cls is None:
            cls = type("Shim" + base.__name__, (base,), {
                "execute": _pipe_execute, "immediate_execute_command": _pipe_immediate})
            self._pipe_classes[base] = cls
        p.__class__ = cls
        p._hotsniff_shim = self
        return p

    # -- introspection ---------------------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        with self._lock:
            d = dict(self.m)
            d.update(entries=len(self._entries), hot_keys=len(self._hot), hot_mode=self._active,
                     invalidations=dict(self.invalidations), evictions=dict(self.evictions))
        d.update({"channel_" + k: v for k, v in self.sub.stats.items()})
        return d

    def is_hot(self, key: Any) -> bool:
        with self._lock:
            u = self._hot.get(self._key(key))
        return u is not None and (u == 0.0 or time.monotonic() < u)

    def describe(self):
        return []

    def collect(self):
        """prometheus_client collector: ``REGISTRY.register(shim)``."""
        from .metrics import collect
        return collect(self)


def _pipe_execute(self, raise_on_error: bool = True):
    shim: Shim = self._hotsniff_shim
    keys: List = []
    all_ = False
    for args, _ in self.command_stack:
        k, a = written_keys(args)
        keys.extend(k)
        all_ = all_ or a
    if not keys and not all_:
        return super(type(self), self).execute(raise_on_error)
    shim._invalidate_written(keys, all_)
    try:
        return super(type(self), self).execute(raise_on_error)
    finally:
        shim._invalidate_written(keys, all_)


def _pipe_immediate(self, *args, **options):
    shim: Shim = self._hotsniff_shim
    keys, all_ = written_keys(args)
    if not keys and not all_:
        return super(type(self), self).immediate_execute_command(*args, **options)
    shim._invalidate_written(keys, all_)
    try:
        return super(type(self), self).immediate_execute_command(*args, **options)
    finally:
        shim._invalidate_written(keys, all_)


def _join(host: str, port: Any) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _norm_addr(a: str) -> str:
    """ip:port written one way (IPv4-mapped IPv6 as IPv4)."""
    host, sep, port = a.rpartition(":")
    if not sep:
        return a
    host = host.strip("[]")
    if host.lower().startswith("::ffff:") and "." in host:
        host = host[7:]
    return _join(host, port)


def install(client: "redis.Redis", **opts: Any) -> Shim:
    """Follow the hot-key channel and serve hot keys of ``client`` locally.

    ``channel_client`` is the Redis the daemon publishes to (default: the
    cache client itself). See :class:`Shim` for the options."""
    s = Shim(client, **opts)
    s._install()
    return s
