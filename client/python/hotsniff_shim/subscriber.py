"""Follows the hot-key channel: subscribe, load the snapshot, apply messages
checking each publisher's seq, reload the snapshot on a gap, a restart or a
reconnect. The procedure is docs/channel-protocol.md §5; the checks every
message passes and what a hostile publisher can do are its sections 2 and
9-11: bad messages are counted by reason and skipped, a seq jump the
snapshot never confirms is undone after 5 s, a key whose cacheable verdict
flaps is held cacheable, and nothing lapses while the channel is down."""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
from collections import deque
from typing import Callable, Deque, Dict, List, Optional, Tuple, Union

import redis

from .events import (BAD_REASONS, SOURCE_MANUAL, TYPE_COLD, TYPE_HOT, DecodeError,
                     Event, Snapshot, decode_message, decode_snapshot)

DEFAULT_CHANNEL = "hotsniff:hotkeys"
log = logging.getLogger("hotsniff_shim")


def snapshot_key(channel: str) -> str:
    return channel + ":snapshot"


def entry_id(e: Event) -> Tuple:
    # Manual entries are shared by every host: a remove from anywhere ends
    # an add from anywhere.
    node = "" if e.source == SOURCE_MANUAL else e.node
    return (node, e.proto, e.server, e.ns, e.prefix, e.key)


#: Entries the hot set holds at most (a forged flood of hot keys cannot
#: grow it further: new entries are refused and counted).
MAX_HOT_ENTRIES = 200_000


class HotSet:
    """The live entries, by entry id and by (proto, ns, key). Not locked.

    Entries with a TTL are also in a min-heap by expiry, so a sweep costs
    the entries due, not the size of the set: an idle shim holding 40,000
    hot keys does no per-key work. Refreshing or removing an entry leaves
    its old heap item behind (lazy deletion: skipped when popped, since
    the entry's expiry no longer matches); the heap is rebuilt from the
    entries when such items outnumber them, so it holds at most about
    twice the entries."""

    def __init__(self, max_entries: int = MAX_HOT_ENTRIES) -> None:
        self.m: Dict[Tuple, Tuple[Event, float]] = {}
        self.lookup: Dict[Tuple, set] = {}
        self.max_entries = max_entries
        self.refused = 0
        # (expiry, tie-breaker, entry id); ids never get compared.
        self.heap: List[Tuple[float, int, Tuple]] = []
        self._tie = itertools.count()
        #: Heap items looked at by expire (for tests of its cost).
        self.examined = 0

    def put(self, e: Event, now: float, exp: Optional[float] = None) -> None:
        """Adds or replaces e, lapsing at exp if given, else ttl after now."""
        i = entry_id(e)
        if i not in self.m:
            if len(self.m) >= self.max_entries:
                self.expire(now)
                if len(self.m) >= self.max_entries:
                    self.refused += 1
                    return
            self.lookup.setdefault((e.proto, e.ns, e.key), set()).add(i)
        # Expiry counts from arrival (local clock), never from e.ts.
        if exp is None:
            exp = now + e.ttl_ms / 1000.0 if e.ttl_ms > 0 else 0.0
        self.m[i] = (e, exp)
        if exp:
            if len(self.heap) >= 2 * len(self.m) + 1024:
                self._compact()
            heapq.heappush(self.heap, (exp, next(self._tie), i))

    def _compact(self) -> None:
        """The heap again from the live entries, without stale items."""
        self.heap = [(exp, next(self._tie), i) for i, (_, exp) in self.m.items() if exp]
        heapq.heapify(self.heap)

    def delete(self, i: Tuple) -> None:
        en = self.m.pop(i, None)
        if en is None:
            return
        e = en[0]
        lk = (e.proto, e.ns, e.key)
        ids = self.lookup.get(lk)
        if ids is not None:
            ids.discard(i)
            if not ids:
                del self.lookup[lk]

    def apply(self, e: Event, now: float) -> None:
        if e.type == TYPE_HOT:
            self.put(e, now)
        elif e.type == TYPE_COLD:
            self.delete(entry_id(e))

    def expire(self, now: float) -> None:
        """Drop the entries whose expiry passed; looks only at those."""
        h = self.heap
        while h and h[0][0] <= now:
            exp, _, i = heapq.heappop(h)
            self.examined += 1
            en = self.m.get(i)
            # A stale item: the entry was refreshed (another expiry, or
            # none) or removed since.
            if en is not None and en[1] == exp:
                self.delete(i)

    def hot_until(self, proto: str, ns: str, key: bytes, now: float,
                  match: Optional[Callable[[Event], bool]] = None) -> Tuple[float, bool, bool]:
        """(until, hot, cacheable) over the live entries match accepts;
        until 0.0 means until cold. The key may be cached when some live
        entry allows it (cacheable:false on every one: not cached)."""
        until, found, cacheable, forever = 0.0, False, False, False
        for i in self.lookup.get((proto, ns, key), ()):
            e, exp = self.m[i]
            if exp and now >= exp:
                continue
            if match is not None and not match(e):
                continue
            found = True
            if e.cacheable:
                cacheable = True
            if exp == 0.0:
                forever = True
            elif exp > until:
                until = exp
        return (0.0 if forever else until), found, cacheable

    def carry(self, old: "HotSet", sections: Dict[str, int], now: float, renew: bool) -> bool:
        """Copies the entries of old whose node has no section in sections
        (see Subscriber._reload); True when it copied any. They keep their
        expiry; one already past it (it lapsed while the channel was down,
        when nothing lapses) gets a fresh ttl from now when renew is set."""
        copied = False
        for i, (e, exp) in old.m.items():
            if e.node in sections:
                continue
            if exp and now >= exp:
                if not renew:
                    continue
                exp = now + e.ttl_ms / 1000.0
            self.put(e, now, exp)
            if i in self.m:
                copied = True
        return copied

    def live(self, now: float) -> List[Event]:
        return [e for e, exp in self.m.values() if not exp or now < exp]


