"""The adapter for ``redis.cluster.RedisCluster`` (sync), and what it
shares with the asyncio cluster adapter (asyncio_cluster.py): ClusterBase.

A cluster has DB 0 only, and each key lives on the master that holds its
slot. An event applies when its ``server`` is a node of the cluster (as
the client knows them now, re-read every second; ``servers=`` adds
addresses, an empty ``server`` applies everywhere), as in the Go and Node
shims: the daemon reports a key at the node its reads reach, and a key
stays hot (and cached) while its slot moves. A local hit never reaches
redis-py's slot routing; a refresh read and its absorbed report go as one
write to the node holding the key's slot, and when that node answers with
a redirection (the slot just moved) the read is passed to the cluster
client, which follows ``MOVED``/``ASK`` and updates its slot map. Every
cached value remembers the node it was read on: once the client's slot
map names another node for the key's slot (or that node answered a
redirection), the value is dropped, so the next read fetches it once from
the key's new master and later reads are served again. Cluster pipelines
are sent whole (their writes drop their keys).
"""

from __future__ import annotations

import contextvars
import socket
import threading
import time
from typing import Any, Dict, FrozenSet, List, Tuple

from redis.exceptions import (AskError, ClusterDownError, MovedError, RedisClusterException,
                              TryAgainError)

from .cache import Cache
from .dbtrack import get_connection_args
from .events import Event
from .sync import NotHere, SyncAdapter
from .writes import written_keys

_REDIRECTS = (MovedError, AskError, TryAgainError, ClusterDownError)


def join_addr(host: str, port: Any) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def norm_addr(a: str) -> str:
    """ip:port written one way (IPv4-mapped IPv6 as IPv4)."""
    host, sep, port = a.rpartition(":")
    if not sep:
        return a
    host = host.strip("[]")
    if host.lower().startswith("::ffff:") and "." in host:
        host = host[7:]
    return join_addr(host, port)


class Resolver:
    """host:port -> the ip:port forms events may name, cached 30 s."""

    def __init__(self, log: Any) -> None:
        self.log = log
        self.lock = threading.Lock()
        self.cache: Dict[Tuple[str, int], Tuple[float, FrozenSet[str]]] = {}

    def addrs(self, host: str, port: int) -> FrozenSet[str]:
        k = (host, port)
        now = time.monotonic()
        with self.lock:
            hit = self.cache.get(k)
        if hit is not None and now - hit[0] < 30.0:
            return hit[1]
        out = {norm_addr(join_addr(host, port))}
        try:
            for ai in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP):
                out.add(norm_addr(join_addr(ai[4][0], port)))
        except OSError as err:
            self.log.warning("resolve cache server %s: %s", host, err)
        fs = frozenset(out)
        with self.lock:
            if len(self.cache) > 4096:
                self.cache.clear()
            self.cache[k] = (now, fs)
        return fs


#: The node the current refresh read went to (its key's slot and the node's
#: name), set where the read picks its node and picked up by read() for the
#: value it stores. A context variable: per thread for the sync client, per
#: task on an event loop.
_ORIGIN: contextvars.ContextVar = contextvars.ContextVar("hotsniff_origin", default=None)


