"""redis.asyncio.cluster.RedisCluster against the real 3-master cluster:
the guarantees of the sync cluster client (events from the cluster's nodes
only, refresh and report at the key's master, a slot move under a writer
never yields a read older than LocalTTL + StaleGrace nor an error, a value
read on the old master is not served once the client knows the slot
moved) and of the asyncio client (values, never coroutines; readers after
an invalidation wait for the one refresh in flight), pipelines sent whole."""

import asyncio
import threading
import time

import redis
from redis.asyncio.cluster import RedisCluster as AsyncCluster
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

import hotsniff_shim
from conftest import Publisher, calls, paced_writer, unique, until_hot
from test_cluster import _ev

LOCAL_TTL, STALE_GRACE = 0.05, 0.1


def run(coro):
    return asyncio.run(coro)


async def _synced(shim):
    assert await asyncio.get_running_loop().run_in_executor(None, shim.wait_synced, 5)


def test_asyncio_cluster_reads_and_channel_on_cluster(cluster, server):
    """Without channel_client the channel is followed on a sync
    RedisCluster to the client's nodes; reads of every kind are served as
    values at the key's master, writes through the client drop the copy.
    The client is given a node that is not the key's master and has sent
    no command when the key is reported hot there: the shim finds the
    cluster's nodes itself."""
    k = unique("ack")
    h = k + "h"
    holder, _, _ = cluster.node_of(k)
    hholder, _, _ = cluster.node_of(h)
    others = [n.port for n in cluster.nodes if n.port != holder]
    port0 = others[0]
    data = RedisCluster(host="127.0.0.1", port=port0)
    data.set(k, "v")
    data.hset(h, mapping={"f": "1", "g": "2"})
    ch = unique("acch")
    pub = Publisher(data, ch)
    pub.write_snapshot()

    async def main():
        rc = AsyncCluster(host="127.0.0.1", port=port0)
        shim = hotsniff_shim.install(rc, channel=ch, local_ttl=LOCAL_TTL, stale_grace=STALE_GRACE)
        try:
            await _synced(shim)
            assert shim.stats()["mode"] == "asyncio-cluster"
            assert isinstance(shim.sub.rdb, RedisCluster)
            # Hot at a server outside the cluster: not this client's.
            pub.send(k, server="10.255.0.1:6379")
            await asyncio.sleep(0.2)
            assert not shim.is_hot(k)
            pub.send(k, server="127.0.0.1:%d" % holder)
            await until_hot(shim, k)
            hnode = redis.Redis(port=holder)
            before = calls(hnode, "get")
            for _ in range(200):
                assert await rc.get(k) == b"v"
            assert calls(hnode, "get") - before <= 10, "hot reads served locally"
            echo = {p: calls(redis.Redis(port=p), "echo") for p in [holder] + others}
            await asyncio.sleep(0.06)
            await rc.get(k)  # a refresh, carrying the absorbed report, on the holder
            assert calls(hnode, "echo") == echo[holder] + 1
            assert all(calls(redis.Redis(port=p), "echo") == echo[p] for p in others)
            # Events from any node of the cluster apply, from elsewhere not.
            assert shim.matches(_ev(k, holder)) and shim.matches(_ev(k, others[0]))
            assert not shim.matches(_ev(k, 1))
            # MGET of the key, served.
            hits = shim.stats()["hits"]
            for _ in range(3):
                assert await rc.mget([k]) == [b"v"]
            assert shim.stats()["hits"] > hits
            # Hash reads, served from one HGETALL at the hash's master.
            pub.send(h, server="127.0.0.1:%d" % hholder)
            await until_hot(shim, h)
            hn = redis.Redis(port=hholder)
            for _ in range(3):
                assert await rc.hgetall(h) == {b"f": b"1", b"g": b"2"}
            before = calls(hn, "hgetall"), calls(hn, "hget"), calls(hn, "hmget")
            for _ in range(10):
                assert await rc.hget(h, "f") == b"1"
                assert await rc.hmget(h, ["g", "f", "x"]) == [b"2", b"1", None]
                assert await rc.hgetall(h) == {b"f": b"1", b"g": b"2"}
            after = calls(hn, "hgetall"), calls(hn, "hget"), calls(hn, "hmget")
            assert after[1:] == before[1:], "HGET/HMGET served from the cached hash"
            assert after[0] - before[0] <= 3
            # A write through the shimmed client drops the copy at once.
            await rc.set(k, "x")
            assert await rc.get(k) == b"x"
            await rc.hset(h, "f", "9")
            assert await rc.hget(h, "f") == b"9"
            await rc.delete(k)
            assert await rc.get(k) is None
        finally:
            shim.close()
            await rc.close()
    try:
        run(main())
    finally:
        data.close()


