"""Real redis-servers for the tests: each started here on a free port, in a
temporary directory, and stopped by its own PID (never by name)."""

import asyncio
import json
import os
import shutil
import socket
import subprocess
import tempfile
import time

import pytest
import redis


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under CI=true a skipped test is a failure: a missing redis-server,
    redis-cli or venv module would otherwise pass the suite unseen."""
    outcome = yield
    rep = outcome.get_result()
    if rep.skipped and os.environ.get("CI") == "true" and not hasattr(rep, "wasxfail"):
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = "skipped under CI=true (install what it needs): " + reason


def _bindable(p):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_port(cluster=False):
    """A free port; for a cluster node one whose bus port (port + 10000) is
    free and valid too."""
    for _ in range(200):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if not cluster or (p + 10000 <= 65535 and _bindable(p + 10000)):
            return p
        if cluster:
            # Ephemeral ports are often above 55535: try a low range too.
            for q in range(20000 + p % 20000, 40000):
                if _bindable(q) and _bindable(q + 10000):
                    return q
    raise RuntimeError("no free port")


class Server:
    def __init__(self, *extra, port=None):
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server not installed")
        self.port = port or free_port(cluster="--cluster-enabled" in extra)
        self.dir = tempfile.mkdtemp(prefix="hotsniff-py-")
        self.extra = extra
        self.proc = None
        self.start()

    def start(self):
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir, *self.extra],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        c = redis.Redis(port=self.port)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                c.ping()
                return
            except (redis.ConnectionError, redis.ResponseError):
                time.sleep(0.01)
        raise RuntimeError("redis-server on port %d did not start (exit %s)" % (self.port, self.proc.poll()))

    def stop(self):
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def close(self):
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture(scope="module")
def server():
    s = Server()
    yield s
    s.close()


@pytest.fixture(scope="module")
def port(server):
    return server.port


def event(key, seq, typ="hot", node="t", ns="0", server="", ttl_ms=0, **kw):
    d = {"v": 1, "seq": seq, "type": typ, "proto": "redis", "server": server, "ns": ns,
         "key": key, "qps": 1, "ttl_ms": ttl_ms, "ts": "", "source": "detected", "node": node}
    d.update(kw)
    return d


class Publisher:
    """A scripted daemon: channel messages and the snapshot document."""

    def __init__(self, rdb, channel, node="t"):
        self.r = rdb
        self.channel = channel
        self.node = node
        self.seq = 0
        self.keys = {}

    def send(self, key, typ="hot", ns="0", server="", ttl_ms=0, snapshot=True, **kw):
        self.seq += 1
        e = event(key, self.seq, typ, self.node, ns, server, ttl_ms, **kw)
        if snapshot:
            if typ == "hot":
                self.keys[(key, ns, server)] = e
            elif typ == "cold":
                self.keys.pop((key, ns, server), None)
            self.write_snapshot()
        self.r.publish(self.channel, json.dumps(e))
        return e

    def raw(self, payload):
        self.r.publish(self.channel, payload)

    def snapshot_doc(self):
        return {"v": 1, "seq": self.seq, "node": self.node,
                "nodes": [{"node": self.node, "seq": self.seq, "keys": len(self.keys)}],
                "keys": list(self.keys.values())}

    def write_snapshot(self, doc=None):
        self.r.set(self.channel + ":snapshot", json.dumps(doc if doc is not None else self.snapshot_doc())
                   if not isinstance(doc, (bytes, str)) else doc)


def wait(cond, timeout=5.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.005)
    raise AssertionError("timed out waiting for " + what)


def calls(c, name):
    return c.info("commandstats").get("cmdstat_" + name, {}).get("calls", 0)


def paced_writer(rc, key, stop, writes, errors):
    """A thread body: SET key to 1, 2, ... every 10 ms through rc until
    stop is set; writes[n] is the monotonic time SET n returned, errors
    collects ("write", err)."""
    n = 0
    while not stop.is_set():
        n += 1
        try:
            rc.set(key, str(n))
        except redis.RedisError as err:  # noqa: PERF203
            errors.append(("write", err))
            continue
        writes[n] = time.monotonic()
        time.sleep(0.01)


async def until_hot(shim, key, timeout=5.0):
    """Waits on the event loop until the shim holds key as hot."""
    deadline = time.monotonic() + timeout
    while not shim.is_hot(key):
        assert time.monotonic() < deadline, "%r never hot" % (key,)
        await asyncio.sleep(0.005)


def unique(prefix="t"):
    return "%s%d" % (prefix, time.monotonic_ns())


class Cluster:
    """A 3-master redis cluster (no replicas), created with
    `redis-cli --cluster create`."""

    def __init__(self):
        if shutil.which("redis-cli") is None:
            pytest.skip("redis-cli not installed")
        self.nodes = []
        try:
            for _ in range(3):
                self.nodes.append(Server("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                         "--cluster-node-timeout", "5000"))
            addrs = ["127.0.0.1:%d" % n.port for n in self.nodes]
            subprocess.run(["redis-cli", "--cluster", "create", *addrs, "--cluster-replicas", "0",
                            "--cluster-yes"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           timeout=60)
            for n in self.nodes:
                c = redis.Redis(port=n.port)
                wait(lambda: c.cluster("info")["cluster_state"] == "ok", 20, "cluster ok")
        except BaseException:
            self.close()
            raise

    def close(self):
        for n in self.nodes:
            n.close()

    def node_of(self, key):
        """(port, node id) of the master holding key."""
        c = redis.Redis(port=self.nodes[0].port)
        slot = c.cluster("keyslot", key)
        for n in self.nodes:
            r = redis.Redis(port=n.port)
            if r.cluster("countkeysinslot", slot) is not None:
                pass
            nid = r.cluster("myid")
            nid = nid.decode() if isinstance(nid, bytes) else nid
            for s in r.cluster("slots"):
                if s[0] <= slot <= s[1] and int(s[2][1]) == n.port:
                    return n.port, nid, slot
        raise AssertionError("no node holds slot %d" % slot)

    def migrate_slot(self, slot, src_port, dst_port, key):
        """Move slot (holding key) from src to dst the way redis-cli
        --cluster reshard does: IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE."""
        src, dst = redis.Redis(port=src_port), redis.Redis(port=dst_port)
        sid = _s(src.execute_command("CLUSTER", "MYID"))
        did = _s(dst.execute_command("CLUSTER", "MYID"))
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", sid)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", did)
        while True:
            keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
            if not keys:
                break
            src.execute_command("MIGRATE", "127.0.0.1", dst_port, "", 0, 5000, "KEYS", *keys)
        for n in self.nodes:
            redis.Redis(port=n.port).execute_command("CLUSTER", "SETSLOT", slot, "NODE", did)


def _s(v):
    return v.decode() if isinstance(v, bytes) else v


@pytest.fixture(scope="session")
def cluster():
    c = Cluster()
    yield c
    c.close()


def pyexe():
    """The interpreter running the tests (the one redis-py is installed for)."""
    import sys
    return sys.executable


os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
