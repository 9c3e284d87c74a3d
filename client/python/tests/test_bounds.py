"""Bounded local memory and the too-big verdict, against a real
redis-server; and clients the shim does not serve refused at install."""

import time

import pytest
import redis

import hotsniff_shim
from conftest import Publisher, calls, unique, wait


def start(port, **opts):
    plain = redis.Redis(port=port)
    ch = unique("b")
    pub = Publisher(plain, ch)
    pub.write_snapshot()
    r = redis.Redis(port=port)
    shim = hotsniff_shim.install(r, channel=ch, channel_client=redis.Redis(port=port), **opts)
    assert shim.wait_synced(5)
    return plain, pub, r, shim


def test_big_hash_verdict_survives_cold_hot_and_readmission(port):
    plain, pub, r, shim = start(port, local_ttl=60, max_hash_fields=10)
    try:
        h = unique("bigh")
        plain.hset(h, mapping={"f%d" % i: i for i in range(50)})
        pub.send(h)
        wait(lambda: shim.is_hot(h), what="hot")
        hlen, hgetall = calls(plain, "hlen"), calls(plain, "hgetall")
        for _ in range(5):
            assert r.hget(h, "f1") == b"1"
        assert calls(plain, "hlen") == hlen + 1, "sized once"
        assert calls(plain, "hgetall") == hgetall, "never fetched whole"
        # Cold, hot again, read twice (re-admission): no second HLEN.
        pub.send(h, typ="cold")
        wait(lambda: not shim.is_hot(h), what="cold")
        pub.send(h)
        wait(lambda: shim.is_hot(h), what="hot again")
        for _ in range(5):
            assert r.hget(h, "f2") == b"2"
            assert r.hgetall(h)[b"f3"] == b"3"
        assert calls(plain, "hlen") == hlen + 1, "HLEN not repeated after re-admission"
        assert calls(plain, "hgetall") == hgetall + 5
        assert shim.stats()["uncacheable"] == 1
    finally:
        shim.close()


def test_max_entries_and_bytes(port):
    plain, pub, r, shim = start(port, local_ttl=60, max_entries=5, max_bytes=5000)
    try:
        keys = [unique("e%d-" % i) for i in range(20)]
        for k in keys:
            plain.set(k, "x" * 600)
            pub.send(k)
        wait(lambda: all(shim.is_hot(k) for k in keys), what="hot")
        for k in keys:
            r.get(k)
            r.get(k)
            st = shim.stats()
            assert st["entries"] <= 5
            assert st["bytes"] <= 5000
        assert shim.stats()["evictions"]["capacity"] + shim.stats()["evictions"]["bytes"] >= 15
        for k in keys:
            assert r.get(k) == b"x" * 600
    finally:
        shim.close()


def test_value_size_limit(port):
    plain, pub, r, shim = start(port, local_ttl=60, max_value_bytes=1000)
    try:
        big, small = unique("big"), unique("small")
        plain.set(big, "y" * 2000)
        plain.set(small, "y" * 10)
        pub.send(big)
        pub.send(small)
        wait(lambda: shim.is_hot(big) and shim.is_hot(small), what="hot")
        before = calls(plain, "get")
        for _ in range(10):
            assert r.get(big) == b"y" * 2000
            assert r.get(small) == b"y" * 10
        # The big value is never cached: every read of it reached Redis;
        # the small one was fetched once (second read) and then served.
        assert calls(plain, "get") - before == 10 + 2
        assert shim.stats()["too_large_values"] == 1
        assert big.encode() not in shim.cache.entries
    finally:
        shim.close()


class NotARedis:
    pass


def test_unsupported_clients_refused():
    with pytest.raises(hotsniff_shim.UnsupportedClient) as ei:
        hotsniff_shim.install(NotARedis())
    msg = str(ei.value)
    assert "redis.Redis" in msg and "redis.asyncio.Redis" in msg and "redis.cluster.RedisCluster" in msg
    assert "redis.asyncio.cluster.RedisCluster" in msg
    # Each supported client is recognised as its own mode.
    from redis.asyncio.cluster import RedisCluster as AsyncCluster
    from redis.cluster import RedisCluster
    from hotsniff_shim.shim import client_mode
    assert client_mode(AsyncCluster.__new__(AsyncCluster)) == "asyncio-cluster"
    assert client_mode(RedisCluster.__new__(RedisCluster)) == "cluster"
    # A channel_client must be sync: an asyncio cluster client is refused.
    with pytest.raises(hotsniff_shim.UnsupportedClient) as ei:
        hotsniff_shim.install(redis.Redis(port=1), channel_client=AsyncCluster.__new__(AsyncCluster))
    assert "channel_client must be a sync" in str(ei.value)


def test_asyncio_without_derivable_channel_client_is_refused(tmp_path):
    import redis.asyncio as aioredis

    class Odd(aioredis.Connection):
        pass
    pool = aioredis.ConnectionPool(connection_class=Odd, host="127.0.0.1", port=1)
    with pytest.raises(ValueError) as ei:
        hotsniff_shim.install(aioredis.Redis(connection_pool=pool))
    assert "channel_client=redis.Redis" in str(ei.value)
    time.sleep(0)
