"""redis.asyncio.Redis: the same guarantees as the sync client."""

import asyncio
import time

import pytest
import redis
import redis.asyncio as aioredis

import hotsniff_shim
from conftest import Publisher, calls, unique, until_hot, wait


def run(coro):
    return asyncio.run(coro)


@pytest.mark.parametrize("with_channel_client", [True, False])
def test_asyncio_reads(port, with_channel_client):
    k = unique("ak")
    plain = redis.Redis(port=port)
    plain.set(k, "v")
    ch = unique("ach")
    pub = Publisher(plain, ch)
    pub.write_snapshot()

    async def main():
        ar = aioredis.Redis(port=port)
        opts = {"channel_client": redis.Redis(port=port)} if with_channel_client else {}
        shim = hotsniff_shim.install(ar, channel=ch, local_ttl=0.05, **opts)
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, shim.wait_synced, 5)
            pub.send(k)
            await until_hot(shim, k)
            ok = 0
            for _ in range(20):
                v = await ar.get(k)
                ok += v == b"v"
                await asyncio.sleep(0.01)
            assert ok == 20
            st = shim.stats()
            assert st["hits"] + st["stale_hits"] >= 10, st
            # Values refresh: a write through another client shows within the bound.
            plain.set(k, "w")
            await asyncio.sleep(0.16)
            assert await ar.get(k) == b"w"
            # A write through the shimmed client drops the copy at once.
            await ar.set(k, "x")
            assert await ar.get(k) == b"x"
            # Hashes and MGET are served too, as values, never coroutines.
            plain.hset(k + "h", mapping={"f": "1"})
            pub.send(k + "h")
            await until_hot(shim, k + "h")
            for _ in range(3):
                assert await ar.hgetall(k + "h") == {b"f": b"1"}
                assert await ar.hget(k + "h", "f") == b"1"
                assert await ar.mget([k]) == [b"x"]
            # Concurrent readers: one refresh, no error.
            await asyncio.sleep(0.06)
            before = calls(plain, "get")
            vals = await asyncio.gather(*[ar.get(k) for _ in range(50)])
            assert vals == [b"x"] * 50
            assert calls(plain, "get") - before <= 2
        finally:
            shim.close()
            await (ar.aclose() if hasattr(ar, "aclose") else ar.close())
    run(main())


def test_asyncio_single_connection_select(port):
    k = unique("ak")
    redis.Redis(port=port).set(k, "db0")
    redis.Redis(port=port, db=1).set(k, "db1")
    ch = unique("ach")
    pub = Publisher(redis.Redis(port=port), ch)
    pub.write_snapshot()

    async def main():
        ar = aioredis.Redis(port=port, single_connection_client=True)
        shim = hotsniff_shim.install(ar, channel=ch)
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, shim.wait_synced, 5)
            pub.send(k)
            await until_hot(shim, k)
            for _ in range(5):
                assert await ar.get(k) == b"db0"
            assert shim.stats()["hits"] >= 1
            await ar.select(1)
            wrong = 0
            for _ in range(40):
                wrong += await ar.get(k) != b"db1"
                await asyncio.sleep(0.005)
            await ar.select(0)
            for _ in range(40):
                wrong += await ar.get(k) != b"db0"
                await asyncio.sleep(0.005)
            assert wrong == 0
        finally:
            shim.close()
            await (ar.aclose() if hasattr(ar, "aclose") else ar.close())
    run(main())


def test_asyncio_pipeline_write_invalidates(port):
    k = unique("ak")
    plain = redis.Redis(port=port)
    plain.set(k, "v")
    ch = unique("ach")
    pub = Publisher(plain, ch)
    pub.write_snapshot()

    async def main():
        ar = aioredis.Redis(port=port)
        shim = hotsniff_shim.install(ar, channel=ch, local_ttl=60)
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, shim.wait_synced, 5)
            pub.send(k)
            await until_hot(shim, k)
            assert await ar.get(k) == b"v"
            assert await ar.get(k) == b"v"
            async with ar.pipeline(transaction=True) as p:
                p.set(k, "new")
                p.get(k)
                assert await p.execute() == [True, b"new"]
            assert await ar.get(k) == b"new"
        finally:
            shim.close()
            await (ar.aclose() if hasattr(ar, "aclose") else ar.close())
    run(main())


def test_asyncio_blocking_pool_select(port):
    """The asyncio BlockingConnectionPool (redis-py 4 keeps its connections
    in _connections): after SELECT 1 on its one connection every read is
    DB 1's, after SELECT 0 DB 0's, and it is served again."""
    k = unique("ak")
    redis.Redis(port=port).set(k, "db0")
    redis.Redis(port=port, db=1).set(k, "db1")
    ch = unique("ach")
    pub = Publisher(redis.Redis(port=port), ch)
    pub.write_snapshot()

    async def main():
        ar = aioredis.Redis(connection_pool=aioredis.BlockingConnectionPool(port=port, max_connections=1))
        shim = hotsniff_shim.install(ar, channel=ch, channel_client=redis.Redis(port=port), local_ttl=0.05)
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, shim.wait_synced, 5)
            pub.send(k)
            await until_hot(shim, k)
            for _ in range(5):
                assert await ar.get(k) == b"db0"
            assert shim.stats()["hits"] >= 1
            await ar.select(1)
            wrong = 0
            for _ in range(40):
                wrong += await ar.get(k) != b"db1"
                await asyncio.sleep(0.005)
            await ar.select(0)
            for _ in range(40):
                wrong += await ar.get(k) != b"db0"
                await asyncio.sleep(0.005)
            assert wrong == 0
            hits = shim.stats()["hits"]
            for _ in range(5):
                assert await ar.get(k) == b"db0"
            assert shim.stats()["hits"] > hits
        finally:
            shim.close()
            await (ar.aclose() if hasattr(ar, "aclose") else ar.close())
    run(main())


