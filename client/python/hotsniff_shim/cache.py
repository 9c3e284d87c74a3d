"""The local cache, apart from any Redis library: which keys are hot for
this client, their cached values, admission, single-caller refresh,
invalidation, bounds (entries, bytes, a value-size limit) and the verdict
on hashes too big to cache. The adapters (sync.py, asyncio_adapter.py,
cluster.py, asyncio_cluster.py) do the I/O and ask this object what to do
with each read.

It behaves as the Go shim does (docs/client-shim.md): only keys the channel
marks hot for this client's servers and DB are cached, each on its second
read; a value is served for ``local_ttl`` from when the read that fetched it
was sent, then exactly one caller refreshes it while the others keep the
current value (never past ``local_ttl + stale_grace``); invalidate, cold,
a key's absence from a reloaded snapshot and any write through the client
drop it. After a drop there is no value to keep: a lone read (a GET, a
hash read: ``acquire_wait``) waits for the one refresh in flight, at most
``stale_grace``, instead of going to Redis itself. While the channel is down nothing lapses (the values are still
refreshed every ``local_ttl``, so the staleness bound holds).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
import random
import threading
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .events import TYPE_COLD, TYPE_HOT, TYPE_INVALIDATE, Event
from .subscriber import Handler, Subscriber

KIND_STRING = 1
KIND_HASH = 2

ACT_PASS, ACT_HIT, ACT_FETCH = 0, 1, 2

INVAL_REASONS = ("write", "event", "tracking", "cold", "snapshot", "flush", "moved")
EVICT_REASONS = ("capacity", "bytes", "not_hot", "idle", "mode_end")

#: Entries whose value expired this long ago leave the cache.
IDLE_AFTER = 10.0
#: A key found too big to cache (a hash over max_hash_fields, a value over
#: max_value_bytes) is passed through this long without being sized or
#: fetched again, across cold/hot and re-admission.
TOO_BIG_FOR = 60.0
#: Bytes counted per entry on top of its key and value.
ENTRY_OVERHEAD = 200


class Value:
    """One cached reply; never modified once stored, so readers share it."""

    __slots__ = ("expires", "data", "hidx", "size", "origin")

    def __init__(self, data: Any, hidx: Optional[Dict[bytes, Any]] = None, size: int = 0) -> None:
        self.expires = 0.0
        self.data = data  # GET: bytes/str or None; hash: the dict HGETALL returned
        self.hidx = hidx  # hash: field bytes -> value
        self.size = size
        # Where it was read, for an adapter whose keys move between servers
        # (a cluster: the key's slot and the node read); None elsewhere.
        self.origin: Any = None


class Entry:
    __slots__ = ("key", "kind", "hot_until", "val", "refreshing", "gen",
                 "sized", "hits", "report_at", "size", "wake", "wake_for")

    def __init__(self, key: bytes, kind: int, hot_until: float, now: float) -> None:
        self.key = key
        self.kind = kind
        self.hot_until = hot_until  # 0.0: until cold
        self.val: Optional[Value] = None
        self.refreshing = 0.0  # start of the one fetch in flight
        # Set when the fetch whose token is wake_for ends: made by the first
        # read that waits for it (acquire_wait), a threading.Event or an
        # asyncio.Event (its waiter's kind), so a refresh nobody waits for
        # allocates nothing.
        self.wake: Any = None
        self.wake_for = 0.0
        self.gen = 0  # moves on every invalidation
        self.sized = False  # a hash's HLEN was checked before its first fetch
        self.hits = 0  # served locally since the last absorbed report
        self.report_at = now
        self.size = ENTRY_OVERHEAD + len(key)


class Ticket:
    __slots__ = ("e", "gen", "token", "origin")

    def __init__(self, e: Entry, gen: int, token: float) -> None:
        self.e, self.gen, self.token = e, gen, token
        self.origin: Any = None  # set by the adapter that made the read


def _size(data: Any) -> int:
    if data is None:
        return 0
    if isinstance(data, (bytes, str, bytearray)):
        return len(data)
    if isinstance(data, dict):
        return sum(_size(k) + _size(v) + 16 for k, v in data.items())
    return 16


class Cache(Handler):
    """Thread-safe; every method takes the lock for a few dict operations
    at most, never across I/O, so asyncio callers may use it too."""

    def __init__(self, ns: str, matches: Callable[[Event], bool], local_ttl: float = 0.05,
                 stale_grace: float = 0.1, max_entries: int = 10000, max_bytes: int = 64 << 20,
                 max_value_bytes: int = 1 << 20, max_hash_fields: int = 1000,
                 hot_mode_linger: float = 120.0, logger: Optional[logging.Logger] = None) -> None:
        self.ns = ns
        self.matches = matches
        self.log = logger or logging.getLogger("hotsniff_shim")
        self.local_ttl = local_ttl if local_ttl > 0 else 0.05
        self.stale_grace = stale_grace if stale_grace > 0 else 0.1
        self.max_entries = max_entries if max_entries > 0 else 10000
        self.max_bytes = max_bytes if max_bytes > 0 else 64 << 20
        self.max_value_bytes = max_value_bytes if max_value_bytes > 0 else 1 << 20
        self.max_hash_fields = max_hash_fields if max_hash_fields > 0 else 1000
        self.linger = hot_mode_linger if hot_mode_linger > 0 else 120.0
        self.sub: Optional[Subscriber] = None
        # origin_ok(value.origin) tells whether a value may still be served
        # from where it was read (a cluster adapter: the node it was read on
        # still holds the key's slot). None: always.
        self.origin_ok: Optional[Callable[[Any], bool]] = None

        self.lock = threading.Lock()
        self.hot: Dict[bytes, float] = {}  # hot (and cacheable) keys -> until (0: until cold)
        # The keys of hot with an until, in a min-heap by until, so that
        # housekeeping looks only at the keys due (stale items, of a key
        # whose until changed or that left, are skipped); and how many keys
        # are hot until cold. Idle, a large hot set costs nothing per key.
        self.hot_heap: List[Tuple[float, int, bytes]] = []
        self.hot_forever = 0
        self._tie = itertools.count()
        #: Heap items housekeeping looked at (for tests of its cost).
        self.hot_examined = 0
        self.entries: Dict[bytes, Entry] = {}
        self.seen: Dict[bytes, None] = {}  # hot keys read once, not yet admitted
        self.too_big: Dict[bytes, float] = {}  # key -> until when it is passed through
        self.bytes = 0
        self.active = False
        self.held = False  # the channel is down: nothing lapses
        self.last_hot = 0.0
        self.closed = False
        # wait_hits: of hits, reads that waited for another caller's fetch
        # of the key (acquire_wait).
        self.m = dict(hits=0, stale_hits=0, wait_hits=0, misses=0, admissions=0, refreshes=0,
                      fetch_errors=0, absorbed_reports=0, absorbed_hits=0, uncacheable=0,
                      too_large_values=0, served_without_channel=0, namespace_passes=0)
        self.invalidations = {r: 0 for r in INVAL_REASONS}
        self.evictions = {r: 0 for r in EVICT_REASONS}

    # -- subscriber callbacks (subscriber thread) --------------------------------------
    def on_event(self, e: Event) -> None:
        if not self.matches(e):
            return
        if e.type in (TYPE_HOT, TYPE_COLD):
            # Ask the hot set rather than trust this one message: another
            # node may still report the key hot after this node's cold.
            until, hot, cacheable = self.sub.hot_until("redis", self.ns, e.key, self.matches)
            if e.type == TYPE_HOT:
                self.last_hot = time.monotonic()
            self.set_hot(e.key, until, hot, cacheable)
        elif e.type == TYPE_INVALIDATE:
            self.invalidate(e.key, "event")

    def on_snapshot(self, snap: Any) -> None:
        self.rebuild()

    def rebuild(self, touch: bool = True) -> None:
        """The hot map again from the subscriber's hot set (a snapshot, or
        the topology changed): keys no longer in it are dropped, the others
        keep their values (a node restart never empties the cache)."""
        hot: Dict[bytes, float] = {}
        for e in self.sub.hot_set():
            if self.matches(e):
                until, ok, cacheable = self.sub.hot_until("redis", self.ns, e.key, self.matches)
                if ok and cacheable:
                    hot[e.key] = until
        now = time.monotonic()
        with self.lock:
            if hot and touch:
                self.last_hot = now
            self.hot = hot
            self.hot_forever = sum(1 for u in hot.values() if u == 0.0)
            self.hot_heap = [(u, next(self._tie), k) for k, u in hot.items() if u]
            heapq.heapify(self.hot_heap)
            for k in list(self.entries):
                if k in hot:
                    self.entries[k].hot_until = hot[k]
                else:
                    self._drop_locked(k, "not_hot")
                    self.invalidations["snapshot"] += 1
        self.update_mode(now)

    def on_channel(self, up: bool) -> None:
        with self.lock:
            self.held = not up
        if not up:
            self.log.warning("hot-key channel down; serving the %d cached keys on, refreshed from the cache server",
                             len(self.entries))

    def set_hot(self, key: bytes, until: float, hot: bool, cacheable: bool) -> None:
        with self.lock:
            if hot and cacheable:
                self._hot_put_locked(key, until)
                en = self.entries.get(key)
                if en is not None:
                    en.hot_until = until
            else:
                if self.hot.pop(key, None) == 0.0:
                    self.hot_forever -= 1
                self.seen.pop(key, None)
                if key in self.entries:
                    self._drop_locked(key, "not_hot")
                    self.invalidations["cold"] += 1
        self.update_mode(time.monotonic())

    def _hot_put_locked(self, key: bytes, until: float) -> None:
        old = self.hot.get(key)
        if old == until:
            return
        if old == 0.0:
            self.hot_forever -= 1
        self.hot[key] = until
        if until == 0.0:
            self.hot_forever += 1
            return
        h = self.hot_heap
        if len(h) >= 2 * len(self.hot) + 1024:
            # Mostly stale items: rebuilt from hot (amortised over as many puts).
            h = self.hot_heap = [(u, next(self._tie), k) for k, u in self.hot.items() if u]
            heapq.heapify(h)
        heapq.heappush(h, (until, next(self._tie), key))

    def update_mode(self, now: float) -> None:
        if self.closed:
            return
        with self.lock:
            forever = self.hot_forever > 0
            on = bool(self.hot) and (forever or self.held or now - self.last_hot < self.linger)
            was, self.active = self.active, on
            if was and not on:
                self.log.info("hot-running mode ended")
                self.evictions["mode_end"] += len(self.entries)
                for en in self.entries.values():
                    en.gen += 1
                self.entries.clear()
                self.seen.clear()
                self.bytes = 0

    def housekeep(self, now: float) -> None:
        with self.lock:
            if not self.held:
                h = self.hot_heap
                while h and h[0][0] <= now:
                    u, _, k = heapq.heappop(h)
                    self.hot_examined += 1
                    if self.hot.get(k) != u:
                        continue  # stale: its until changed, or it left
                    del self.hot[k]
                    self.seen.pop(k, None)
                    if k in self.entries:
                        self._drop_locked(k, "not_hot")
            for k, en in list(self.entries.items()):
                v = en.val
                if v is not None and now - v.expires > IDLE_AFTER:
                    self._drop_locked(k, "idle")
            for k, u in list(self.too_big.items()):
                if now >= u:
                    del self.too_big[k]
        self.update_mode(now)

    # -- reads -------------------------------------------------------------------------
    def acquire(self, key: bytes, kind: int, now: float) -> Tuple[int, Optional[Value], Optional[Ticket]]:
        """How a read of key is served: (ACT_HIT, value, None), (ACT_FETCH,
        None, ticket): go to Redis and store the reply, or (ACT_PASS, None,
        None): go to Redis, store nothing."""
        act, v, t, _ = self._decide(key, kind, now, None, 0.0)
        return act, v, t

    def acquire_wait(self, key: bytes, kind: int, now: float) -> Tuple[int, Optional[Value], Optional[Ticket]]:
        """acquire for a read of one key alone (a GET, a hash read), on a
        thread. Where acquire would send it to Redis because another
        caller's fetch of the key is in flight and there is no value to
        serve (an invalidation dropped it), it waits for that fetch, at most
        until stale_grace after it began and stale_grace in all, and then
        serves what it stored: after a write to a hot key its readers wait
        about one round trip instead of all going to Redis at once. The
        fetch was sent after this read's key was dropped and before this
        read began, as any refresh is: the staleness bound is the same.
        Reads of several keys (MGET, pipelines) never wait: they may hold
        that very fetch."""
        deadline = now + self.stale_grace
        waited = False
        while True:
            act, v, t, busy = self._decide(key, kind, now, threading.Event, deadline)
            if busy is None:
                self._count_wait(waited, act)
                return act, v, t
            busy[0].wait(busy[1])
            waited = True
            now = time.monotonic()

    async def acquire_wait_async(self, key: bytes, kind: int,
                                 now: float) -> Tuple[int, Optional[Value], Optional[Ticket]]:
        """acquire_wait on an event loop (the asyncio adapter, whose fetches
        end on the same loop)."""
        deadline = now + self.stale_grace
        waited = False
        while True:
            act, v, t, busy = self._decide(key, kind, now, asyncio.Event, deadline)
            if busy is None:
                self._count_wait(waited, act)
                return act, v, t
            try:
                await asyncio.wait_for(busy[0].wait(), busy[1])
            except asyncio.TimeoutError:
                pass
            waited = True
            now = time.monotonic()

    def _count_wait(self, waited: bool, act: int) -> None:
        """Counts a read served after waiting for another caller's fetch."""
        if waited and act == ACT_HIT:
            with self.lock:
                self.m["wait_hits"] += 1

    def _decide(self, key: bytes, kind: int, now: float, make_wake: Optional[Callable[[], Any]],
                deadline: float) -> Tuple[int, Optional[Value], Optional[Ticket], Optional[Tuple[Any, float]]]:
        """acquire; with make_wake, a read that would go to Redis only
        because another caller's fetch is in flight with no value to serve
        gets (wake, seconds) to wait for that fetch instead, until deadline
        at most (counting nothing: it decides again after the wait)."""
        with self.lock:
            en = self.entries.get(key)
            if en is None:
                act, v, t = self._admit_locked(key, kind, now)
                return act, v, t, None
            if en.kind != kind:
                self.m["misses"] += 1
                return ACT_PASS, None, None, None
            if en.hot_until and now >= en.hot_until and not self.held:
                self._drop_locked(key, "not_hot")
                self.m["misses"] += 1
                return ACT_PASS, None, None, None
            v = self._val_locked(en)
            if v is not None and now < v.expires:
                self._hit_locked(en, "hits")
                return ACT_HIT, v, None, None
            # Expired or invalidated: exactly one caller refreshes; a refresh
            # hanging past stale_grace gives its token to the next caller.
            if en.refreshing == 0.0 or now - en.refreshing > self.stale_grace:
                en.refreshing = now
                self.m["misses"] += 1
                self.m["refreshes"] += 1
                return ACT_FETCH, None, Ticket(en, en.gen, now), None
            if v is not None and now < v.expires + self.stale_grace:
                self._hit_locked(en, "stale_hits")
                return ACT_HIT, v, None, None
            if make_wake is not None:
                wait = min(deadline, en.refreshing + self.stale_grace) - now
                if wait > 0:
                    if en.wake is None or en.wake_for != en.refreshing:
                        en.wake, en.wake_for = make_wake(), en.refreshing
                    return ACT_PASS, None, None, (en.wake, wait)
            self.m["misses"] += 1
            return ACT_PASS, None, None, None

    def _hit_locked(self, en: Entry, counter: str) -> None:
        self.m[counter] += 1
        en.hits += 1
        if self.held:
            self.m["served_without_channel"] += 1

    def _admit_locked(self, key: bytes, kind: int, now: float):
        until = self.hot.get(key)
        if until is None or (until and now >= until and not self.held):
            return ACT_PASS, None, None
        self.m["misses"] += 1
        tb = self.too_big.get(key)
        if tb is not None and now < tb:
            return ACT_PASS, None, None
        if key not in self.seen:
            if len(self.seen) >= max(4 * self.max_entries, 1024):
                # A doorkeeper, not a history: start over when full.
                self.seen.clear()
            self.seen[key] = None
            return ACT_PASS, None, None
        del self.seen[key]
        if len(self.entries) >= self.max_entries:
            self._evict_one_locked(now, "capacity")
        en = Entry(key, kind, until, now)
        en.refreshing = now
        self.entries[key] = en
        self.bytes += en.size
        self.m["admissions"] += 1
        self.m["refreshes"] += 1
        return ACT_FETCH, None, Ticket(en, en.gen, now)

    def _evict_one_locked(self, now: float, reason: str, keep: Optional[bytes] = None) -> bool:
        victim = None
        keys = list(self.entries)
        for k in random.sample(keys, min(8, len(keys))):
            if k == keep:
                continue
            en = self.entries[k]
            if victim is None:
                victim = k
            v = en.val
            if v is None or now > v.expires + self.stale_grace:
                victim = k
                break
        if victim is None:
            return False
        self._drop_locked(victim, reason)
        return True

    def store(self, t: Ticket, v: Optional[Value]) -> None:
        en = t.e
        with self.lock:
            if v is not None and en.gen == t.gen and self.entries.get(en.key) is en:
                # Expiry counts from when the read was sent: what bounds
                # staleness is the age of the read at the server.
                v.expires = t.token + self.local_ttl
                v.origin = t.origin
                old = en.val.size if en.val is not None else 0
                en.val = v
                en.size += v.size - old
                self.bytes += v.size - old
                now = time.monotonic()
                while self.bytes > self.max_bytes and len(self.entries) > 1:
                    if not self._evict_one_locked(now, "bytes", keep=en.key):
                        break
            w = self._end_locked(t)
        if w is not None:
            w.set()

    def store_value(self, t: Ticket, data: Any) -> None:
        """A string reply (GET, an MGET element, a pipelined GET)."""
        n = _size(data)
        if n > self.max_value_bytes:
            self.too_big_verdict(t, "too_large_values")
            return
        self.store(t, Value(data, size=n))

    def too_big_verdict(self, t: Ticket, counter: str) -> None:
        """The key is too big to cache: dropped, and passed through without
        being sized or fetched again for TOO_BIG_FOR."""
        with self.lock:
            self.m[counter] += 1
            if len(self.too_big) >= max(4 * self.max_entries, 1024):
                self.too_big.clear()
            self.too_big[t.e.key] = time.monotonic() + TOO_BIG_FOR
            if self.entries.get(t.e.key) is t.e:
                self._drop_locked(t.e.key, None)
            w = self._end_locked(t)
        if w is not None:
            w.set()

    def release(self, t: Optional[Ticket]) -> None:
        if t is None:
            return
        with self.lock:
            w = self._end_locked(t)
        if w is not None:
            w.set()

    def _end_locked(self, t: Ticket) -> Any:
        """t's fetch is over (stored or given up): its token goes back, and
        the reads waiting for it are to be woken (set the returned wake,
        outside the lock: an asyncio.Event wakes its loop's waiters)."""
        en = t.e
        if en.refreshing == t.token:
            en.refreshing = 0.0
        w = en.wake
        if w is None or en.wake_for != t.token:
            return None
        en.wake = None
        return w

    def fetch_failed(self, t: Optional[Ticket]) -> None:
        if t is None:
            return
        self.m["fetch_errors"] += 1
        self.release(t)

    def peek(self, key: bytes, kind: int, now: float) -> Optional[Value]:
        """key's fresh value of kind, counted as a local hit; None (counting
        nothing) when there is none. Pipelines serve only fresh values of
        hashes and MGETs: they cannot fetch on the side."""
        with self.lock:
            en = self._fresh_locked(key, kind, now)
            if en is None:
                return None
            self._hit_locked(en, "hits")
            return en.val

    def fresh_all(self, keys: List[bytes], now: float) -> Optional[List[Any]]:
        """Every key's fresh string value (counted as hits), or None."""
        with self.lock:
            ents = [self._fresh_locked(k, KIND_STRING, now) for k in keys]
            if any(en is None for en in ents):
                return None
            for en in ents:
                self._hit_locked(en, "hits")
            return [en.val.data for en in ents]

    def _fresh_locked(self, key: bytes, kind: int, now: float) -> Optional[Entry]:
        en = self.entries.get(key)
        if en is None or en.kind != kind:
            return None
        if en.hot_until and now >= en.hot_until and not self.held:
            return None
        v = self._val_locked(en)
        if v is None or now >= v.expires:
            return None
        return en

    def _val_locked(self, en: Entry) -> Optional[Value]:
        """en's value, unless it was read where the key no longer lives (its
        cluster slot moved to another node): then it is dropped, so the next
        read fetches it once from the key's new home, and never served
        stale."""
        v = en.val
        if v is None or v.origin is None or self.origin_ok is None or self.origin_ok(v.origin):
            return v
        self._invalidate_locked(en, "moved")
        return None

    # -- invalidation ------------------------------------------------------------------
    def invalidate(self, key: bytes, reason: str) -> None:
        with self.lock:
            en = self.entries.get(key)
            if en is not None:
                self._invalidate_locked(en, reason)

    def _invalidate_locked(self, en: Entry, reason: str) -> None:
        en.gen += 1
        if en.val is not None:
            self.bytes -= en.val.size
            en.size -= en.val.size
        en.val = None
        self.invalidations[reason] += 1

    def invalidate_all(self, reason: str) -> None:
        with self.lock:
            for en in self.entries.values():
                en.gen += 1
                if en.val is not None:
                    self.bytes -= en.val.size
                    en.size -= en.val.size
                en.val = None
            self.invalidations[reason] += 1

    def _drop_locked(self, key: bytes, reason: Optional[str]) -> None:
        en = self.entries.pop(key, None)
        if en is not None:
            en.gen += 1
            en.val = None
            self.bytes -= en.size
            if reason is not None:
                self.evictions[reason] += 1

    # -- the absorbed-demand report ----------------------------------------------------
    def report_msg(self, t: Ticket, now: float) -> Optional[Tuple[bytes, int]]:
        """The ECHO payload to send right after this refresh read, if any."""
        with self.lock:
            hits = t.e.hits
            if hits <= 0:
                return None
            window = max(1, int((now - t.e.report_at) * 1000))
        return b"hotsniff:absorbed:1 %d %d " % (hits, window) + t.e.key, hits

    def reported(self, t: Ticket, hits: int, now: float) -> None:
        with self.lock:
            t.e.hits -= hits
            t.e.report_at = now
            self.m["absorbed_reports"] += 1
            self.m["absorbed_hits"] += hits

    # -- introspection -----------------------------------------------------------------
    def stats(self) -> Dict[str, Any]:
        with self.lock:
            d = dict(self.m)
            d.update(entries=len(self.entries), bytes=self.bytes, hot_keys=len(self.hot),
                     hot_mode=self.active, invalidations=dict(self.invalidations),
                     evictions=dict(self.evictions), channel_up=not self.held,
                     keys_without_channel=len(self.entries) if self.held else 0)
        return d

    def is_hot(self, key: bytes) -> bool:
        with self.lock:
            u = self.hot.get(key)
        return u is not None and (u == 0.0 or self.held or time.monotonic() < u)

    def close(self) -> None:
        self.closed = True
        with self.lock:
            self.active = False
            self.entries.clear()
            self.seen.clear()
            self.bytes = 0
