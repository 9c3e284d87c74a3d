"""The adapter for ``redis.cluster.RedisCluster`` (sync).

A cluster has DB 0 only, and each key lives on the master that holds its
slot. An event applies to a key when its ``server`` is that master (as the
client's slot map names it now; ``servers=`` adds addresses, an empty
``server`` applies everywhere); the hot map is recomputed every second, so
a slot that moved takes its keys' verdict from the new master. A local hit
never reaches redis-py's slot routing; a refresh read and its absorbed
report go as one write to the node holding the key's slot, and when that
node answers with a redirection (the slot just moved) the read is passed
to the cluster client, which follows ``MOVED``/``ASK`` and updates its
slot map. Cluster pipelines are sent whole (their writes drop their keys).
"""

from __future__ import annotations

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


class ClusterAdapter(SyncAdapter):
    def __init__(self, shim: Any, client: Any, cache: Cache, report_absorbed: bool,
                 extra_servers: FrozenSet[str], any_server: bool) -> None:
        super().__init__(shim, client, cache, report_absorbed)
        self.extra = extra_servers
        self.any_server = any_server
        self.resolver = Resolver(cache.log)
        self.last_rebuild = 0.0

    def _encoder(self) -> Any:
        return self.client.get_encoder()

    def install(self) -> None:
        self.client.execute_command = self.execute_command
        self.client.pipeline = self.pipeline

    def uninstall(self) -> None:
        for name, ours in (("execute_command", self.execute_command), ("pipeline", self.pipeline)):
            if self.client.__dict__.get(name) == ours:
                del self.client.__dict__[name]

    # -- which events apply ---------------------------------------------------------------
    def holder(self, key: bytes) -> FrozenSet[str]:
        """The addresses of the master holding key's slot now."""
        try:
            nodes = self.client.nodes_manager.slots_cache.get(self.client.keyslot(key))
        except Exception:  # noqa: BLE001 - a slot map being rebuilt
            return frozenset()
        if not nodes:
            return frozenset()
        n = nodes[0]
        return self.resolver.addrs(n.host, int(n.port))

    def matches(self, e: Event) -> bool:
        if e.proto != "redis" or e.ns != "0" or e.prefix:
            return False
        if self.any_server or e.server == "":
            return True
        s = norm_addr(e.server)
        return s in self.extra or s in self.holder(e.key)

    def housekeep(self, now: float) -> None:
        # Slots move: the verdict follows the key to its new master.
        if now - self.last_rebuild >= 1.0 and not self.cache.held and self.cache.sub is not None:
            self.last_rebuild = now
            self.cache.rebuild(touch=False)

    # -- namespaces: a cluster has one DB ---------------------------------------------------
    def here(self) -> bool:
        return True

    def pipe_here(self) -> bool:
        return False

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if "target_nodes" in options:
            return self.write(args, options)
        return super().execute_command(*args, **options)

    # -- refresh reads on the node holding the key -----------------------------------------
    def connection_for(self, key: bytes, command: str) -> Tuple[Any, Any, bool]:
        try:
            node = self.client.get_node_from_key(key)
        except RedisClusterException:
            raise NotHere()
        if node is None:
            raise NotHere()
        r = self.client.get_redis_connection(node)
        return r, r.connection_pool.get_connection(*get_connection_args(r.connection_pool, command)), True

    def direct(self, key: bytes, cmds: List[Tuple], options: Dict) -> List[Any]:
        res = super().direct(key, cmds, options)
        if isinstance(res[0], _REDIRECTS):
            # The slot moved (or is moving): the cluster client follows it.
            raise NotHere()
        return res

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

        def execute(raise_on_error: bool = True) -> Any:
            w = list(written)
            written.clear()
            try:
                return run(raise_on_error)
            finally:
                for keys, all_ in w:
                    a.invalidate_written(keys, all_)

        p.execute_command = execute_command
        p.execute = execute
        return p
