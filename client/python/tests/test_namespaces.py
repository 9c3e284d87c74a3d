"""A shim never serves a value read in another namespace: after any SELECT
(single-connection clients, pools, pipelines, Redis.client(), a DB in the
URL), every read returns what the DB its connection is on holds."""

import time

import redis

import hotsniff_shim
from conftest import Publisher, unique, wait


def start(port, r, key, db_values=(0, 1)):
    plain = redis.Redis(port=port)
    for db in db_values:
        redis.Redis(port=port, db=db).set(key, "db%d" % db)
    ch = unique("ns")
    pub = Publisher(plain, ch)
    pub.write_snapshot()
    shim = hotsniff_shim.install(r, channel=ch, channel_client=redis.Redis(port=port), local_ttl=0.05)
    assert shim.wait_synced(5)
    return pub, shim


def warm(r, shim, key, want):
    wait(lambda: shim.is_hot(key), what="hot")
    for _ in range(5):
        assert r.get(key) == want
    assert shim.stats()["hits"] >= 1, "the shim serves before the SELECT"


def read_for(r, key, want, seconds=0.4, min_reads=1):
    """Reads key for a while; the count of reads that did not return want."""
    wrong = n = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
        if r.get(key) != want:
            wrong += 1
        time.sleep(0.002)
    assert n >= min_reads
    return wrong


def test_single_connection_select(port):
    k = unique("k")
    r = redis.Redis(port=port, single_connection_client=True)
    pub, shim = start(port, r, k)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        r.select(1)
        time.sleep(0.3)
        assert read_for(r, k, b"db1") == 0
        # Back on DB 0: DB 0's value, never the copy refreshed on DB 1.
        r.select(0)
        assert read_for(r, k, b"db0") == 0
        hits = shim.stats()["hits"]
        assert read_for(r, k, b"db0", 0.2) == 0
        assert shim.stats()["hits"] > hits, "served again once back on the cache's DB"
        # A refresh carrying the absorbed report went through the one connection, on DB 0.
        assert shim.stats()["absorbed_reports"] >= 1
    finally:
        shim.close()


def test_pooled_select_stops_serving(port):
    k = unique("k")
    r = redis.Redis(port=port)
    pub, shim = start(port, r, k)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        r.select(1)  # one pooled connection now on DB 1; redis-py hands it out next
        hits = shim.stats()["hits"]
        assert read_for(r, k, b"db1") == 0
        assert shim.stats()["hits"] == hits
        assert shim.stats()["namespace_passes"] > 0
    finally:
        shim.close()


def test_pipeline_select(port):
    k = unique("k")
    r = redis.Redis(port=port)
    pub, shim = start(port, r, k)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        p = r.pipeline(transaction=False)
        p.execute_command("SELECT", 1)
        p.get(k)
        assert p.execute() == [True, b"db1"]
        assert read_for(r, k, b"db1") == 0
        # A pipeline on that connection reads DB 1 too, never a DB 0 copy.
        p = r.pipeline(transaction=False)
        p.get(k)
        assert p.execute() == [b"db1"]
    finally:
        shim.close()


def test_transaction_select(port):
    k = unique("k")
    r = redis.Redis(port=port)
    pub, shim = start(port, r, k)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        p = r.pipeline(transaction=True)
        p.execute_command("SELECT", 1)
        p.get(k)
        assert p.execute() == [True, b"db1"]
        assert read_for(r, k, b"db1") == 0
    finally:
        shim.close()


def test_explicit_client_select(port):
    """Redis.client() takes a pooled connection the shim never sees a
    command of, and gives it back on DB 1."""
    k = unique("k")
    r = redis.Redis(port=port)
    pub, shim = start(port, r, k)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        with r.client() as c:
            c.select(1)
            assert c.get(k) == b"db1"
        assert read_for(r, k, b"db1") == 0
    finally:
        shim.close()


def test_reconnect_goes_back_to_db(port):
    """redis-py reconnects a single connection on its configured DB: after
    a SELECT and a dropped connection, the reads are DB 0's again, and the
    shim serves DB 0's value."""
    k = unique("k")
    r = redis.Redis(port=port, single_connection_client=True)
    pub, shim = start(port, r, k)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        r.select(1)
        assert read_for(r, k, b"db1", 0.2) == 0
        r.connection.disconnect()
        assert read_for(r, k, b"db0") == 0
    finally:
        shim.close()


