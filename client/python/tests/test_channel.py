"""The channel rules against a real redis-server: hostile messages are one
counted bad message each and the shim keeps serving (no reconnect); bad
snapshot entries are skipped; a forged seq jump is undone; flapping
verdicts are held; signed messages; a node restart does not empty the
cache; a channel outage is served through."""

import json
import time

import pytest
import redis

import hotsniff_shim
from conftest import Publisher, Server, calls, event, unique, wait
from hotsniff_shim.events import sign


def served(plain, r, key, n=50):
    """n reads of key; how many reached Redis."""
    before = calls(plain, "get")
    for _ in range(n):
        r.get(key)
    return calls(plain, "get") - before


@pytest.fixture
def live(port):
    plain = redis.Redis(port=port)
    k = unique("hk")
    plain.set(k, "v")
    ch = unique("hch")
    pub = Publisher(plain, ch)
    pub.write_snapshot()
    r = redis.Redis(port=port)
    shim = hotsniff_shim.install(r, channel=ch, channel_client=redis.Redis(port=port), local_ttl=60)
    assert shim.wait_synced(5)
    pub.send(k)
    wait(lambda: shim.is_hot(k), what="hot")
    r.get(k)
    r.get(k)
    yield plain, pub, r, shim, k
    shim.close()


HOSTILE = [
    ("ttl 400 digits", '{"v":1,"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"x","ttl_ms":' + "9" * 400
     + ',"node":"t"}', "out_of_range"),
    ("ttl 1e400", '{"v":1,"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"x","ttl_ms":1e400,"node":"t"}',
     "out_of_range"),
    ("ttl Infinity", '{"v":1,"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"x","ttl_ms":Infinity,"node":"t"}',
     "out_of_range"),
    ("v 1e400", '{"v":1e400,"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"x","ttl_ms":0,"node":"t"}',
     "out_of_range"),
    ("qps NaN", '{"v":1,"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"x","qps":NaN,"node":"t"}',
     "out_of_range"),
    ("ttl over a day", '{"v":1,"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"x","ttl_ms":86400001,"node":"t"}',
     "out_of_range"),
    ("seq 2^53", '{"v":1,"seq":9007199254740992,"type":"hot","proto":"redis","ns":"0","key":"x","node":"t"}%.0s',
     "out_of_range"),
    ("sample 0", '{"v":1,"seq":%d,"type":"hot","proto":"redis","ns":"0","key":"x","sample":0,"node":"t"}',
     "out_of_range"),
    ("over 1 MiB", '{"v":1,"seq":%d,"type":"hot","key":"' + "a" * (1 << 20) + '"}', "too_large"),
    ("batch of 4097", '{"v":2,"node":"t","events":[' + ",".join(['{"seq":%d}'] + ["{}"] * 4096) + "]}",
     "undecodable"),
    ("batch with one bad event", '{"v":2,"node":"t","events":[{"seq":%d,"type":"hot","key":"y"},'
     '{"seq":1,"type":"hot","key":"z","ttl_ms":-1}]}', "out_of_range"),
    ("not JSON", "{not json %d", "undecodable"),
]


