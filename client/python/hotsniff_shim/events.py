"""Channel messages: single v1 events, the v2 batch envelope, the snapshot
document and the optional signed envelope.

The wire form and the checks are docs/channel-protocol.md ("Bad messages"
and "Trust model"): the length is checked before any parsing, then the
signature (when a secret is configured), then the JSON and the ranges. A
message that fails is one :class:`DecodeError` carrying the reason it is
counted under. Keys are raw bytes: ``key`` when they are UTF-8, else
``key_b64``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import math
from typing import Any, Dict, List, Optional

TYPE_HOT = "hot"
TYPE_COLD = "cold"
TYPE_INVALIDATE = "invalidate"
SOURCE_MANUAL = "manual"

#: A batch with more events than this is rejected whole rather than applied.
MAX_BATCH_EVENTS = 4096
#: A channel message longer than this is rejected before parsing.
MAX_MESSAGE_BYTES = 1 << 20
#: A snapshot document longer than this is rejected before parsing.
MAX_SNAPSHOT_BYTES = 64 << 20
#: Keys longer than this are out of range.
MAX_KEY_BYTES = 1 << 20
MAX_SEQ = 1 << 53
MAX_TTL_MS = 86_400_000

#: Reasons a message is counted as bad (bad_messages{reason}).
BAD_REASONS = ("too_large", "out_of_range", "undecodable", "bad_signature",
               "unconfirmed_seq", "flapping")

_RATE_FIELDS = ("qps", "absorbed_qps", "write_qps", "bytes_ps", "value_bytes")


class DecodeError(ValueError):
    """A channel message or snapshot that cannot be used, with the reason
    it is counted under."""

    def __init__(self, msg: str, reason: str = "undecodable") -> None:
        super().__init__(msg)
        self.reason = reason


class Event:
    """One hot-key message. Unknown fields are ignored."""

    __slots__ = ("v", "seq", "type", "proto", "server", "ns", "key", "prefix",
                 "ttl_ms", "source", "node", "cacheable")

    def __init__(self) -> None:
        self.v = 1
        self.seq = 0
        self.type = ""
        self.proto = ""
        self.server = ""
        self.ns = ""
        self.key = b""
        self.prefix = False
        self.ttl_ms = 0
        self.source = ""
        self.node = ""
        self.cacheable = True

    @classmethod
    def from_obj(cls, o: Any) -> "Event":
        if not isinstance(o, dict):
            raise DecodeError("event is not a JSON object")
        e = cls()
        if "v" in o:
            e.v = _version(o["v"])
        e.seq = _int(o, "seq", MAX_SEQ - 1)
        e.type = _str(o, "type")
        e.proto = _str(o, "proto")
        e.server = _str(o, "server")
        e.ns = _str(o, "ns")
        e.source = _str(o, "source")
        e.node = _str(o, "node")
        e.prefix = o.get("prefix") is True
        e.ttl_ms = _int(o, "ttl_ms", MAX_TTL_MS)
        for f in _RATE_FIELDS:
            x = o.get(f)
            if x is not None and not _finite_nonneg(x):
                raise DecodeError(f"{f} is not a finite non-negative number", "out_of_range")
        s = o.get("sample")
        if s is not None and (not _finite_nonneg(s) or not 0 < s <= 1):
            raise DecodeError("sample is not in (0, 1]", "out_of_range")
        # Absent means true; only an explicit false disables caching.
        e.cacheable = o.get("cacheable") is not False
        k = o.get("key")
        if k is not None:
            if not isinstance(k, str):
                raise DecodeError("key is not a string")
            if len(k) > MAX_KEY_BYTES:
                raise DecodeError("key over 1 MiB", "out_of_range")
            try:
                e.key = k.encode("utf-8", "surrogatepass")
            except UnicodeEncodeError as err:
                raise DecodeError(f"decode key: {err}") from err
        elif o.get("key_b64") is not None:
            kb = o["key_b64"]
            if not isinstance(kb, str):
                raise DecodeError("key_b64 is not a string")
            if len(kb) > (MAX_KEY_BYTES * 4) // 3 + 4:
                raise DecodeError("key over 1 MiB", "out_of_range")
            try:
                e.key = base64.b64decode(kb, validate=True)
            except (binascii.Error, ValueError) as err:
                raise DecodeError(f"decode key_b64: {err}") from err
        if len(e.key) > MAX_KEY_BYTES:
            raise DecodeError("key over 1 MiB", "out_of_range")
        return e


def _version(v: Any) -> int:
    if type(v) is not int or v not in (1, 2):
        raise DecodeError("v is not 1 or 2", "out_of_range")
    return v


def _int(o: dict, name: str, hi: int) -> int:
    """An integer field in [0, hi]; absent is 0. A float, even a whole one,
    is out of range: the publisher writes integers, and 1e400 or Infinity
    parse as floats."""
    v = o.get(name, 0)
    if v is None:
        return 0
    if isinstance(v, bool):
        raise DecodeError(f"{name} is not an integer")
    if isinstance(v, float):
        raise DecodeError(f"{name} is not an integer in range", "out_of_range")
    if not isinstance(v, int):
        raise DecodeError(f"{name} is not an integer")
    if v < 0 or v > hi:
        raise DecodeError(f"{name} out of range", "out_of_range")
    return v


def _finite_nonneg(x: Any) -> bool:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    if isinstance(x, float):
        return math.isfinite(x) and x >= 0
    return 0 <= x < 1 << 1024


def _str(o: dict, name: str) -> str:
    v = o.get(name, "")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise DecodeError(f"{name} is not a string")
    return v


_SIG_PREFIX = b'{"sig":"'
_SIG_MID = b'","body":'
_HEX = frozenset(b"0123456789abcdef")


def unwrap(payload: bytes, secret: Optional[bytes]) -> bytes:
    """The body of a signed envelope, checked by position (no parsing) and,
    with a secret, by its MAC in constant time. Without a secret an
    envelope is unwrapped unverified and anything else passes as it is."""
    signed = (len(payload) >= 83 and payload.startswith(_SIG_PREFIX)
              and payload[72:81] == _SIG_MID and payload.endswith(b"}"))
    if not signed:
        if secret is not None:
            raise DecodeError("unsigned message", "bad_signature")
        return payload
    body = payload[81:-1]
    if secret is not None:
        mac = payload[8:72]
        want = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
        if not all(c in _HEX for c in mac) or not hmac.compare_digest(mac, want):
            raise DecodeError("wrong signature", "bad_signature")
    return body


def _raw(payload: Any) -> bytes:
    if isinstance(payload, str):
        return payload.encode("utf-8", "surrogatepass")
    return bytes(payload)


def _loads(b: bytes, what: str) -> Any:
    try:
        return json.loads(b.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        # ValueError includes Python's limit on integer digits.
        raise DecodeError(f"decode {what}: {err}") from err


def decode_message(payload: Any, secret: Optional[bytes] = None) -> List[Event]:
    """Decode one channel message: a v1 event or a v2 batch of events."""
    b = _raw(payload)
    if len(b) > MAX_MESSAGE_BYTES:
        raise DecodeError(f"message of {len(b)} bytes, at most {MAX_MESSAGE_BYTES}", "too_large")
    b = unwrap(b, secret)
    o = _loads(b, "message")
    if isinstance(o, dict) and "events" in o:
        evs = o["events"]
        if not isinstance(evs, list):
            raise DecodeError("events is not a list")
        if len(evs) > MAX_BATCH_EVENTS:
            raise DecodeError(f"decode batch: {len(evs)} events, at most {MAX_BATCH_EVENTS}")
        if "v" in o:
            _version(o["v"])
        # Each event is complete, with its own node and seq.
        return [Event.from_obj(x) for x in evs]
    return [Event.from_obj(o)]


class Snapshot:
    """The document at ``<channel>:snapshot``; ``bad`` counts the entries
    skipped as out of range or undecodable, by reason."""

    __slots__ = ("seq", "node", "nodes", "keys", "bad")

    def __init__(self) -> None:
        self.seq = 0
        self.node = ""
        self.nodes: Dict[str, int] = {}
        self.keys: List[Event] = []
        self.bad: Dict[str, int] = {}


def decode_snapshot(payload: Optional[Any], secret: Optional[bytes] = None) -> Snapshot:
    s = Snapshot()
    if payload is None:
        return s
    b = _raw(payload)
    if len(b) > MAX_SNAPSHOT_BYTES:
        raise DecodeError(f"snapshot of {len(b)} bytes, at most {MAX_SNAPSHOT_BYTES}", "too_large")
    b = unwrap(b, secret)
    o = _loads(b, "snapshot")
    if not isinstance(o, dict):
        raise DecodeError("snapshot is not a JSON object")

    def bad(reason: str) -> None:
        s.bad[reason] = s.bad.get(reason, 0) + 1

    seq = o.get("seq")
    s.seq = seq if type(seq) is int and 0 <= seq < MAX_SEQ else 0
    s.node = o.get("node", "") if isinstance(o.get("node"), str) else ""
    nodes = o.get("nodes")
    for n in nodes if isinstance(nodes, list) else ():
        if not (isinstance(n, dict) and isinstance(n.get("node"), str)):
            bad("undecodable")
            continue
        q = n.get("seq")
        if type(q) is not int or not 0 <= q < MAX_SEQ:
            bad("out_of_range")
            continue
        s.nodes[n["node"]] = q
    keys = o.get("keys")
    for k in keys if isinstance(keys, list) else ():
        if k is None:
            continue
        try:
            e = Event.from_obj(k)
        except DecodeError as err:
            bad(err.reason)
            continue
        if e.type != TYPE_COLD:
            s.keys.append(e)
    return s


def sign(secret: bytes, body: bytes) -> bytes:
    """The signed envelope of body (for tests and tools)."""
    mac = hmac.new(secret, body, hashlib.sha256).hexdigest().encode()
    return _SIG_PREFIX + mac + _SIG_MID + body + b"}"