def test_db_in_url(port):
    k = unique("k")
    r = redis.Redis.from_url("redis://127.0.0.1:%d/2" % port)
    pub, shim = start(port, r, k, db_values=(0, 2))
    try:
        pub.send(k, ns="0")  # hot in DB 0: not this client's
        time.sleep(0.2)
        assert not shim.is_hot(k)
        assert read_for(r, k, b"db2", 0.2) == 0
        assert shim.stats()["admissions"] == 0
        pub.send(k, ns="2")
        warm(r, shim, k, b"db2")
        assert read_for(r, k, b"db2") == 0
    finally:
        shim.close()


def test_report_reads_on_the_entry_db(port):
    """Seen by the server (MONITOR): every refresh read and absorbed report
    of the DB-0 entry runs on DB 0, on one connection, the report right
    after its read, also after the client went to DB 1 and back."""
    import threading
    k = unique("k")
    r = redis.Redis(port=port, single_connection_client=True)
    pub, shim = start(port, r, k)
    seen = []
    stop = threading.Event()
    ready = threading.Event()

    def monitor():
        with redis.Redis(port=port).monitor() as m:
            ready.set()
            for cmd in m.listen():
                if stop.is_set():
                    return
                if k in cmd["command"]:
                    seen.append((cmd["db"], cmd["client_address"], cmd["client_port"], cmd["command"]))

    t = threading.Thread(target=monitor, daemon=True)
    t.start()
    ready.wait(5)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        read_for(r, k, b"db0", 0.3, 0)
        r.select(1)
        read_for(r, k, b"db1", 0.3, 0)
        r.select(0)
        read_for(r, k, b"db0", 0.3, 0)
        own = r.connection._sock.getsockname()[1]
        time.sleep(0.2)
    finally:
        stop.set()
        redis.Redis(port=port).get(k)  # wakes the monitor
        t.join(5)
        shim.close()
    echoes = [i for i, s in enumerate(seen) if s[3].startswith("ECHO hotsniff:absorbed:1")]
    assert len(echoes) >= 2, seen[:10]
    for i in echoes:
        db, addr, cport, _ = seen[i]
        assert db == 0, seen[i]
        assert int(cport) == own, "the report went through another connection than the client's own"
        prev = seen[i - 1]
        assert prev[3] == "GET " + k and prev[:3] == (0, addr, cport), (prev, seen[i])


def test_installed_again_after_close(port):
    """A second shim on the same client (after close) follows the
    connections the first one wrapped; two at once are refused."""
    k = unique("k")
    r = redis.Redis(port=port, single_connection_client=True)
    pub, shim = start(port, r, k)
    try:
        import pytest
        with pytest.raises(ValueError):
            hotsniff_shim.install(r, channel=pub.channel, channel_client=redis.Redis(port=port))
    finally:
        shim.close()
    shim = hotsniff_shim.install(r, channel=pub.channel, channel_client=redis.Redis(port=port))
    try:
        assert shim.wait_synced(5)
        pub.send(k)
        warm(r, shim, k, b"db0")
        r.select(1)
        assert read_for(r, k, b"db1", 0.2) == 0
        r.select(0)
        assert read_for(r, k, b"db0", 0.2) == 0
    finally:
        shim.close()


def test_blocking_pool_select(port):
    """A BlockingConnectionPool keeps its connections elsewhere than a
    ConnectionPool (redis-py 4: _connections): a SELECT on one of them
    stops serving all the same, and DB 1's value is read, never DB 0's
    copy."""
    k = unique("k")
    r = redis.Redis(connection_pool=redis.BlockingConnectionPool(port=port, max_connections=1))
    pub, shim = start(port, r, k)
    try:
        pub.send(k)
        warm(r, shim, k, b"db0")
        r.select(1)  # the pool's one connection is on DB 1 now
        assert read_for(r, k, b"db1") == 0
        r.select(0)
        assert read_for(r, k, b"db0") == 0
        hits = shim.stats()["hits"]
        assert read_for(r, k, b"db0", 0.2) == 0
        assert shim.stats()["hits"] > hits, "served again once back on the cache's DB"
    finally:
        shim.close()
