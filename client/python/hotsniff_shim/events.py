"""Channel messages: single v1 events and the v2 batch envelope.

The wire form is described in docs/channel-protocol.md. Keys are raw bytes:
``key`` when they are UTF-8, else ``key_b64``.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any, List, Optional

TYPE_HOT = "hot"
TYPE_COLD = "cold"
TYPE_INVALIDATE = "invalidate"
SOURCE_MANUAL = "manual"

#: A batch with more events than this is rejected whole rather than applied.
MAX_BATCH_EVENTS = 4096


class DecodeError(ValueError):
    """A channel message or snapshot that cannot be read."""


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
        try:
            e.v = int(o.get("v", 1))
            seq = o.get("seq", 0)
            if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
                raise DecodeError("seq is not an unsigned integer")
            e.seq = seq
            e.type = _str(o, "type")
            e.proto = _str(o, "proto")
            e.server = _str(o, "server")
            e.ns = _str(o, "ns")
            e.source = _str(o, "source")
            e.node = _str(o, "node")
            e.prefix = o.get("prefix") is True
            ttl = o.get("ttl_ms", 0)
            if not isinstance(ttl, (int, float)) or isinstance(ttl, bool) or ttl < 0:
                raise DecodeError("ttl_ms is not a non-negative number")
            e.ttl_ms = int(ttl)
            # Absent means true; only an explicit false disables caching.
            e.cacheable = o.get("cacheable") is not False
            if "key" in o and o["key"] is not None:
                k = o["key"]
                if not isinstance(k, str):
                    raise DecodeError("key is not a string")
                e.key = k.encode("utf-8", "surrogatepass")
            elif "key_b64" in o and o["key_b64"] is not None:
                kb = o["key_b64"]
                if not isinstance(kb, str):
                    raise DecodeError("key_b64 is not a string")
                e.key = base64.b64decode(kb, validate=True)
        except (TypeError, ValueError, binascii.Error) as err:
            if isinstance(err, DecodeError):
                raise
            raise DecodeError(f"decode event: {err}") from err
        return e


def _str(o: dict, name: str) -> str:
    v = o.get(name, "")
    if v is None:
        return ""
    if not isinstance(v, str):
        raise DecodeError(f"{name} is not a string")
    return v


def _loads(payload: Any) -> Any:
    if isinstance(payload, (bytes, bytearray, memoryview)):
        payload = bytes(payload).decode("utf-8")
    return json.loads(payload)


def decode_message(payload: Any) -> List[Event]:
    """Decode one channel message: a v1 event or a v2 batch of events."""
    try:
        o = _loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise DecodeError(f"decode message: {err}") from err
    if isinstance(o, dict) and isinstance(o.get("events"), list):
        evs = o["events"]
        if len(evs) > MAX_BATCH_EVENTS:
            raise DecodeError(f"decode batch: {len(evs)} events, at most {MAX_BATCH_EVENTS}")
        return [Event.from_obj(x) for x in evs]
    return [Event.from_obj(o)]


class Snapshot:
    """The document at ``<channel>:snapshot``."""

    __slots__ = ("seq", "node", "nodes", "keys")

    def __init__(self) -> None:
        self.seq = 0
        self.node = ""
        self.nodes: dict = {}
        self.keys: List[Event] = []


def decode_snapshot(payload: Optional[Any]) -> Snapshot:
    s = Snapshot()
    if payload is None:
        return s
    try:
        o = _loads(payload)
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise DecodeError(f"decode snapshot: {err}") from err
    if not isinstance(o, dict):
        raise DecodeError("snapshot is not a JSON object")
    s.seq = o.get("seq", 0) if isinstance(o.get("seq"), int) else 0
    s.node = o.get("node", "") if isinstance(o.get("node"), str) else ""
    for n in o.get("nodes") or []:
        if isinstance(n, dict) and isinstance(n.get("node"), str) and isinstance(n.get("seq"), int):
            s.nodes[n["node"]] = n["seq"]
    for k in o.get("keys") or []:
        if k is None:
            continue
        e = Event.from_obj(k)
        if e.type != TYPE_COLD:
            s.keys.append(e)
    return s
