"""The adapter for ``redis.asyncio.Redis`` (pooled or
``single_connection_client=True``): wraps the client object's
``execute_command`` (a coroutine function, as redis-py's own) and
``pipeline``.

The same cache and the same rules as the sync client (sync.py): a hot read
is answered from memory while the connection it would go through is on the
cache's DB; exactly one caller refreshes an expired value, the others keep
the current one; the refresh read and its absorbed report are one write on
a connection checked to be on that DB. Values are what the awaited command
returns, never a coroutine. A plain pipeline (transaction=False, no
WATCH, no MULTI, no scripts, no SELECT or other session command) that
writes nothing has its hot reads answered from memory while no connection
of the pool is on another DB, the rest sent as one pipeline; transactions
are sent whole; writes drop their keys. The channel is followed by the
same subscriber thread as for the sync client, on a sync ``redis.Redis``
(``channel_client``, or one built from this client's host, port, DB and
credentials).
"""

from __future__ import annotations

import inspect
import time
from typing import Any, Dict, List, Optional, Tuple

import redis
from redis.exceptions import ResponseError

from .cache import ACT_FETCH, ACT_HIT, ACT_PASS, KIND_HASH, KIND_STRING, Ticket, Value
from .dbtrack import get_connection_args
from .sync import _NET_ERRORS, AdapterBase, NotHere, SyncAdapter, read_kind, session_cmd
from .writes import written_keys