class Handler:
    """Told about every change, on the subscriber thread, in order."""

    def on_snapshot(self, snap: Snapshot) -> None:  # pragma: no cover - interface
        pass

    def on_event(self, e: Event) -> None:  # pragma: no cover - interface
        pass

    def on_channel(self, up: bool) -> None:  # pragma: no cover - interface
        pass


#: The subscription is read with this timeout, so a stalled connection is
#: seen within STALL_AFTER.
POLL = 0.25
STALL_AFTER = 1.0
#: A seq jump the snapshot has not confirmed after this long is undone.
CONFIRM_AFTER = 5.0
#: Flapping: this many verdict changes of one key within FLAP_WINDOW hold it.
FLAP_CHANGES = 4
FLAP_WINDOW = 10.0
#: Keys whose verdict history is kept (a forged flood of keys cannot grow it).
FLAP_KEYS = 65536


class Flapping:
    """Per key, the recent changes of its cacheable verdict. A key whose
    verdict changed FLAP_CHANGES or more times in the last FLAP_WINDOW
    seconds is held cacheable: a further cacheable:false is not applied
    until FLAP_WINDOW passes with no change."""

    def __init__(self) -> None:
        self.keys: Dict[Tuple, Tuple[bool, Deque[float]]] = {}

    def filter(self, e: Event, now: float) -> bool:
        """False when e's cacheable:false must be held back (e is then
        rewritten cacheable)."""
        k = (e.node, e.proto, e.server, e.ns, e.key)
        st = self.keys.get(k)
        if st is None:
            if len(self.keys) >= FLAP_KEYS:
                self.keys.clear()
            self.keys[k] = (e.cacheable, deque(maxlen=FLAP_CHANGES))
            return True
        verdict, changes = st
        while changes and now - changes[0] > FLAP_WINDOW:
            changes.popleft()
        if e.cacheable == verdict:
            return True
        held = not e.cacheable and len(changes) >= FLAP_CHANGES
        changes.append(now)
        if held:
            e.cacheable = True
            return False
        self.keys[k] = (e.cacheable, changes)
        return True


