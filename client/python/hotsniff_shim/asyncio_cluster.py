"""The adapter for ``redis.asyncio.cluster.RedisCluster``.

The asyncio client's command path (asyncio_adapter.py: the awaited
command's reply is served, one caller refreshes, a lone read waits for the
refresh in flight) with the cluster's rules (cluster.py): an event applies
when its ``server`` is a node of the cluster; a refresh read and its
absorbed report go as one write to the master the client's slot map names
for the key, and a redirection there (the slot moved) drops the key's
value and passes the read to the cluster client, which follows it; a
cached value is served only while the slot map still names the node it was
read on. Its pipelines (and, in redis-py versions that have them, its
transactions) are sent whole: their writes drop their keys. The channel is followed on a thread
by a sync client: ``channel_client``, or a ``redis.cluster.RedisCluster``
built from this client's nodes and credentials.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from redis.exceptions import ResponseError

from .asyncio_adapter import AsyncAdapter
from .cluster import _ORIGIN, ClusterBase
from .shim import twin_options


class AsyncClusterAdapter(ClusterBase, AsyncAdapter):
    _boot: List[Any] = []

    def known_nodes(self) -> List[Any]:
        nm = self.client.nodes_manager
        if nm.nodes_cache:
            return list(nm.nodes_cache.values())
        # The client finds the cluster's nodes on its first command (on its
        # event loop): until then a sync client to the nodes it was given
        # finds them, once, so that events from every node apply at once.
        if not self._boot:
            # Short timeouts: this runs on install and, until it succeeds,
            # on the housekeeping thread.
            twin = sync_cluster_twin(self.client, socket_connect_timeout=1.0, socket_timeout=1.0)
            try:
                self._boot = twin.get_nodes()
            finally:
                twin.close()
        return self._boot + list(nm.startup_nodes.values())

    # -- refresh reads on the node holding the key -----------------------------------------
    async def direct(self, key: bytes, cmds: List[Tuple], options: Dict) -> List[Any]:
        cl = self.client
        if cl._initialize:
            await cl.initialize()
        node = self.node_for(key)
        conn = node.acquire_connection()
        try:
            await conn.send_packed_command(conn.pack_commands(cmds), False)
            out: List[Any] = []
            for i, cmd in enumerate(cmds):
                try:
                    out.append(await node.parse_response(conn, cmd[0], **(options if i == 0 else {})))
                except ResponseError as err:
                    out.append(err)
        except BaseException:
            # A reply half read (a cancelled read, a broken connection) must
            # not be taken for the next command's.
            await conn.disconnect()
            raise
        finally:
            # Back to the node's free list, as ClusterNode.execute_command
            # does (release() in later redis-py); a disconnected connection
            # reconnects on its next use.
            release = getattr(node, "release", None)
            if release is not None:
                release(conn)
            else:
                node._free.append(conn)
        return self.redirected(key, out)

    async def read(self, t: Any, args: Tuple, options: Dict, report: bool = True) -> Any:
        _ORIGIN.set(None)
        res = await super().read(t, args, options, report)
        t.origin = _ORIGIN.get()
        return res

    async def mget_read(self, args: Tuple, tickets: List[Any], options: Dict) -> Tuple[bool, Any]:
        # One slot per MGET (or Redis refuses it): its values were read on
        # the node its first key's read went to.
        _ORIGIN.set(None)
        ok, rv = await super().mget_read(args, tickets, options)
        for t in tickets:
            t.origin = _ORIGIN.get()
        return ok, rv


def sync_cluster_twin(client: Any, **override: Any) -> Any:
    """A sync redis.cluster.RedisCluster to the nodes of an asyncio cluster
    client, with its credentials and TLS settings (and override's options),
    for the channel subscriber's thread."""
    from redis.cluster import ClusterNode, RedisCluster
    nodes, base = twin_cluster_options(client)
    base.update(override)
    return RedisCluster(startup_nodes=[ClusterNode(n.host, n.port) for n in nodes], **base)


def twin_cluster_options(client: Any) -> Tuple[List[Any], Dict[str, Any]]:
    """The nodes an asyncio cluster client knows and the options of a sync
    cluster client that reaches them as its connections do (their class
    and kwargs are the nodes'; redis-py versions whose asyncio cluster has
    TLS give its nodes SSLConnection)."""
    nm = client.nodes_manager
    nodes = list(nm.nodes_cache.values()) or list(nm.startup_nodes.values())
    if not nodes:
        raise ValueError("hotsniff_shim.install: this asyncio cluster client names no node; pass "
                         "channel_client=redis.Redis(host=..., port=...) (a sync client)")
    kw = dict(client.get_connection_kwargs())
    n = nodes[0]
    kw.update(getattr(n, "connection_kwargs", None) or {})
    cls = getattr(getattr(n, "connection_class", None), "__name__", "")
    return nodes, twin_options(kw, cls, ("username", "password", "socket_timeout", "socket_connect_timeout",
                                         "client_name"))