class AsyncAdapter(AdapterBase):
    is_async = True

    # -- namespaces ----------------------------------------------------------------
    def here(self) -> bool:
        if getattr(self.client, "single_connection_client", False):
            single = self.client.connection
            # Not yet connected: it will come from the pool, on its DB.
            return self.tracker.ok() if single is None else self.tracker.conn_ok(single)
        return self.tracker.ok()


    # -- the client's command path -------------------------------------------------------
    async def execute_command(self, *args: Any, **options: Any) -> Any:
        c = self.cache
        if not c.active or not args:
            return await self.orig_execute(*args, **options)
        if options and (len(options) > 1 or "keys" not in options):
            return await self.write(args, options)
        u = read_kind(args)
        if u is None:
            return await self.write(args, options)
        if not self.here():
            c.m["namespace_passes"] += 1
            return await self.orig_execute(*args, **options)
        if u == "GET":
            return await self.get(args, options)
        if u == "MGET":
            return await self.mget(args, options)
        v = await self.hash_for(args[1], options)
        if v is None:
            return await self.orig_execute(*args, **options)
        if u == "HGET":
            return v.hidx.get(self.key(args[2]))
        if u == "HMGET":
            return [v.hidx.get(self.key(f)) for f in args[2:]]
        return dict(v.data)

    async def write(self, args: Tuple, options: Dict) -> Any:
        keys, all_ = written_keys(args)
        if not keys and not all_:
            return await self.orig_execute(*args, **options)
        self.invalidate_written(keys, all_)
        try:
            return await self.orig_execute(*args, **options)
        finally:
            self.invalidate_written(keys, all_)

    # -- refresh reads ---------------------------------------------------------------
    async def direct(self, key: bytes, cmds: List[Tuple], options: Dict) -> List[Any]:
        """cmds sent in one write on a connection on the cache's DB (key:
        what they read, for an adapter that routes by key); the replies in
        order, an error reply in place as its exception."""
        cl = self.client
        if getattr(cl, "single_connection_client", False):
            await cl.initialize()
        single = getattr(cl, "connection", None)
        pool = cl.connection_pool
        if single is not None:
            conn, rel = single, False
        else:
            conn, rel = await pool.get_connection(*get_connection_args(pool, cmds[0][0])), True
        lock = None if rel else getattr(cl, "_single_conn_lock", None)
        if lock is not None:
            await lock.acquire()
        try:
            if not self.tracker.conn_ok(conn):
                raise NotHere()
            try:
                await conn.send_packed_command(conn.pack_commands(cmds))
                out: List[Any] = []
                for i, cmd in enumerate(cmds):
                    try:
                        out.append(await cl.parse_response(conn, cmd[0], **(options if i == 0 else {})))
                    except ResponseError as err:
                        out.append(err)
                return out
            except BaseException:
                await conn.disconnect()
                raise
        finally:
            if lock is not None:
                lock.release()
            if rel:
                await pool.release(conn)

    async def read(self, t: Ticket, args: Tuple, options: Dict, report: bool = True) -> Any:
        now = time.monotonic()
        rep = self.cache.report_msg(t, now) if (report and self.report_absorbed) else None
        cmds = [args] if rep is None else [args, ("ECHO", rep[0])]
        try:
            res = await self.direct(t.e.key, cmds, options)
        except NotHere:
            raise
        except _NET_ERRORS:
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

    async def fetch(self, t: Ticket, args: Tuple, options: Dict, report: bool = True) -> Tuple[bool, Any]:
        try:
            return True, await self.read(t, args, options, report)
        except NotHere:
            self.cache.fetch_failed(t)
            return False, await self.orig_execute(*args, **options)
        except BaseException:
            self.cache.fetch_failed(t)
            raise

    # -- served reads --------------------------------------------------------------------
    async def get(self, args: Tuple, options: Dict) -> Any:
        c = self.cache
        act, v, t = await c.acquire_wait_async(self.key(args[1]), KIND_STRING, time.monotonic())
        if act == ACT_HIT:
            return v.data
        if act == ACT_PASS:
            return await self.orig_execute(*args, **options)
        ok, r = await self.fetch(t, args, options)
        if ok:
            c.store_value(t, r)
        return r

    async def mget(self, args: Tuple, options: Dict) -> Any:
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
            ok, rv = await self.mget_read((args[0], *sent), [plan[i][2] for i in fetch], opts)
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
                if not ok or rv[j] is None:
                    c.release(t)
                else:
                    c.store_value(t, rv[j])
        return out

    async def mget_read(self, args: Tuple, tickets: List[Ticket], options: Dict) -> Tuple[bool, Any]:
        """As the sync adapter's: (stored-able, reply) of the MGET; the
        absorbed report follows it only when it names and refreshes one key."""
        if not tickets:
            return True, await self.orig_execute(*args, **options)
        try:
            return True, await self.read(tickets[0], args, options, report=len(args) == 2 and len(tickets) == 1)
        except NotHere:
            return False, await self.orig_execute(*args, **options)

    async def hash_for(self, key_arg: Any, options: Dict) -> Optional[Value]:
        c = self.cache
        act, v, t = await c.acquire_wait_async(self.key(key_arg), KIND_HASH, time.monotonic())
        if act == ACT_HIT:
            return v
        if act == ACT_PASS:
            return None
        if not t.e.sized:
            try:
                res = await self.direct(t.e.key, [("HLEN", key_arg)], {})
                if isinstance(res[0], Exception):
                    raise res[0]
                n = res[0]
            except (NotHere, redis.RedisError) + _NET_ERRORS:
                c.fetch_failed(t)
                return None
            t.e.sized = True
            if n > c.max_hash_fields:
                c.too_big_verdict(t, "uncacheable")
                return None
        try:
            m = await self.read(t, ("HGETALL", key_arg), {"keys": [key_arg]} if options else {})
        except (NotHere, redis.RedisError):
            c.fetch_failed(t)
            return None
        except BaseException:
            c.release(t)
            raise
        return self.store_hash(t, m)

    # -- pipelines and transactions ---------------------------------------------------------
    def pipeline(self, transaction: bool = True, shard_hint: Any = None):
        """As the sync adapter's: a plain pipeline that writes nothing has
        its hot reads answered from memory, a transaction never; writes
        drop the keys they name and are sent whole."""
        p = self.orig_pipeline(transaction, shard_hint)
        base = type(p)
        cls = self.pipe_classes.get(base)
        if cls is None:
            cls = type("Shim" + base.__name__, (base,), {
                "execute": _apipe_execute, "immediate_execute_command": _apipe_immediate})
            self.pipe_classes[base] = cls
        p.__class__ = cls
        p._hotsniff_shim = self
        return p

    # One command of a plain pipeline: the same plan as the sync client's.
    plan_pipe = SyncAdapter.plan_pipe

    async def serve_pipeline(self, pipe: Any, raise_on_error: bool) -> List[Any]:
        """Hot reads answered from memory, the rest sent as one pipeline in
        their order; results in command order as redis-py returns them."""
        stack = list(pipe.command_stack)
        now = time.monotonic()
        plan = [self.plan_pipe(args, options, now) for args, options in stack]
        remote = [i for i, (local, _) in enumerate(plan) if not local]
        out: List[Any] = [None] * len(stack)
        for i, (local, r) in enumerate(plan):
            if local:
                out[i] = r
        if len(remote) == len(stack):
            return await self.send_pipe(pipe, stack, plan, raise_on_error)
        if not remote:
            # Nothing left to send: nothing is sent.
            res = pipe.reset()
            if inspect.isawaitable(res):
                await res
        else:
            res = await self.send_pipe(pipe, [stack[i] for i in remote], [plan[i] for i in remote], False)
            for j, i in enumerate(remote):
                out[i] = res[j]
        if raise_on_error:
            for i, r in enumerate(out):
                if isinstance(r, ResponseError):
                    pipe.annotate_exception(r, i + 1, stack[i][0])
                    raise r
        return out

    async def send_pipe(self, pipe: Any, cmds: List, plan: List, raise_on_error: bool) -> List[Any]:
        """Send cmds as the pipeline and store the replies of the GETs that
        hold refresh tickets, unless a pooled connection moved to another
        DB meanwhile."""
        pipe.command_stack = cmds
        try:
            res = await super(type(pipe), pipe).execute(False)
        except BaseException:
            for _, t in plan:
                self.cache.fetch_failed(t)
            raise
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


async def _apipe_execute(self, raise_on_error: bool = True):
    a: AsyncAdapter = self._hotsniff_shim
    keys: List = []
    all_ = False
    for args, _ in self.command_stack:
        k, al = written_keys(args)
        keys.extend(k)
        all_ = all_ or al
    if not keys and not all_:
        # redis.asyncio's Pipeline names it is_transaction.
        tx = getattr(self, "is_transaction", getattr(self, "transaction", True))
        if (a.cache.active and self.command_stack and not tx
                and not any(session_cmd(args) for args, _ in self.command_stack)
                and not self.explicit_transaction and not self.watching and not self.scripts
                and a.pipe_here()):
            return await a.serve_pipeline(self, raise_on_error)
        return await super(type(self), self).execute(raise_on_error)
    a.invalidate_written(keys, all_)
    try:
        return await super(type(self), self).execute(raise_on_error)
    finally:
        a.invalidate_written(keys, all_)


async def _apipe_immediate(self, *args, **options):
    a: AsyncAdapter = self._hotsniff_shim
    keys, all_ = written_keys(args)
    if not keys and not all_:
        return await super(type(self), self).immediate_execute_command(*args, **options)
    a.invalidate_written(keys, all_)
    try:
        return await super(type(self), self).immediate_execute_command(*args, **options)
    finally:
        a.invalidate_written(keys, all_)