class Subscriber:
    """Follows one channel on a background thread (start/close).

    ``secret`` (bytes or str): messages and the snapshot must come in the
    signed envelope with this HMAC key; without it an envelope is unwrapped
    unverified."""

    def __init__(self, rdb: "redis.Redis", channel: str = DEFAULT_CHANNEL,
                 handler: Optional[Handler] = None, log_size: int = 10000,
                 retry_delay: float = 0.25, max_retries: int = 20,
                 restart_window: int = 1 << 20, ping_interval: float = 15.0,
                 secret: Union[bytes, str, None] = None,
                 confirm_after: float = CONFIRM_AFTER,
                 logger: Optional[logging.Logger] = None) -> None:
        self.rdb = rdb
        self.channel = channel
        self.handler = handler or Handler()
        self.log_size = max(log_size, 1)
        self.retry_delay = retry_delay
        self.max_retries = max_retries  # kept for callers; the bound is confirm_after
        self.restart_window = restart_window
        self.ping_interval = ping_interval
        self.secret = secret.encode() if isinstance(secret, str) else secret
        self.confirm_after = confirm_after
        self.log = logger or log
        self.lock = threading.Lock()
        self.set = HotSet()
        self.missing_since = 0.0  # since when the snapshot document is missing while a hot set is held
        self.flap = Flapping()
        # Owned by the subscriber thread.
        self.last: Dict[str, int] = {}
        self.pending: Dict[str, int] = {}
        self.pending_since: Dict[str, float] = {}
        self.logbuf: List[Event] = []
        self.log_floor: Dict[str, int] = {}
        self.last_reload = 0.0
        self.retry_at = 0.0
        self.reload_failing = False
        self.reload_backoff = retry_delay
        self.last_expire = 0.0
        self.up = False  # the channel is followed (subscribed and snapshot read)
        self.last_progress = 0.0  # the last time the subscription answered
        self.synced = threading.Event()
        self.stopping = threading.Event()
        self.thread: Optional[threading.Thread] = None
        self.stats = dict(messages=0, stale=0, invalid=0, gaps=0, restarts=0,
                          reloads=0, reload_errors=0, reconnects=0, log_dropped=0, hot_set_full=0)
        self.bad = {r: 0 for r in BAD_REASONS}
        self._ps = None

    # -- queries, from any thread --------------------------------------------------
    def hot_until(self, proto, ns, key, match=None):
        with self.lock:
            return self.set.hot_until(proto, ns, key, time.monotonic(), match)

    def hot_set(self) -> List[Event]:
        with self.lock:
            return self.set.live(time.monotonic())

    def alive(self) -> bool:
        """The channel is followed and its connection answered within
        STALL_AFTER: a client library that retries a lost connection inside
        one call (redis-py 6 and later do) reports the loss only after its
        retries, so a stalled loop counts as down too."""
        return self.up and time.monotonic() - self.last_progress < STALL_AFTER

    def count_bad(self, reason: str, n: int = 1) -> None:
        self.bad[reason] = self.bad.get(reason, 0) + n
        self.stats["invalid"] += n

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, name="hotsniff-subscriber", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.stopping.set()
        ps = self._ps
        if ps is not None:
            try:
                ps.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
        if self.thread is not None and self.thread is not threading.current_thread():
            self.thread.join(timeout=5)

    def _set_up(self, up: bool) -> None:
        if up == self.up:
            return
        self.up = up
        try:
            self.handler.on_channel(up)
        except Exception as err:  # noqa: BLE001 - a handler bug must not stop the channel
            self.log.error("hot-key channel handler: %s", err)

    def _run(self) -> None:
        backoff, failing, subscribed = 0.1, False, False
        last_ping = time.monotonic()
        while not self.stopping.is_set():
            try:
                if self._ps is None:
                    self._ps = self.rdb.pubsub()
                    self._ps.subscribe(self.channel)
                timeout = POLL
                if self.retry_at:
                    d = self.retry_at - time.monotonic()
                    if d <= 0:
                        self._reload()
                        continue
                    timeout = min(timeout, d)
                msg = self._ps.get_message(timeout=timeout)
                now = time.monotonic()
                stalled = self.up and now - self.last_progress > STALL_AFTER + timeout
                self.last_progress = now
                if stalled:
                    # The library retried a lost connection inside the call:
                    # messages may have been missed.
                    self.log.info("hot-key subscription stalled; reloading snapshot")
                    self._reload()
                if msg is None:
                    self._expire()
                    if self._ps.subscribed and now - last_ping >= self.ping_interval:
                        last_ping = now
                        self._ps.ping()
                    continue
                backoff = 0.1
                kind = msg.get("type")
                if kind == "subscribe":
                    if failing or subscribed:
                        self.stats["reconnects"] += 1
                        self.log.info("hot-key subscription restored; reloading snapshot")
                    failing, subscribed = False, True
                    # Anything may have been missed while away.
                    self._reload()
                elif kind == "message":
                    failing = False
                    self._on_message(msg.get("data"))
            except Exception as err:  # noqa: BLE001 - any failure: reconnect
                if self.stopping.is_set():
                    return
                if not failing:
                    self.log.warning("hot-key subscription lost; reconnecting: %s", err)
                failing, subscribed = True, False
                self._set_up(False)
                try:
                    if self._ps is not None:
                        self._ps.close()
                except Exception:  # noqa: BLE001
                    pass
                self._ps = None
                self.stopping.wait(backoff)
                backoff = min(2 * backoff, 5.0)

    def _on_message(self, payload) -> None:
        self.stats["messages"] += 1
        try:
            events = decode_message(payload if payload is not None else b"", self.secret)
        except DecodeError as err:
            self.count_bad(err.reason)
            self.log.debug("bad hot-key message (%s): %s", err.reason, err)
            return
        for e in events:
            self._apply_one(e)

    def _apply_one(self, e: Event) -> None:
        now = time.monotonic()
        reload = False
        last = self.last.get(e.node)
        if last is None:
            self.last[e.node] = e.seq
        elif e.seq <= last:
            if last - e.seq <= self.restart_window:
                self.stats["stale"] += 1
                return
            self.stats["restarts"] += 1
            self.log.info("hot-key publisher %r restarted", e.node)
            self._forget(e.node)
            self.last[e.node] = e.seq
            reload = self._want(e.node, e.seq - 1)
        elif e.seq > last + 1:
            self.stats["gaps"] += 1
            self.last[e.node] = e.seq
            reload = self._want(e.node, e.seq - 1)
        else:
            self.last[e.node] = e.seq
        if e.type == TYPE_HOT and not self.flap.filter(e, now):
            self.count_bad("flapping")
        self._remember(e)
        with self.lock:
            n = self.set.refused
            self.set.apply(e, now)
            self.stats["hot_set_full"] += self.set.refused - n
            if self.up and now - self.last_expire > 1.0:
                self.set.expire(now)
                self.last_expire = now
        self.handler.on_event(e)
        if reload:
            self._reload()

    def _remember(self, e: Event) -> None:
        # Every message is kept, not only those after a gap: a reload caused
        # by one node must not roll another node's entries back.
        if len(self.logbuf) >= self.log_size:
            n = max(self.log_size // 4, 1)
            for old in self.logbuf[:n]:
                self.log_floor[old.node] = max(self.log_floor.get(old.node, 0), old.seq)
            del self.logbuf[:n]
            self.stats["log_dropped"] += n
        self.logbuf.append(e)

    def _forget(self, node: str) -> None:
        self.logbuf = [x for x in self.logbuf if x.node != node]
        self.log_floor.pop(node, None)

    def _want(self, node: str, seq: int) -> bool:
        if seq > self.pending.get(node, -1):
            if node not in self.pending:
                self.pending_since[node] = time.monotonic()
            self.pending[node] = seq
        if time.monotonic() - self.last_reload >= self.retry_delay:
            return True
        self.retry_at = self.last_reload + self.retry_delay
        return False

    def _expire(self) -> None:
        now = time.monotonic()
        if not self.up or now - self.last_expire < 1.0:
            return  # nothing lapses while the channel is down
        with self.lock:
            self.set.expire(now)
            self.last_expire = now

    def _missing_kept(self) -> bool:
        """No snapshot document where there was one: the channel's Redis
        restarted empty (or was flushed). Publishers rewrite their sections
        about every second, so this is not a fresh snapshot saying nothing is
        hot: the hot set is kept and the read retried. A document still
        missing after confirm_after is believed (no publisher is left), so
        held keys never outlive their publishers by more."""
        with self.lock:
            held = len(self.set.m) > 0
        if not held and not self.last:
            return False
        now = time.monotonic()
        if not self.missing_since:
            self.missing_since = now
            self.log.warning("hot-key snapshot missing (the channel's Redis restarted empty?); "
                             "keeping the hot set until it is rewritten")
        if now - self.missing_since >= self.confirm_after:
            return False
        self.reload_failing = False
        self.retry_at = now + self.retry_delay
        ps = self._ps
        if ps is not None and ps.subscribed:
            self.last_progress = now
            self._set_up(True)
        self.synced.set()
        return True

    def _reload(self) -> None:
        was_down = not self.up
        self.stats["reloads"] += 1
        self.last_reload = time.monotonic()
        self.retry_at = 0.0
        try:
            raw = self.rdb.get(snapshot_key(self.channel))
        except (redis.RedisError, OSError) as err:
            self.stats["reload_errors"] += 1
            if not self.reload_failing:
                self.log.warning("reload hot-key snapshot; retrying: %s", err)
            self.reload_failing = True
            self._set_up(False)
            self.retry_at = time.monotonic() + self.retry_delay
            return
        if raw is None and self._missing_kept():
            return
        self.missing_since = 0.0
        try:
            snap = decode_snapshot(raw, self.secret)
        except DecodeError as err:
            # The state from before is kept; retried with backoff.
            self.stats["reload_errors"] += 1
            self.count_bad(err.reason)
            self.log.warning("bad hot-key snapshot (%s); keeping the current hot set: %s", err.reason, err)
            self.retry_at = time.monotonic() + self.reload_backoff
            self.reload_backoff = min(2 * self.reload_backoff, 5.0)
            # The channel itself works: follow its messages meanwhile, and
            # do not keep the application waiting for a first sync that a
            # broken or hostile document would never give (synced with
            # what it had: nothing at start).
            ps = self._ps
            if ps is not None and ps.subscribed:
                self.last_progress = time.monotonic()
                self._set_up(True)
            self.synced.set()
            return
        self.reload_backoff = self.retry_delay
        for reason, n in snap.bad.items():
            self.count_bad(reason, n)
        self.reload_failing = False
        now = time.monotonic()
        sec = snap.nodes
        for n, q in sec.items():
            if n not in self.last or q > self.last[n]:
                self.last[n] = q
            f = self.log_floor.get(n, 0)
            if f > q and n not in self.pending:
                # Messages between the section and the log are gone.
                self.pending[n] = f
                self.pending_since[n] = now
        for n in list(self.pending):
            q = sec.get(n)
            if q is None or q >= self.pending[n]:
                del self.pending[n]
                self.pending_since.pop(n, None)
            elif now - self.pending_since.get(n, now) >= self.confirm_after:
                # A jump the snapshot never confirmed: forged, or a section
                # that stopped moving. The node's numbering goes back to
                # the snapshot's, so its real messages apply again.
                self.log.warning("hot-key publisher %r: seq %d never confirmed by the snapshot (at %d); "
                                 "following the snapshot", n, self.pending[n], q)
                self.last[n] = q
                self.logbuf = [x for x in self.logbuf if x.node != n or x.seq <= q]
                self.log_floor.pop(n, None)
                del self.pending[n]
                self.pending_since.pop(n, None)
                self.count_bad("unconfirmed_seq")
        hs = HotSet()
        for e in snap.keys:
            hs.put(e, now)
        self.stats["hot_set_full"] += hs.refused
        # A node with no section in this snapshot neither confirms nor
        # denies its keys: typically the channel Redis restarted empty and
        # the node's daemon has not rewritten its section yet. Its entries
        # are carried over (they lapse by their own ttl, which restarts for
        # those served through a channel outage), and the snapshot is read
        # again every second until the section is back or they lapse.
        # A missing document (believed after confirm_after, _missing_kept)
        # carries nothing: no publisher is left to confirm the keys.
        carried = False
        if raw is not None:
            with self.lock:
                carried = hs.carry(self.set, sec, now, was_down)
        for e in self.logbuf:
            q = sec.get(e.node)
            if q is not None and e.seq > q:
                hs.apply(e, now)
        with self.lock:
            self.set = hs
            self.last_expire = now
        self.last_progress = time.monotonic()
        if self.pending:
            self.retry_at = time.monotonic() + self.retry_delay
        elif carried:
            self.retry_at = time.monotonic() + max(self.retry_delay, 1.0)
        self._set_up(True)
        self.handler.on_snapshot(snap)
        self.synced.set()
