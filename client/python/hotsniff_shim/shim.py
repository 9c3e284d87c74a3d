"""install(): picks the adapter for the client given, wires the cache to the
channel subscriber, and runs the housekeeping thread.

Supported clients: ``redis.Redis`` (pooled, or ``single_connection_client=
True``; a DB from the URL or ``db=``), ``redis.asyncio.Redis``,
``redis.cluster.RedisCluster`` and ``redis.asyncio.cluster.RedisCluster``.
Anything else is refused at install with one message naming these.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from typing import Any, Dict, Iterable, Optional, Union

import redis

from .cache import Cache
from .cluster import ClusterAdapter, join_addr, norm_addr
from .events import Event
from .subscriber import DEFAULT_CHANNEL, Subscriber

log = logging.getLogger("hotsniff_shim")

SUPPORTED = ("a redis.Redis (pooled or single_connection_client=True), "
             "a redis.asyncio.Redis, a redis.cluster.RedisCluster "
             "or a redis.asyncio.cluster.RedisCluster")

#: The modes whose client is a cluster (one DB, keys on the master of their
#: slot, events from any node).
CLUSTER_MODES = frozenset(("cluster", "asyncio-cluster"))


class UnsupportedClient(TypeError):
    """install() was given a client the shim cannot serve correctly."""


def client_mode(client: Any) -> str:
    """"sync", "asyncio", "cluster" or "asyncio-cluster"; UnsupportedClient
    otherwise."""
    from redis.cluster import RedisCluster
    if isinstance(client, RedisCluster):
        return "cluster"
    try:
        from redis.asyncio.cluster import RedisCluster as AsyncCluster
    except ImportError:  # redis-py without asyncio cluster support
        AsyncCluster = None
    if AsyncCluster is not None and isinstance(client, AsyncCluster):
        return "asyncio-cluster"
    try:
        from redis.asyncio import Redis as AsyncRedis
    except ImportError:
        AsyncRedis = None
    if AsyncRedis is not None and isinstance(client, AsyncRedis):
        return "asyncio"
    if isinstance(client, redis.Redis):
        return "sync"
    raise UnsupportedClient(f"hotsniff_shim.install: unsupported client {type(client).__module__}."
                            f"{type(client).__name__}; the shim serves " + SUPPORTED)


def twin_options(kw: Dict[str, Any], connection_class: str, keys: Iterable[str]) -> Dict[str, Any]:
    """The options of a sync client that reaches what an asyncio client's
    connections (kwargs kw, of class connection_class) reach: the
    credentials and timeouts among keys, and TLS with its settings for an
    SSLConnection."""
    base = {k: kw[k] for k in keys if kw.get(k) is not None}
    if connection_class == "SSLConnection":
        base["ssl"] = True
        for k in ("ssl_keyfile", "ssl_certfile", "ssl_cert_reqs", "ssl_ca_certs", "ssl_check_hostname"):
            if k in kw:
                base[k] = kw[k]
    return base


def _sync_twin(client: Any) -> "redis.Redis":
    """A sync redis.Redis to the server of an asyncio client, for the
    channel subscriber's thread."""
    pool = client.connection_pool
    kw = dict(pool.connection_kwargs)
    name = pool.connection_class.__name__
    base = twin_options(kw, name, ("username", "password", "db", "socket_timeout",
                                   "socket_connect_timeout", "client_name"))
    if name == "SSLConnection":
        return redis.Redis(host=kw.get("host", "localhost"), port=kw.get("port", 6379), **base)
    if name == "UnixDomainSocketConnection" and kw.get("path"):
        return redis.Redis(unix_socket_path=kw["path"], **base)
    if name == "Connection" and kw.get("host"):
        return redis.Redis(host=kw["host"], port=kw.get("port", 6379), **base)
    raise ValueError("hotsniff_shim.install: cannot derive a channel connection from this asyncio client's "
                     f"{name}; pass channel_client=redis.Redis(host=..., port=...) (a sync client)")


