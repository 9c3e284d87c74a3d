"""redis.cluster.RedisCluster against a real 3-master cluster created here:
events from any node of the cluster apply (none from elsewhere), refresh
and report go to the node holding the key, a slot moved mid-run under a
writer every 10 ms never yields a read older than LocalTTL + StaleGrace
after the write that replaced it, nor an error, and a value read on the
old master is never served once the client knows the slot moved."""

import threading
import time

import redis
from redis.cluster import RedisCluster

import hotsniff_shim
from conftest import Publisher, calls, paced_writer, unique, wait

LOCAL_TTL, STALE_GRACE = 0.05, 0.1


def test_cluster_serve_and_slot_move(cluster, server):
    port0 = cluster.nodes[0].port
    rc = RedisCluster(host="127.0.0.1", port=port0)
    writer_rc = RedisCluster(host="127.0.0.1", port=port0)
    k = unique("ck")
    holder, _, slot = cluster.node_of(k)
    others = [n.port for n in cluster.nodes if n.port != holder]
    writer_rc.set(k, "0")
    ch = unique("cch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()
    shim = hotsniff_shim.install(rc, channel=ch, channel_client=redis.Redis(port=server.port),
                                 local_ttl=LOCAL_TTL, stale_grace=STALE_GRACE)
    try:
        assert shim.wait_synced(5)
        assert shim.stats()["mode"] == "cluster"
        # Hot at a server outside the cluster: not this client's.
        pub.send(k, server="10.255.0.1:6379")
        time.sleep(0.2)
        assert not shim.is_hot(k)
        pub.send(k, server="127.0.0.1:%d" % holder)
        wait(lambda: shim.is_hot(k), what="hot at its master")
        hnode = redis.Redis(port=holder)
        before = calls(hnode, "get")
        for _ in range(200):
            assert rc.get(k) == b"0"
        assert calls(hnode, "get") - before <= 10, "hot reads served locally"
        echo = {p: calls(redis.Redis(port=p), "echo") for p in [holder] + others}
        time.sleep(0.06)
        rc.get(k)  # a refresh, carrying the absorbed report, on the holder
        assert calls(hnode, "echo") == echo[holder] + 1
        assert all(calls(redis.Redis(port=p), "echo") == echo[p] for p in others)

        # The slot moves while a writer writes every 10 ms and readers read.
        writes = {}  # value -> monotonic time its SET returned
        stop = threading.Event()
        errors = []
        reads = []

        def writer():
            paced_writer(writer_rc, k, stop, writes, errors)

        def reader():
            while not stop.is_set():
                s = time.monotonic()
                try:
                    v = rc.get(k)
                except redis.RedisError as err:
                    errors.append(("read", err))
                    continue
                reads.append((s, int(v)))
                time.sleep(0.001)

        ts = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
        for t in ts:
            t.start()
        time.sleep(0.5)
        dst = others[1]
        cluster.migrate_slot(slot, holder, dst, k)
        assert cluster.node_of(k)[0] == dst
        # The daemon now sees the key's reads at its new master.
        time.sleep(0.3)
        pub.send(k, server="127.0.0.1:%d" % dst)
        wait(lambda: shim.is_hot(k), what="hot at the new master")
        hits_after = shim.stats()["hits"]
        time.sleep(1.5)
        stop.set()
        for t in ts:
            t.join()
        assert not errors, errors[:3]
        assert shim.stats()["hits"] > hits_after, "served again after the move"
        # Events from any node of the cluster apply, from elsewhere not.
        assert shim.matches(_ev(k, holder)) and shim.matches(_ev(k, dst))
        assert not shim.matches(_ev(k, 1))
        late = 0
        for s, v in reads:
            w = writes.get(v + 1)
            if w is not None and s - w > LOCAL_TTL + STALE_GRACE:
                late += 1
        assert len(reads) > 500, len(reads)
        print("cluster slot move: %d reads, %d writes, %d late, stats %s" % (
            len(reads), len(writes), late, {x: shim.stats()[x] for x in ("hits", "stale_hits", "misses", "refreshes")}))
        assert late == 0, "%d of %d reads older than LocalTTL+StaleGrace" % (late, len(reads))
        dnode = redis.Redis(port=dst)
        echo = calls(dnode, "echo")
        time.sleep(0.1)
        for _ in range(20):
            rc.get(k)
            time.sleep(0.01)
        assert calls(dnode, "echo") > echo, "reports go to the key's new master"
    finally:
        shim.close()
        rc.close()
        writer_rc.close()


def _ev(key, port):
    from hotsniff_shim.events import Event
    e = Event()
    e.proto, e.ns, e.key, e.server, e.type = "redis", "0", key.encode(), "127.0.0.1:%d" % port, "hot"
    return e


def test_cluster_pipeline_write_and_channel_on_cluster(cluster):
    """Without channel_client the cluster itself carries the channel; a
    cluster pipeline's write drops the cached copy."""
    port0 = cluster.nodes[0].port
    rc = RedisCluster(host="127.0.0.1", port=port0)
    k = unique("cp")
    holder, _, _ = cluster.node_of(k)
    rc.set(k, "v")
    ch = unique("cpch")
    pub_rc = RedisCluster(host="127.0.0.1", port=port0)
    pub = Publisher(pub_rc, ch)
    pub.write_snapshot()
    shim = hotsniff_shim.install(rc, channel=ch, local_ttl=60)
    try:
        assert shim.wait_synced(5)
        pub.send(k, server="127.0.0.1:%d" % holder)
        wait(lambda: shim.is_hot(k), what="hot")
        assert rc.get(k) == b"v"
        assert rc.get(k) == b"v"
        assert rc.get(k) == b"v"
        assert shim.stats()["hits"] >= 1
        p = rc.pipeline()
        p.set(k, "new")
        p.execute()
        assert rc.get(k) == b"new"
    finally:
        shim.close()
        rc.close()
        pub_rc.close()


def test_cluster_value_from_old_master_not_served(cluster, server):
    """A value read on the master that held the key's slot is not served
    once the client's slot map names another master (here: learnt from a
    MOVED answering another key of the slot): the first read goes once to
    the new master, returns what was written there, and the next reads are
    served locally again (the key stays hot and admitted throughout)."""
    port0 = cluster.nodes[0].port
    rc = RedisCluster(host="127.0.0.1", port=port0)
    k = unique("mv") + "{mv%d}" % time.monotonic_ns()
    other = "other" + k[k.index("{"):]  # same slot
    holder, _, slot = cluster.node_of(k)
    dst = [n.port for n in cluster.nodes if n.port != holder][0]
    rc.set(k, "old")
    ch = unique("mvch")
    pub = Publisher(redis.Redis(port=server.port), ch)
    pub.write_snapshot()
    shim = hotsniff_shim.install(rc, channel=ch, channel_client=redis.Redis(port=server.port), local_ttl=60)
    try:
        assert shim.wait_synced(5)
        pub.send(k, server="127.0.0.1:%d" % holder)
        wait(lambda: shim.is_hot(k), what="hot")
        for _ in range(3):
            assert rc.get(k) == b"old"
        hits = shim.stats()["hits"]
        assert rc.get(k) == b"old"
        assert shim.stats()["hits"] == hits + 1
        cluster.migrate_slot(slot, holder, dst, k)
        redis.Redis(port=dst).set(k, "new")  # another client, at the new master
        rc.set(other, "x")  # answered MOVED: the client's slot map now names dst
        dnode = redis.Redis(port=dst)
        before = calls(dnode, "get")
        assert rc.get(k) == b"new", "a value read on the old master was served after the move"
        assert calls(dnode, "get") == before + 1
        for _ in range(3):
            assert rc.get(k) == b"new"
        assert calls(dnode, "get") == before + 1, "served locally again after the move"
        assert shim.stats()["invalidations"]["moved"] >= 1
    finally:
        shim.close()
        rc.close()