def test_asyncio_pipeline_served(port):
    """A plain redis.asyncio pipeline has its hot reads answered from
    memory (nothing reaches Redis when every command is served), the rest
    sent in order; a transaction is sent whole; a SELECT in a pipeline
    reads the selected DB and stops serving while a pooled connection is
    on another DB."""
    k, other = unique("ak"), unique("ao")
    plain = redis.Redis(port=port)
    plain.set(k, "v")
    plain.set(other, "o")
    redis.Redis(port=port, db=1).set(k, "db1")
    ch = unique("ach")
    pub = Publisher(plain, ch)
    pub.write_snapshot()

    async def main():
        ar = aioredis.Redis(port=port)
        shim = hotsniff_shim.install(ar, channel=ch, channel_client=redis.Redis(port=port), local_ttl=60)
        try:
            assert await asyncio.get_running_loop().run_in_executor(None, shim.wait_synced, 5)
            pub.send(k)
            await until_hot(shim, k)
            for _ in range(3):
                assert await ar.get(k) == b"v"
            before = calls(plain, "get")
            async with ar.pipeline(transaction=False) as p:
                p.get(k)
                p.get(k)
                assert await p.execute() == [b"v", b"v"]
            assert calls(plain, "get") == before, "a fully served pipeline reaches Redis"
            async with ar.pipeline(transaction=False) as p:
                p.get(other)
                p.get(k)
                p.mget([k])
                assert await p.execute() == [b"o", b"v", [b"v"]]
            assert calls(plain, "get") == before + 1, "only the cold key is sent"
            async with ar.pipeline(transaction=True) as p:
                p.get(k)
                assert await p.execute() == [b"v"]
            assert calls(plain, "get") == before + 2, "a transaction is sent whole"
            # An error reply keeps its place and is annotated as redis-py does.
            plain.hset(other + "h", "f", "1")
            async with ar.pipeline(transaction=False) as p:
                p.get(k)
                p.get(other + "h")
                with pytest.raises(redis.ResponseError, match="Command # 2"):
                    await p.execute()
            # SELECT inside a pipeline: its read is DB 1's, and afterwards no
            # pooled read is served while that connection is on DB 1.
            async with ar.pipeline(transaction=False) as p:
                p.select(1)
                p.get(k)
                assert await p.execute() == [True, b"db1"]
            hits = shim.stats()["hits"]
            async with ar.pipeline(transaction=False) as p:
                p.get(k)
                assert await p.execute() == [b"db1"]
            assert shim.stats()["hits"] == hits
            async with ar.pipeline(transaction=False) as p:
                p.select(0)
                p.get(k)
                assert await p.execute() == [True, b"v"]
            async with ar.pipeline(transaction=False) as p:
                p.get(k)
                assert await p.execute() == [b"v"]
            assert shim.stats()["hits"] > hits, "served again once every connection is back on DB 0"
        finally:
            shim.close()
            await (ar.aclose() if hasattr(ar, "aclose") else ar.close())
    run(main())


def test_asyncio_invalidated_readers_wait(port):
    """As the sync client's: after an invalidate message, concurrent readers
    wait for the one refresh in flight rather than each going to Redis."""
    from test_shim_redis import hold_server
    k = unique("aw")
    plain = redis.Redis(port=port)
    plain.set(k, "v1")
    ch = unique("awch")
    pub = Publisher(plain, ch)
    pub.write_snapshot()

    async def main():
        ar = aioredis.Redis(port=port)
        shim = hotsniff_shim.install(ar, channel=ch, local_ttl=60, stale_grace=5,
                                     channel_client=redis.Redis(port=port))
        loop = asyncio.get_running_loop()
        try:
            assert await loop.run_in_executor(None, shim.wait_synced, 5)
            pub.send(k)
            await until_hot(shim, k)
            await ar.get(k)
            assert await ar.get(k) == b"v1"
            plain.set(k, "v2")
            pub.send(k, typ="invalidate", snapshot=False)
            deadline = time.monotonic() + 5
            while shim.stats()["invalidations"]["event"] == 0:
                assert time.monotonic() < deadline, "invalidate not applied"
                await asyncio.sleep(0.005)
            before = calls(plain, "get")
            holder = await loop.run_in_executor(None, hold_server, port)
            vals = await asyncio.gather(*[ar.get(k) for _ in range(16)])
            await loop.run_in_executor(None, holder.join)
            assert vals == [b"v2"] * 16
            assert calls(plain, "get") - before == 1
            assert shim.stats()["wait_hits"] >= 8
        finally:
            shim.close()
            await (ar.aclose() if hasattr(ar, "aclose") else ar.close())
    run(main())