def test_asyncio_cluster_slot_move(cluster, server):
    """A slot moves while a writer writes every 10 ms and asyncio readers
    read: no read is older than LocalTTL + StaleGrace after the write that
    replaced it, none fails, and the key is served again at its new
    master, where its reports go."""
    port0 = cluster.nodes[0].port
    writer_rc = RedisCluster(host="127.0.0.1", port=port0)
    k = unique("acm")
    holder, _, slot = cluster.node_of(k)
    others = [n.port for n in cluster.nodes if n.port != holder]
    writer_rc.set(k, "0")
    ch = unique("acmch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()
    writes = {}  # value -> monotonic time its SET returned
    stop = threading.Event()
    errors = []
    reads = []

    def writer():
        paced_writer(writer_rc, k, stop, writes, errors)

    async def reader(rc):
        while not stop.is_set():
            s = time.monotonic()
            try:
                v = await rc.get(k)
            except redis.RedisError as err:
                errors.append(("read", err))
                continue
            reads.append((s, int(v)))
            await asyncio.sleep(0.001)

    async def main():
        loop = asyncio.get_running_loop()
        rc = AsyncCluster(host="127.0.0.1", port=port0)
        shim = hotsniff_shim.install(rc, channel=ch, channel_client=redis.Redis(port=server.port),
                                     local_ttl=LOCAL_TTL, stale_grace=STALE_GRACE)
        wt = threading.Thread(target=writer)
        try:
            await _synced(shim)
            pub.send(k, server="127.0.0.1:%d" % holder)
            await until_hot(shim, k)
            wt.start()
            rs = [asyncio.ensure_future(reader(rc)) for _ in range(2)]
            await asyncio.sleep(0.5)
            dst = others[1]
            await loop.run_in_executor(None, cluster.migrate_slot, slot, holder, dst, k)
            assert cluster.node_of(k)[0] == dst
            # The daemon now sees the key's reads at its new master.
            await asyncio.sleep(0.3)
            pub.send(k, server="127.0.0.1:%d" % dst)
            await until_hot(shim, k)
            hits_after = shim.stats()["hits"]
            await asyncio.sleep(1.5)
            stop.set()
            await asyncio.gather(*rs)
            await loop.run_in_executor(None, wt.join)
            assert not errors, errors[:3]
            assert shim.stats()["hits"] > hits_after, "served again after the move"
            late = 0
            for s, v in reads:
                w = writes.get(v + 1)
                if w is not None and s - w > LOCAL_TTL + STALE_GRACE:
                    late += 1
            assert len(reads) > 500, len(reads)
            print("asyncio cluster slot move: %d reads, %d writes, %d late, stats %s" % (
                len(reads), len(writes), late,
                {x: shim.stats()[x] for x in ("hits", "stale_hits", "misses", "refreshes")}))
            assert late == 0, "%d of %d reads older than LocalTTL+StaleGrace" % (late, len(reads))
            dnode = redis.Redis(port=dst)
            echo = calls(dnode, "echo")
            await asyncio.sleep(0.1)
            for _ in range(20):
                await rc.get(k)
                await asyncio.sleep(0.01)
            assert calls(dnode, "echo") > echo, "reports go to the key's new master"
        finally:
            stop.set()
            if wt.is_alive():
                wt.join()
            shim.close()
            await rc.close()
    try:
        run(main())
    finally:
        writer_rc.close()


def test_asyncio_cluster_value_from_old_master_not_served(cluster, server):
    """A value (string or hash) read on the master that held the key's slot
    is not served once the client's slot map names another master (learnt
    from a MOVED answering another key of the slot): the first read goes
    once to the new master, and later reads are served locally again."""
    port0 = cluster.nodes[0].port
    tag = "{amv%d}" % time.monotonic_ns()
    k, h, other = "k" + tag, "h" + tag, "other" + tag  # one slot
    holder, _, slot = cluster.node_of(k)
    dst = [n.port for n in cluster.nodes if n.port != holder][0]
    data = RedisCluster(host="127.0.0.1", port=port0)
    data.set(k, "old")
    data.hset(h, "f", "old")
    data.close()
    ch = unique("amvch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()

    async def main():
        loop = asyncio.get_running_loop()
        rc = AsyncCluster(host="127.0.0.1", port=port0)
        shim = hotsniff_shim.install(rc, channel=ch, channel_client=redis.Redis(port=server.port),
                                     local_ttl=60)
        try:
            await _synced(shim)
            pub.send(k, server="127.0.0.1:%d" % holder)
            pub.send(h, server="127.0.0.1:%d" % holder)
            await until_hot(shim, k)
            await until_hot(shim, h)
            for _ in range(3):
                assert await rc.get(k) == b"old"
                assert await rc.hget(h, "f") == b"old"
            hits = shim.stats()["hits"]
            assert await rc.get(k) == b"old"
            assert await rc.hget(h, "f") == b"old"
            assert shim.stats()["hits"] == hits + 2
            await loop.run_in_executor(None, cluster.migrate_slot, slot, holder, dst, k)
            dnode = redis.Redis(port=dst)
            dnode.set(k, "new")  # another client, at the new master
            dnode.hset(h, "f", "new")
            await rc.set(other, "x")  # answered MOVED: the client's slot map now names dst
            before = calls(dnode, "get"), calls(dnode, "hgetall")
            assert await rc.get(k) == b"new", "a value read on the old master was served after the move"
            assert await rc.hget(h, "f") == b"new", "a hash read on the old master was served after the move"
            assert (calls(dnode, "get"), calls(dnode, "hgetall")) == (before[0] + 1, before[1] + 1)
            for _ in range(3):
                assert await rc.get(k) == b"new"
                assert await rc.hget(h, "f") == b"new"
            assert (calls(dnode, "get"), calls(dnode, "hgetall")) == (before[0] + 1, before[1] + 1), \
                "served locally again after the move"
            assert shim.stats()["invalidations"]["moved"] >= 2
        finally:
            shim.close()
            await rc.close()
    run(main())


def test_asyncio_cluster_refresh_answered_moved(cluster, server):
    """The key's slot moves without the client knowing: the refresh read
    at the old master is answered MOVED, the copy is dropped (a `moved`
    invalidation), the read is passed to the cluster client, which follows
    the redirection and returns the new master's value."""
    port0 = cluster.nodes[0].port
    k = unique("acr") + "{acr%d}" % time.monotonic_ns()
    holder, _, slot = cluster.node_of(k)
    dst = [n.port for n in cluster.nodes if n.port != holder][0]
    RedisCluster(host="127.0.0.1", port=port0).set(k, "old")
    ch = unique("acrch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()

    async def main():
        loop = asyncio.get_running_loop()
        rc = AsyncCluster(host="127.0.0.1", port=port0)
        shim = hotsniff_shim.install(rc, channel=ch, channel_client=redis.Redis(port=server.port),
                                     local_ttl=0.05, stale_grace=0.1)
        try:
            await _synced(shim)
            pub.send(k, server="127.0.0.1:%d" % holder)
            await until_hot(shim, k)
            for _ in range(3):
                assert await rc.get(k) == b"old"
            await loop.run_in_executor(None, cluster.migrate_slot, slot, holder, dst, k)
            redis.Redis(port=dst).set(k, "new")
            await asyncio.sleep(0.2)  # the value expired: the next read refreshes it
            moved = shim.stats()["invalidations"]["moved"]
            assert await rc.get(k) == b"new"
            assert shim.stats()["invalidations"]["moved"] == moved + 1
            assert rc.get_node_from_key(k).port == dst, "the cluster client followed the redirection"
            for _ in range(5):
                assert await rc.get(k) == b"new"
                await asyncio.sleep(0.01)
        finally:
            shim.close()
            await rc.close()
    run(main())


def test_asyncio_cluster_pipeline_sent_whole(cluster, server):
    """Cluster pipelines are sent whole (a hot key's read in one reaches its
    master), their writes drop the keys they name; a transaction is refused
    by older redis-py (4.3 among them) itself, and sent whole where
    redis-py has them."""
    port0 = cluster.nodes[0].port
    k = unique("acp")
    holder, _, _ = cluster.node_of(k)
    RedisCluster(host="127.0.0.1", port=port0).set(k, "v")
    ch = unique("acpch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()

    async def main():
        rc = AsyncCluster(host="127.0.0.1", port=port0)
        shim = hotsniff_shim.install(rc, channel=ch, channel_client=redis.Redis(port=server.port),
                                     local_ttl=60)
        hnode = redis.Redis(port=holder)
        try:
            await _synced(shim)
            pub.send(k, server="127.0.0.1:%d" % holder)
            await until_hot(shim, k)
            for _ in range(3):
                assert await rc.get(k) == b"v"
            before = calls(hnode, "get")
            assert await rc.get(k) == b"v"
            assert calls(hnode, "get") == before, "served locally"
            async with rc.pipeline() as p:
                p.get(k)
                p.get(k)
                assert await p.execute() == [b"v", b"v"]
            assert calls(hnode, "get") == before + 2, "a cluster pipeline is sent whole"
            async with rc.pipeline() as p:
                p.set(k, "new")
                p.get(k)
                assert await p.execute() == [True, b"new"]
            assert await rc.get(k) == b"new", "a pipelined write drops the copy"
            p = rc.pipeline()
            p.mset_nonatomic({k: "m"})
            await p.execute()
            assert await rc.get(k) == b"m"
            assert shim.stats()["invalidations"]["write"] >= 4
            assert await rc.get(k) == b"m"
            try:
                tx = rc.pipeline(transaction=True)
            except RedisClusterException:
                tx = None  # no cluster transactions in this redis-py
            if tx is not None:
                before = calls(hnode, "get")
                tx.get(k)
                tx.set(k, "t")
                assert await tx.execute() == [b"m", True]
                assert calls(hnode, "get") == before + 1, "a transaction is sent whole"
                assert await rc.get(k) == b"t"
        finally:
            shim.close()
            await rc.close()
    run(main())


def test_asyncio_cluster_invalidated_readers_wait(cluster, server):
    """After an invalidate message, concurrent readers (GETs, then hash
    reads) wait for the one refresh in flight at the key's master rather
    than each going to Redis, and all read the new value."""
    from test_shim_redis import hold_server
    port0 = cluster.nodes[0].port
    tag = "{acw%d}" % time.monotonic_ns()
    k, h = "k" + tag, "h" + tag
    holder, _, _ = cluster.node_of(k)
    data = RedisCluster(host="127.0.0.1", port=port0)
    data.set(k, "v1")
    data.hset(h, "f", "v1")
    ch = unique("acwch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()
    hnode = redis.Redis(port=holder)

    async def main():
        loop = asyncio.get_running_loop()
        rc = AsyncCluster(host="127.0.0.1", port=port0)
        shim = hotsniff_shim.install(rc, channel=ch, channel_client=redis.Redis(port=server.port),
                                     local_ttl=60, stale_grace=5)
        try:
            await _synced(shim)
            for key in (k, h):
                pub.send(key, server="127.0.0.1:%d" % holder)
                await until_hot(shim, key)
            await rc.get(k)
            assert await rc.get(k) == b"v1"
            await rc.hgetall(h)
            assert await rc.hgetall(h) == {b"f": b"v1"}

            async def invalidated(key, n):
                pub.send(key, typ="invalidate", snapshot=False, server="127.0.0.1:%d" % holder)
                deadline = time.monotonic() + 5
                while shim.stats()["invalidations"]["event"] < n:
                    assert time.monotonic() < deadline, "invalidate not applied"
                    await asyncio.sleep(0.005)

            data.set(k, "v2")
            await invalidated(k, 1)
            before = calls(hnode, "get")
            holder_th = await loop.run_in_executor(None, hold_server, holder)
            vals = await asyncio.gather(*[rc.get(k) for _ in range(16)])
            await loop.run_in_executor(None, holder_th.join)
            assert vals == [b"v2"] * 16
            assert calls(hnode, "get") - before == 1
            waited = shim.stats()["wait_hits"]
            assert waited >= 8

            data.hset(h, "f", "v2")
            await invalidated(h, 2)
            before = [calls(hnode, c) for c in ("hgetall", "hget", "hmget")]
            holder_th = await loop.run_in_executor(None, hold_server, holder)
            reads = []
            for i in range(15):
                reads.append(rc.hget(h, "f") if i % 3 == 0 else
                             rc.hmget(h, ["f"]) if i % 3 == 1 else rc.hgetall(h))
            vals = await asyncio.gather(*reads)
            await loop.run_in_executor(None, holder_th.join)
            assert vals == [b"v2", [b"v2"], {b"f": b"v2"}] * 5
            after = [calls(hnode, c) for c in ("hgetall", "hget", "hmget")]
            assert [a - b for a, b in zip(after, before)] == [1, 0, 0], "one HGETALL for every reader"
            assert shim.stats()["wait_hits"] - waited >= 8
        finally:
            shim.close()
            await rc.close()
    try:
        run(main())
    finally:
        data.close()


def test_asyncio_cluster_channel_twin_credentials(cluster):
    """The channel's sync RedisCluster is built from the asyncio client's
    nodes and credentials."""
    from hotsniff_shim.asyncio_cluster import sync_cluster_twin
    port0 = cluster.nodes[0].port
    rc = AsyncCluster(host="127.0.0.1", port=port0, username="default", password=None,
                      client_name="app")
    twin = sync_cluster_twin(rc)
    try:
        assert {n.port for n in twin.get_nodes()} == {n.port for n in cluster.nodes}
        assert twin.get_connection_kwargs().get("client_name") == "app"
        assert twin.get_connection_kwargs().get("username") == "default"
    finally:
        twin.close()