class Shim:
    """Install with :func:`install`. ``close()`` stops it (the client keeps
    working, everything passes through)."""

    def __init__(self, client: Any, channel_client: Optional["redis.Redis"] = None,
                 channel: str = DEFAULT_CHANNEL, servers: Iterable[str] = (),
                 any_server: bool = False, local_ttl: float = 0.05, stale_grace: float = 0.1,
                 max_entries: int = 10000, max_bytes: int = 64 << 20,
                 max_value_bytes: int = 1 << 20, max_hash_fields: int = 1000,
                 hot_mode_linger: float = 120.0, report_absorbed: bool = True,
                 channel_secret: Union[bytes, str, None] = None,
                 logger: Optional[logging.Logger] = None, **subscriber_opts: Any) -> None:
        self.client = client
        self.mode = client_mode(client)
        self.log = logger or log
        self.any_server = any_server
        self.extra_servers = frozenset(norm_addr(a) for a in servers)
        self._servers: frozenset = frozenset()
        self.clustered = self.mode in CLUSTER_MODES
        if self.clustered:
            self.ns = "0"
        else:
            self.ns = str(client.connection_pool.connection_kwargs.get("db", 0) or 0)
        self.cache = Cache(self.ns, self.matches, local_ttl=local_ttl, stale_grace=stale_grace,
                           max_entries=max_entries, max_bytes=max_bytes, max_value_bytes=max_value_bytes,
                           max_hash_fields=max_hash_fields, hot_mode_linger=hot_mode_linger,
                           logger=self.log)
        if self.mode == "cluster":
            self.adapter: Any = ClusterAdapter(self, client, self.cache, report_absorbed,
                                               self.extra_servers, any_server)
        elif self.mode == "asyncio-cluster":
            from .asyncio_cluster import AsyncClusterAdapter
            self.adapter = AsyncClusterAdapter(self, client, self.cache, report_absorbed,
                                               self.extra_servers, any_server)
        elif self.mode == "asyncio":
            from .asyncio_adapter import AsyncAdapter
            self.adapter = AsyncAdapter(self, client, self.cache, report_absorbed)
        else:
            from .sync import SyncAdapter
            self.adapter = SyncAdapter(self, client, self.cache, report_absorbed)
        if not self.clustered:
            self._resolve()
        if channel_client is None:
            if self.mode == "asyncio":
                channel_client = _sync_twin(client)
            elif self.mode == "asyncio-cluster":
                from .asyncio_cluster import sync_cluster_twin
                channel_client = sync_cluster_twin(client)
            else:
                channel_client = client
        elif not isinstance(channel_client, redis.Redis) and client_mode(channel_client) != "cluster":
            raise UnsupportedClient("hotsniff_shim.install: channel_client must be a sync redis.Redis "
                                    "(the channel is followed on a thread)")
        self.sub = Subscriber(channel_client, channel=channel, handler=self.cache, logger=self.log,
                              secret=channel_secret, **subscriber_opts)
        self.cache.sub = self.sub
        self._closed = False
        self._stop = threading.Event()
        self._house = threading.Thread(target=self._housekeep, name="hotsniff-housekeep", daemon=True)

    # -- install -------------------------------------------------------------------
    def _install(self) -> None:
        other = getattr(self.client, "_hotsniff_shim_installed", None)
        if other is not None and not other._closed:
            raise ValueError("hotsniff_shim.install: this client already has a shim installed; close() it first")
        self.client._hotsniff_shim_installed = self
        self.adapter.install()
        self.sub.start()
        self._house.start()

    def wait_synced(self, timeout: Optional[float] = None) -> bool:
        """Wait until the first snapshot was loaded."""
        return self.sub.synced.wait(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.cache.closed = True
        self.cache.active = False
        self.adapter.uninstall()
        if getattr(self.client, "_hotsniff_shim_installed", None) is self:
            self.client._hotsniff_shim_installed = None
        self._stop.set()
        self.sub.close()
        if self._house.is_alive():
            self._house.join(timeout=5)
        self.cache.close()

    # -- which events apply ----------------------------------------------------------
    def _resolve(self) -> None:
        kw = self.client.connection_pool.connection_kwargs
        s = set(self.extra_servers)
        host, port = kw.get("host"), kw.get("port")
        if host is not None and port is not None and "path" not in kw:
            try:
                for ai in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP):
                    s.add(norm_addr(join_addr(ai[4][0], port)))
            except OSError as err:
                self.log.warning("resolve cache server %s; using the configured servers only: %s", host, err)
        self._servers = frozenset(s)

    def matches(self, e: Event) -> bool:
        if self.clustered:
            return self.adapter.matches(e)
        if e.proto != "redis" or e.ns != self.ns or e.prefix:
            return False
        if self.any_server or e.server == "":
            return True
        return norm_addr(e.server) in self._servers

    def _housekeep(self) -> None:
        last_resolve = time.monotonic()
        while not self._stop.wait(0.25):
            now = time.monotonic()
            try:
                # The subscriber reports a lost connection at once when the
                # client library raises; a stalled one is seen here.
                if self.sub.synced.is_set():
                    alive = self.sub.alive()
                    if alive == self.cache.held:
                        self.cache.on_channel(alive)
                self.cache.housekeep(now)
                self.adapter.housekeep(now)
                if not self.clustered and now - last_resolve > 30.0:
                    last_resolve = now
                    self._resolve()
            except Exception as err:  # noqa: BLE001 - housekeeping must go on
                self.log.error("hotsniff housekeeping: %s", err)

    # -- introspection ---------------------------------------------------------------------
    def stats(self) -> dict:
        d = self.cache.stats()
        d["mode"] = self.mode
        d.update({"channel_" + k: v for k, v in self.sub.stats.items()})
        d["bad_messages"] = dict(self.sub.bad)
        d["absorbed_reporting"] = bool(self.adapter.report_absorbed)
        return d

    def is_hot(self, key: Any) -> bool:
        return self.cache.is_hot(self.adapter.key(key))

    def describe(self):
        return []

    def collect(self):
        """prometheus_client collector: ``REGISTRY.register(shim)``."""
        from .metrics import collect
        return collect(self)


def install(client: Any, **opts: Any) -> Shim:
    """Follow the hot-key channel and serve hot keys of ``client`` locally.

    ``client`` is a redis.Redis (pooled or single-connection), a
    redis.asyncio.Redis, a redis.cluster.RedisCluster or a
    redis.asyncio.cluster.RedisCluster; anything else raises
    :class:`UnsupportedClient`. ``channel_client`` is a sync redis.Redis (or
    redis.cluster.RedisCluster) for the Redis the daemon publishes to
    (default: the cache client itself; for an asyncio client, a sync client
    to the same server; for an asyncio cluster client, a sync
    RedisCluster to its nodes). See :class:`Shim` for the options."""
    s = Shim(client, **opts)
    s._install()
    return s
