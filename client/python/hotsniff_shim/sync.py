"""The adapter for redis-py's synchronous ``redis.Redis`` (pooled or
``single_connection_client=True``): wraps the client object's
``execute_command`` and ``pipeline``.

Reads of hot keys are answered from the cache (cache.py) while the
connection the read would go through is on the cache's DB (dbtrack.py);
refresh reads and their absorbed-demand reports are sent by hand, in one
write, on a connection checked to be on that DB: the client's own
connection when it has one, else one taken from its pool. Hot reads inside
a plain pipeline with no writes are answered from memory and the rest sent
as one pipeline; transactions are never served.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Dict, List, Optional, Tuple

import redis
from redis.exceptions import ResponseError

from .cache import (ACT_FETCH, ACT_HIT, ACT_PASS, KIND_HASH, KIND_STRING, Cache, Ticket, Value,
                    _size)
from .dbtrack import DBTracker, get_connection_args
from .writes import written_keys

#: Commands that change the connection (DB, transaction, auth): a pipeline
#: holding one is sent whole.
_SESSION = frozenset(("SELECT", "MULTI", "EXEC", "DISCARD", "WATCH", "UNWATCH", "RESET",
                      "AUTH", "HELLO", "CLIENT", "SWAPDB", "QUIT"))

_NET_ERRORS = (redis.ConnectionError, redis.TimeoutError, OSError, socket.timeout)


class NotHere(Exception):
    """The refresh read cannot go through a connection on the cache's DB
    (or to the node holding the key): the read is passed through."""


def session_cmd(args: Tuple) -> bool:
    name = args[0]
    if isinstance(name, bytes):
        name = name.decode("latin-1")
    return isinstance(name, str) and name.split(" ", 1)[0].upper() in _SESSION


def read_kind(args: Tuple) -> Optional[str]:
    """The served read args is (GET, MGET, HGET, HMGET, HGETALL), or None."""
    name = args[0]
    if not isinstance(name, str):
        return None
    u = name.upper()
    n = len(args)
    if (u == "GET" and n == 2) or (u == "HGET" and n == 3) or (u == "HGETALL" and n == 2) \
            or (u in ("MGET",) and n >= 2) or (u == "HMGET" and n >= 3):
        return u
    return None


class AdapterBase:
    """What the sync and asyncio adapters share: the client's original
    methods, the DB tracker of its pool, key encoding."""

    is_async = False  # the pool's connections are redis.asyncio ones

    def __init__(self, shim: Any, client: Any, cache: Cache, report_absorbed: bool) -> None:
        self.shim = shim
        self.client = client
        self.cache = cache
        self.log = cache.log
        self.report_absorbed = report_absorbed
        self.encoder = self._encoder()
        self.orig_execute = client.execute_command
        self.orig_pipeline = client.pipeline
        self.pipe_classes: Dict[type, type] = {}
        self.tracker: Optional[DBTracker] = None

    # -- setup ---------------------------------------------------------------------
    def _encoder(self) -> Any:
        return self.client.connection_pool.get_encoder()

    def install(self) -> None:
        pool = self.client.connection_pool
        self.tracker = DBTracker(pool, int(pool.connection_kwargs.get("db", 0) or 0), is_async=self.is_async)
        self.tracker.watch(getattr(self.client, "connection", None))
        self.client.execute_command = self.execute_command
        self.client.pipeline = self.pipeline

    def uninstall(self) -> None:
        for name, ours in (("execute_command", self.execute_command), ("pipeline", self.pipeline)):
            if self.client.__dict__.get(name) == ours:
                del self.client.__dict__[name]
        if self.tracker is not None:
            self.tracker.close()

    def key(self, k: Any) -> bytes:
        return k if isinstance(k, bytes) else self.encoder.encode(k)

    def invalidate_written(self, keys: List, all_: bool) -> None:
        if all_:
            self.cache.invalidate_all("flush")
            return
        for k in keys:
            self.cache.invalidate(self.key(k), "write")

    def store_hash(self, t: Ticket, m: Any) -> Optional[Value]:
        """A hash read whole (HGETALL) stored, unless too big to cache; the
        value to serve, or None."""
        c = self.cache
        if not isinstance(m, dict):
            c.fetch_failed(t)
            return None
        if len(m) > c.max_hash_fields:
            c.too_big_verdict(t, "uncacheable")
            return None
        n = _size(m)
        if n > c.max_value_bytes:
            c.too_big_verdict(t, "too_large_values")
            return None
        v = Value(m, {self.key(f): x for f, x in m.items()}, size=n)
        c.store(t, v)
        return v

    def housekeep(self, now: float) -> None:
        pass

    def pipe_here(self) -> bool:
        """Pipelines take a connection from the pool (also on a
        single-connection client)."""
        return self.tracker.ok()


class SyncAdapter(AdapterBase):
    """Serves one sync client from one Cache."""

    # -- namespaces ----------------------------------------------------------------
    def here(self) -> bool:
        """The connection a read would go through is on the cache's DB."""
        single = self.client.connection
        if single is not None:
            return self.tracker.conn_ok(single)
        return not self.tracker.foreign or self.tracker.ok()


    # -- the client's command path -------------------------------------------------------
    def execute_command(self, *args: Any, **options: Any) -> Any:
        c = self.cache
        if not c.active or not args:
            return self.orig_execute(*args, **options)
        # redis-py 5 passes keys=[...] with typed reads (for its own
        # client-side cache); any other option (NEVER_DECODE, ...) changes
        # the reply, so such a read is not served.
        if options and (len(options) > 1 or "keys" not in options):
            return self.write(args, options)
        name = args[0]
        if type(name) is not str:
            return self.write(args, options)
        u = name.upper()
        n = len(args)
        if u == "GET" and n == 2:
            if self.here():
                return self.get(args, options)
        elif u == "HGET" and n == 3:
            if self.here():
                v = self.hash_for(args[1], options)
                return self.orig_execute(*args, **options) if v is None else v.hidx.get(self.key(args[2]))
        elif u == "MGET" and n >= 2:
            if self.here():
                return self.mget(args, options)
        elif u == "HMGET" and n >= 3:
            if self.here():
                v = self.hash_for(args[1], options)
                if v is None:
                    return self.orig_execute(*args, **options)
                return [v.hidx.get(self.key(f)) for f in args[2:]]
        elif u == "HGETALL" and n == 2:
            if self.here():
                v = self.hash_for(args[1], options)
                return self.orig_execute(*args, **options) if v is None else dict(v.data)
        else:
            return self.write(args, options)
        c.m["namespace_passes"] += 1
        return self.orig_execute(*args, **options)

    def write(self, args: Tuple, options: Dict) -> Any:
        keys, all_ = written_keys(args)
        if not keys and not all_:
            return self.orig_execute(*args, **options)
        # Before and after: a refresh sent in between by another thread may
        # have read the old value; the second drop keeps it from landing.
        self.invalidate_written(keys, all_)
        try:
            return self.orig_execute(*args, **options)
        finally:
            self.invalidate_written(keys, all_)

    # -- refresh reads ---------------------------------------------------------------
    def connection_for(self, key: bytes, command: str) -> Tuple[Any, Any, bool]:
        """(client to parse with, connection, release it after) for a
        refresh read of key; NotHere when none is on the cache's DB."""
        single = getattr(self.client, "connection", None)
        if single is not None:
            if not self.tracker.conn_ok(single):
                raise NotHere()
            return self.client, single, False
        pool = self.client.connection_pool
        conn = pool.get_connection(*get_connection_args(pool, command))
        if not self.tracker.conn_ok(conn):
            pool.release(conn)
            raise NotHere()
        return self.client, conn, True

    def release_connection(self, owner: Any, conn: Any) -> None:
        owner.connection_pool.release(conn)

    def direct(self, key: bytes, cmds: List[Tuple], options: Dict) -> List[Any]:
        """cmds sent in one write on a connection for key; the replies in
        order, an error reply in place as its exception."""
        owner, conn, rel = self.connection_for(key, cmds[0][0])
        lock = None if rel else getattr(owner, "single_connection_lock", None)
        if lock is not None:
            lock.acquire()
        try:
            conn.send_packed_command(conn.pack_commands(cmds))
            out: List[Any] = []
            for i, cmd in enumerate(cmds):
                try:
                    out.append(owner.parse_response(conn, cmd[0], **(options if i == 0 else {})))
                except ResponseError as err:
                    out.append(err)
            return out
        except BaseException:
            conn.disconnect()
            raise
        finally:
            if lock is not None:
                lock.release()
            if rel:
                self.release_connection(owner, conn)

    def read(self, t: Ticket, args: Tuple, options: Dict, report: bool = True) -> Any:
        """The refresh read, with the absorbed report right after it on the
        same connection when there is something to report. NotHere: the
        read was passed through (its reply is returned, raised as
        PassedThrough so the caller does not store it)."""
        now = time.monotonic()
        rep = self.cache.report_msg(t, now) if (report and self.report_absorbed) else None
        cmds = [args] if rep is None else [args, ("ECHO", rep[0])]
        try:
            res = self.direct(t.e.key, cmds, options)
        except NotHere:
            raise
        except _NET_ERRORS:
            # The client's own path retries as configured; its reply is
            # served but not stored.
            raise NotHere()
        if rep is not None:
            if isinstance(res[1], Exception):
                if self.report_absorbed:
                    self.report_absorbed = False
                    self.log.warning("absorbed-demand report refused by the server; not reporting again: %s", res[1])
            else:
                self.cache.reported(t, rep[1], now)
        if isinstance(res[0], Exception):
            raise res[0]
        return res[0]

    def fetch(self, t: Ticket, args: Tuple, options: Dict, report: bool = True) -> Tuple[bool, Any]:
        """(stored-able, reply): the refresh read, or the read passed
        through when it cannot be made on a connection on the cache's DB."""
        try:
            return True, self.read(t, args, options, report)
        except NotHere:
            self.cache.fetch_failed(t)
            return False, self.orig_execute(*args, **options)
        except BaseException:
            self.cache.fetch_failed(t)
            raise

    # -- served reads --------------------------------------------------------------------
    def get(self, args: Tuple, options: Dict) -> Any:
        c = self.cache
        act, v, t = c.acquire_wait(self.key(args[1]), KIND_STRING, time.monotonic())
        if act == ACT_HIT:
            return v.data
        if act == ACT_PASS:
            return self.orig_execute(*args, **options)
        ok, r = self.fetch(t, args, options)
        if ok:
            # Missing keys are cached too: a hot missing key is the
            # stampede this exists to stop.
            c.store_value(t, r)
        return r

    def mget(self, args: Tuple, options: Dict) -> Any:
        c = self.cache
        now = time.monotonic()
        keys = [self.key(a) for a in args[1:]]
        plan = [c.acquire(k, KIND_STRING, now) for k in keys]
        fetch = [i for i, p in enumerate(plan) if p[0] == ACT_FETCH]
        idx = [i for i, p in enumerate(plan) if p[0] != ACT_HIT]
        out: List[Any] = [None] * len(keys)
        for i, p in enumerate(plan):
            if p[0] == ACT_HIT:
                out[i] = p[1].data
        if not idx:
            return out
        sent = [args[i + 1] for i in idx]
        opts = options if len(idx) == len(keys) else ({"keys": sent} if options else {})
        try:
            ok, rv = self.mget_read((args[0], *sent), [plan[i][2] for i in fetch], opts)
            if len(rv) != len(idx):
                raise redis.RedisError("mget: reply length does not match the keys sent")
        except BaseException:
            for i in fetch:
                c.fetch_failed(plan[i][2])
            raise
        for j, i in enumerate(idx):
            out[i] = rv[j]
            if plan[i][0] == ACT_FETCH:
                t = plan[i][2]
                # An MGET element that is nil is not cached: MGET also
                # answers nil for a key of another type.
                if not ok or rv[j] is None:
                    c.release(t)
                else:
                    c.store_value(t, rv[j])
        return out

    def mget_read(self, args: Tuple, tickets: List[Ticket], options: Dict) -> Tuple[bool, Any]:
        """The MGET to Redis. When it names one key and refreshes it, the
        absorbed report follows it: the daemon pairs a report only with a
        read naming exactly that one key. A refresh inside a longer MGET
        goes through a connection on the cache's DB too."""
        if not tickets:
            return True, self.orig_execute(*args, **options)
        try:
            return True, self.read(tickets[0], args, options, report=len(args) == 2 and len(tickets) == 1)
        except NotHere:
            return False, self.orig_execute(*args, **options)

    def hlen(self, t: Ticket, key_arg: Any) -> int:
        try:
            res = self.direct(t.e.key, [("HLEN", key_arg)], {})
        except (NotHere,) + _NET_ERRORS:
            raise NotHere()
        if isinstance(res[0], Exception):
            raise res[0]
        return res[0]

    def hash_for(self, key_arg: Any, options: Dict) -> Optional[Value]:
        c = self.cache
        act, v, t = c.acquire_wait(self.key(key_arg), KIND_HASH, time.monotonic())
        if act == ACT_HIT:
            return v
        if act == ACT_PASS:
            return None
        if not t.e.sized:
            # Sized before the first fetch: a hash too big to cache is
            # never read whole, and the verdict outlives the entry.
            try:
                n = self.hlen(t, key_arg)
            except (NotHere, redis.RedisError):
                c.fetch_failed(t)
                return None
            t.e.sized = True
            if n > c.max_hash_fields:
                c.too_big_verdict(t, "uncacheable")
                return None
        try:
            m = self.read(t, ("HGETALL", key_arg), {"keys": [key_arg]} if options else {})
        except (NotHere, redis.RedisError):
            # WRONGTYPE and the like: the caller's own command gets the
            # server's answer.
            c.fetch_failed(t)
            return None
        except BaseException:
            c.release(t)
            raise
        return self.store_hash(t, m)

    # -- pipelines and transactions ---------------------------------------------------------
    def pipeline(self, transaction: bool = True, shard_hint: Any = None):
        """The client's pipeline. A plain one (transaction=False, no WATCH,
        no MULTI, no scripts) that writes nothing has its hot reads answered
        from memory; a transaction never (answering part of it locally would
        break its atomicity). Writes drop the keys they name, and a pipeline
        that writes is sent whole, so its reads see its writes."""
        p = self.orig_pipeline(transaction, shard_hint)
        base = type(p)
        cls = self.pipe_classes.get(base)
        if cls is None:
            cls = type("Shim" + base.__name__, (base,), {
                "execute": _pipe_execute, "immediate_execute_command": _pipe_immediate})
            self.pipe_classes[base] = cls
        p.__class__ = cls
        p._hotsniff_shim = self
        return p

    def plan_pipe(self, args: Tuple, options: Dict, now: float):
        """One command of a plain pipeline: (True, reply) when answered from
        memory, (False, ticket or None) when it is sent."""
        if options and (len(options) > 1 or "keys" not in options):
            return False, None
        u = read_kind(args)
        if u is None:
            return False, None
        c = self.cache
        if u == "GET":
            act, v, t = c.acquire(self.key(args[1]), KIND_STRING, now)
            if act == ACT_HIT:
                return True, v.data
            return False, t  # a GET may refresh its key: its reply is stored
        if u == "MGET":
            # Served only when every key has a fresh value; otherwise sent
            # whole and nothing is counted.
            vals = c.fresh_all([self.key(a) for a in args[1:]], now)
            return (True, vals) if vals is not None else (False, None)
        v = c.peek(self.key(args[1]), KIND_HASH, now)
        if v is None:
            return False, None
        if u == "HGET":
            return True, v.hidx.get(self.key(args[2]))
        if u == "HMGET":
            return True, [v.hidx.get(self.key(f)) for f in args[2:]]
        return True, dict(v.data)

    def serve_pipeline(self, pipe: Any, raise_on_error: bool) -> List[Any]:
        """A plain pipeline with no writes: hot reads are answered from
        memory, the rest is sent as one pipeline in their order, and the
        results come back in command order as redis-py returns them (the
        first error raised when raise_on_error, annotated with its number
        in the whole pipeline)."""
        stack = list(pipe.command_stack)
        now = time.monotonic()
        plan = [self.plan_pipe(args, options, now) for args, options in stack]
        remote = [i for i, (local, _) in enumerate(plan) if not local]
        out: List[Any] = [None] * len(stack)
        for i, (local, r) in enumerate(plan):
            if local:
                out[i] = r
        if len(remote) == len(stack):
            return self.send_pipe(pipe, stack, plan, raise_on_error)
        if not remote:
            # Nothing left to send: nothing is sent.
            pipe.reset()
        else:
            res = self.send_pipe(pipe, [stack[i] for i in remote], [plan[i] for i in remote], False)
            for j, i in enumerate(remote):
                out[i] = res[j]
        if raise_on_error:
            for i, r in enumerate(out):
                if isinstance(r, ResponseError):
                    pipe.annotate_exception(r, i + 1, stack[i][0])
                    raise r
        return out

    def send_pipe(self, pipe: Any, cmds: List, plan: List, raise_on_error: bool) -> List[Any]:
        """Send cmds as the pipeline and store the replies of the GETs that
        hold refresh tokens (the pipeline's connection is the pool's, on the
        cache's DB: checked before the plan was made)."""
        pipe.command_stack = cmds
        try:
            res = super(type(pipe), pipe).execute(False)
        except BaseException:
            for _, t in plan:
                self.cache.fetch_failed(t)
            raise
        # A pooled connection that moved to another DB while this pipeline
        # took its connection: nothing it read is stored.
        here = self.pipe_here()
        for (_, t), r in zip(plan, res):
            if t is None:
                continue
            if isinstance(r, Exception) or not here:
                self.cache.fetch_failed(t)
            else:
                self.cache.store_value(t, r)
        if raise_on_error:
            for i, r in enumerate(res):
                if isinstance(r, ResponseError):
                    pipe.annotate_exception(r, i + 1, cmds[i][0])
                    raise r
        return res


def _pipe_execute(self, raise_on_error: bool = True):
    a: SyncAdapter = self._hotsniff_shim
    keys: List = []
    all_ = False
    for args, _ in self.command_stack:
        k, al = written_keys(args)
        keys.extend(k)
        all_ = all_ or al
    if not keys and not all_:
        if (a.cache.active and self.command_stack and not self.transaction
                and not any(session_cmd(args) for args, _ in self.command_stack)
                and not self.explicit_transaction and not self.watching and not self.scripts
                and a.pipe_here()):
            return a.serve_pipeline(self, raise_on_error)
        return super(type(self), self).execute(raise_on_error)
    a.invalidate_written(keys, all_)
    try:
        return super(type(self), self).execute(raise_on_error)
    finally:
        a.invalidate_written(keys, all_)


def _pipe_immediate(self, *args, **options):
    a: SyncAdapter = self._hotsniff_shim
    keys, all_ = written_keys(args)
    if not keys and not all_:
        return super(type(self), self).immediate_execute_command(*args, **options)
    a.invalidate_written(keys, all_)
    try:
        return super(type(self), self).immediate_execute_command(*args, **options)
    finally:
        a.invalidate_written(keys, all_)