class ClusterBase:
    """What the sync and asyncio cluster adapters share, mixed in before
    their standalone adapter: which events apply (the nodes of the
    cluster), where a cached value was read, redirections, one DB, and
    pipelines sent whole."""

    def __init__(self, shim: Any, client: Any, cache: Cache, report_absorbed: bool,
                 extra_servers: FrozenSet[str], any_server: bool) -> None:
        super().__init__(shim, client, cache, report_absorbed)  # type: ignore[call-arg]
        self.extra = extra_servers
        self.any_server = any_server
        self.resolver = Resolver(cache.log)
        self.last_rebuild = 0.0
        self._servers: FrozenSet[str] = frozenset()
        cache.origin_ok = self.origin_ok

    def _encoder(self) -> Any:
        return self.client.get_encoder()

    def install(self) -> None:
        self._servers = self.nodes()
        self.client.execute_command = self.execute_command
        self.client.pipeline = self.pipeline

    def uninstall(self) -> None:
        for name, ours in (("execute_command", self.execute_command), ("pipeline", self.pipeline)):
            if self.client.__dict__.get(name) == ours:
                del self.client.__dict__[name]

    # -- which events apply ---------------------------------------------------------------
    def known_nodes(self) -> List[Any]:
        return list(self.client.nodes_manager.nodes_cache.values())

    def nodes(self) -> FrozenSet[str]:
        """The addresses of every node of the cluster the client knows."""
        out: set = set()
        try:
            known = self.known_nodes()
        except Exception:  # noqa: BLE001 - a node map being rebuilt: keep the last one
            return self._servers
        for n in known:
            out |= self.resolver.addrs(n.host, int(n.port))
        return frozenset(out)

    def matches(self, e: Event) -> bool:
        if e.proto != "redis" or e.ns != "0" or e.prefix:
            return False
        if self.any_server or e.server == "":
            return True
        s = norm_addr(e.server)
        return s in self.extra or s in self._servers

    def housekeep(self, now: float) -> None:
        # Nodes come and go: events already received for a node that joined
        # apply from now on, those of a node that left no longer do.
        if now - self.last_rebuild >= 1.0:
            self.last_rebuild = now
            servers = self.nodes()
            if servers != self._servers:
                self._servers = servers
                if not self.cache.held and self.cache.sub is not None:
                    self.cache.rebuild(touch=False)

    # -- where a value was read ------------------------------------------------------------
    def origin_ok(self, origin: Tuple[int, str]) -> bool:
        """The node a value was read on still holds its key's slot in the
        client's slot map (on every hit: one dict lookup)."""
        try:
            nodes = self.client.nodes_manager.slots_cache.get(origin[0])
        except Exception:  # noqa: BLE001 - a slot map being rebuilt
            return False
        return bool(nodes) and nodes[0].name == origin[1]

    def node_for(self, key: bytes) -> Any:
        """The master holding key's slot in the client's slot map, noted as
        the origin of what is read there; NotHere when none is known."""
        try:
            node = self.client.get_node_from_key(key)
        except RedisClusterException:
            raise NotHere()
        if node is None:
            raise NotHere()
        _ORIGIN.set((self.client.keyslot(key), node.name))
        return node

    def redirected(self, key: bytes, res: List[Any]) -> List[Any]:
        """res, the replies of a refresh read on the node the slot map
        names; NotHere when that node answered a redirection (the slot
        moved, or is moving): the cluster client follows it."""
        if isinstance(res[0], _REDIRECTS):
            if isinstance(res[0], (MovedError, AskError)):
                # The key is not (or no longer only) on the node its value
                # was read on: that copy is not served again.
                self.cache.invalidate(key, "moved")
            raise NotHere()
        return res

    # -- namespaces: a cluster has one DB ---------------------------------------------------
    def here(self) -> bool:
        return True

    def pipe_here(self) -> bool:
        return False

    # -- pipelines: sent whole, writes drop their keys ---------------------------------------
    def pipeline(self, transaction: Any = None, shard_hint: Any = None):
        """The cluster's pipeline, with every queued write noted (and its
        keys dropped) as it is queued and again after execute(). Wrapping
        the pipeline object's own execute_command and execute keeps this
        independent of how each redis-py version stores the queue."""
        p = self.orig_pipeline(transaction, shard_hint)
        a = self
        written: List[Tuple[List, bool]] = []
        queue = p.execute_command
        run = p.execute

        def execute_command(*args: Any, **kwargs: Any) -> Any:
            keys, all_ = written_keys(args)
            if keys or all_:
                a.invalidate_written(keys, all_)
                written.append((keys, all_))
            return queue(*args, **kwargs)

        def taken() -> List[Tuple[List, bool]]:
            w = list(written)
            written.clear()
            return w

        def drop(w: List[Tuple[List, bool]]) -> None:
            for keys, all_ in w:
                a.invalidate_written(keys, all_)

        if self.is_async:
            async def execute(*args: Any, **kwargs: Any) -> Any:
                w = taken()
                try:
                    return await run(*args, **kwargs)
                finally:
                    drop(w)
        else:
            def execute(*args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
                w = taken()
                try:
                    return run(*args, **kwargs)
                finally:
                    drop(w)

        p.execute_command = execute_command
        p.execute = execute
        return p


class ClusterAdapter(ClusterBase, SyncAdapter):
    """``redis.cluster.RedisCluster``."""

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if "target_nodes" in options:
            return self.write(args, options)
        return super().execute_command(*args, **options)

    # -- refresh reads on the node holding the key -----------------------------------------
    def connection_for(self, key: bytes, command: str) -> Tuple[Any, Any, bool]:
        node = self.node_for(key)
        r = self.client.get_redis_connection(node)
        return r, r.connection_pool.get_connection(*get_connection_args(r.connection_pool, command)), True

    def direct(self, key: bytes, cmds: List[Tuple], options: Dict) -> List[Any]:
        return self.redirected(key, super().direct(key, cmds, options))

    def read(self, t: Any, args: Tuple, options: Dict, report: bool = True) -> Any:
        _ORIGIN.set(None)
        res = super().read(t, args, options, report)
        t.origin = _ORIGIN.get()
        return res

    def mget_read(self, args: Tuple, tickets: List[Any], options: Dict) -> Tuple[bool, Any]:
        # An MGET's keys share one slot (or Redis refuses it): every value
        # it refreshes was read on the node its first key's read went to.
        _ORIGIN.set(None)
        ok, rv = super().mget_read(args, tickets, options)
        for t in tickets:
            t.origin = _ORIGIN.get()
        return ok, rv