@pytest.mark.parametrize("name,msg,reason", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_message_counted_once(live, name, msg, reason):
    plain, pub, r, shim, k = live
    st = shim.stats()
    pub.raw(msg % (pub.seq + 1) if "%" in msg else msg)
    wait(lambda: shim.stats()["bad_messages"][reason] == st["bad_messages"][reason] + 1, what="counted")
    time.sleep(0.1)
    st2 = shim.stats()
    assert sum(st2["bad_messages"].values()) == sum(st["bad_messages"].values()) + 1
    assert st2["channel_reconnects"] == st["channel_reconnects"]
    assert st2["channel_reloads"] == st["channel_reloads"]
    assert st2["channel_up"]
    assert served(plain, r, k) == 0, "the cached key is still served"
    # Later messages still apply.
    k2 = unique("after")
    pub.send(k2)
    wait(lambda: shim.is_hot(k2), what="a later message applied")
    pub.send(k, typ="cold")
    wait(lambda: not shim.is_hot(k), what="cold applied")


def test_bad_snapshot_entries_skipped(port):
    plain = redis.Redis(port=port)
    ch = unique("snap")
    good = event("good", 1)
    doc = {"v": 1, "seq": 3, "node": "t", "nodes": [{"node": "t", "seq": 3}],
           "keys": [event("bad1", 1, ttl_ms=10 ** 400), good, "junk"]}
    raw = json.dumps(doc).replace('"bad1", "qps": 1', '"bad1", "qps": 1e400')
    plain.set(ch + ":snapshot", raw)
    r = redis.Redis(port=port)
    shim = hotsniff_shim.install(r, channel=ch, channel_client=redis.Redis(port=port))
    try:
        assert shim.wait_synced(5), "a fresh shim syncs past bad entries"
        assert shim.is_hot("good") and not shim.is_hot("bad1")
        assert shim.stats()["bad_messages"]["out_of_range"] == 1
        assert shim.stats()["bad_messages"]["undecodable"] == 1
    finally:
        shim.close()


def test_forged_seq_jump_undone(live):
    plain, pub, r, shim, k = live
    forged = event("forged", pub.seq + (1 << 20) - 10)
    pub.raw(json.dumps(forged))
    # The real publisher carries on and rewrites its snapshot section (while
    # the jump is pending the snapshot keeps the hot set current).
    t0 = time.monotonic()
    while shim.stats()["bad_messages"]["unconfirmed_seq"] == 0:
        assert time.monotonic() - t0 < 8, "the jump is given up within ~5 s"
        pub.send(unique("real"))
        time.sleep(0.25)
    assert time.monotonic() - t0 >= 4.5
    # Now the node's real messages apply on their own (not via the snapshot).
    key = unique("msgonly")
    pub.send(key, snapshot=False)
    wait(lambda: shim.is_hot(key), 2, what="a real message applied after the forged jump")
    pub.send(k, typ="cold", snapshot=False)
    wait(lambda: not shim.is_hot(k), 2, what="real cold")
    assert shim.stats()["bad_messages"]["unconfirmed_seq"] == 1


def test_flapping_held(live):
    plain, pub, r, shim, k = live
    for i in range(9):  # false, true, ..., false: eight changes, the last a false
        pub.send(k, cacheable=(i % 2 == 1))
        time.sleep(0.02)
    time.sleep(0.1)
    # Verdict changes 1..4 applied, the later falses held: the key stays cacheable.
    assert shim.stats()["bad_messages"]["flapping"] >= 1
    assert shim.is_hot(k)
    r.get(k)
    r.get(k)
    assert served(plain, r, k) == 0


def test_signed_messages(port):
    plain = redis.Redis(port=port)
    ch = unique("sig")
    secret = b"s3cret"
    plain.set(ch + ":snapshot", sign(secret, json.dumps({"v": 1, "seq": 0, "node": "t", "nodes": [],
                                                          "keys": []}).encode()))
    r = redis.Redis(port=port)
    shim = hotsniff_shim.install(r, channel=ch, channel_client=redis.Redis(port=port), channel_secret=secret)
    open_shim = hotsniff_shim.install(redis.Redis(port=port), channel=ch, channel_client=redis.Redis(port=port))
    try:
        assert shim.wait_synced(5) and open_shim.wait_synced(5)
        plain.publish(ch, json.dumps(event("unsigned", 1)))
        plain.publish(ch, sign(b"wrong", json.dumps(event("badmac", 2)).encode()))
        plain.publish(ch, sign(secret, json.dumps(event("signed", 3)).encode()))
        wait(lambda: shim.is_hot("signed"), what="signed applied")
        assert not shim.is_hot("unsigned") and not shim.is_hot("badmac")
        assert shim.stats()["bad_messages"]["bad_signature"] == 2
        # Without a secret an envelope is unwrapped and applied.
        wait(lambda: open_shim.is_hot("signed"), what="unwrapped")
        # An unsigned snapshot is ignored with a secret (state kept).
        plain.set(ch + ":snapshot", json.dumps({"v": 1, "seq": 10, "node": "t", "nodes": [{"node": "t", "seq": 10}],
                                                "keys": []}))
        plain.publish(ch, sign(secret, json.dumps(event("gap", 9)).encode()))  # a gap: reload
        wait(lambda: shim.stats()["bad_messages"]["bad_signature"] >= 3, what="bad snapshot counted")
        assert shim.is_hot("signed") and shim.is_hot("gap")
    finally:
        shim.close()
        open_shim.close()


def test_restart_keeps_values(live):
    plain, pub, r, shim, k = live
    gone = unique("gone")
    plain.set(gone, "g")
    pub.send(gone)
    wait(lambda: shim.is_hot(gone), what="hot")
    r.get(gone)
    r.get(gone)
    assert served(plain, r, k) == 0
    # The daemon restarts: its seq jumps, its snapshot still lists k, not gone.
    pub.keys.pop((gone, "0", ""))
    pub.seq += 5000
    reloads = shim.stats()["channel_reloads"]
    pub.send(unique("new"))
    wait(lambda: shim.stats()["channel_reloads"] > reloads, what="reload")
    wait(lambda: not shim.is_hot(gone), what="absent key dropped")
    assert gone.encode() not in shim.cache.entries
    assert served(plain, r, k) == 0, "k kept its cached value"


def test_channel_outage_serves_on():
    data = Server()
    chan = Server()
    try:
        plain = redis.Redis(port=data.port)
        plain.set("k", "v1")
        pub = Publisher(redis.Redis(port=chan.port), "c")
        pub.write_snapshot()
        r = redis.Redis(port=data.port)
        shim = hotsniff_shim.install(r, channel="c", channel_client=redis.Redis(port=chan.port),
                                     local_ttl=0.05, retry_delay=0.1)
        try:
            assert shim.wait_synced(5)
            pub.send("k", ttl_ms=2500)
            wait(lambda: shim.is_hot("k"), what="hot")
            r.get("k")
            r.get("k")
            chan.stop()
            wait(lambda: not shim.stats()["channel_up"], what="channel down seen")
            t0 = time.monotonic()
            n = 0
            before = calls(plain, "get")
            while time.monotonic() - t0 < 3.5:  # past the entry's ttl
                assert r.get("k") in (b"v1", b"v2")
                n += 1
                if n == 100:
                    plain.set("k", "v2")
                    w = time.monotonic()
                if n > 100 and time.monotonic() - w > 0.15:
                    assert r.get("k") == b"v2", "refreshed from the cache server during the outage"
                time.sleep(0.001)
            got = calls(plain, "get") - before
            st = shim.stats()
            assert got < n / 5, "served locally through the outage (%d of %d reads reached Redis)" % (got, n)
            assert st["keys_without_channel"] == 1 and st["served_without_channel"] > 0
            # The channel returns: resynchronised from the snapshot.
            chan.start()
            pub.keys.clear()
            pub.write_snapshot()
            wait(lambda: shim.stats()["channel_up"], 10, what="channel up")
            wait(lambda: not shim.is_hot("k"), what="absent from the fresh snapshot: dropped")
        finally:
            shim.close()
    finally:
        data.close()
        chan.close()


@pytest.mark.parametrize("doc,secret,reason", [
    ('{"v":1,"keys":[{"v":1,"ttl_ms":', None, "undecodable"),
    ('{"v":1,"seq":1,"node":"t","nodes":[],"keys":[]}', b"s3cret", "bad_signature"),
    ("x" * ((64 << 20) + 1), None, "too_large"),
], ids=["not-json", "unsigned", "too-large"])
def test_rejected_snapshot_at_start(port, doc, secret, reason):
    """A snapshot document the shim rejects is one counted bad message:
    the shim is synced at once with what it had (nothing), the channel is
    up, its messages apply and hot keys are served."""
    plain = redis.Redis(port=port)
    k = unique("rs")
    plain.set(k, "v")
    ch = unique("rsch")
    plain.set(ch + ":snapshot", doc)
    r = redis.Redis(port=port)
    shim = hotsniff_shim.install(r, channel=ch, channel_client=redis.Redis(port=port), channel_secret=secret,
                                 local_ttl=60)
    try:
        assert shim.wait_synced(5), "a rejected snapshot document must not keep the shim unsynced"
        assert shim.stats()["bad_messages"][reason] >= 1
        msg = json.dumps(event(k, 1)).encode()
        plain.publish(ch, sign(secret, msg) if secret else msg)
        wait(lambda: shim.is_hot(k), what="hot after a rejected snapshot")
        r.get(k)
        r.get(k)
        assert served(plain, r, k) == 0
        time.sleep(0.6)  # the housekeeper has looked at the channel since
        assert shim.stats()["channel_up"] is True
    finally:
        shim.close()
        plain.delete(ch + ":snapshot")
