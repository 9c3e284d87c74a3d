"""Which keys a command writes, from redis-server's COMMAND key specs.

writes.json is generated from the same table the Go shim uses (see
tools/gen/shimwrites), so every shim drops the same keys on the same
writes: SET, DEL, HSET, EXPIRE, RENAME (both keys), MSET (all), *STORE
destinations, EVAL/FCALL declared keys, PFCOUNT, ... FLUSHDB, FLUSHALL and
SWAPDB drop everything. Commands the table does not know (modules) are not
writes: the shim only caches strings and hashes.
"""

from __future__ import annotations

import json
import os
from typing import List, Sequence, Tuple

with open(os.path.join(os.path.dirname(__file__), "writes.json"), "rb") as _f:
    _TABLE = json.load(_f)["commands"]


def _name(a) -> str:
    if isinstance(a, (bytes, bytearray, memoryview)):
        return bytes(a).decode("latin-1")
    return str(a)


def _keyword_pos(args: Sequence, keyword: str, start: int) -> int:
    kw = keyword.upper()
    if start >= 0:
        for i in range(max(start, 1), len(args)):
            if _name(args[i]).upper() == kw:
                return i
        return -1
    for i in range(len(args) + start, 0, -1):
        if _name(args[i]).upper() == kw:
            return i
    return -1


def written_keys(args: Sequence) -> Tuple[List, bool]:
    """The arguments a command may modify as keys, and whether every cached
    value must go (the keys cannot be told)."""
    if not args:
        return [], False
    c = _TABLE.get(_name(args[0]).upper())
    if c is None:
        return [], False
    if c.get("all"):
        return [], True
    out: List = []
    argc = len(args)
    if c.get("sort_store"):
        p = _keyword_pos(args, "STORE", 2)
        if 0 <= p and p + 1 < argc:
            out.append(args[p + 1])
    for ks in c.get("specs", ()):
        if ks["begin"] == "index":
            first = ks.get("index", 0)
        else:
            first = _keyword_pos(args, ks["keyword"], ks.get("startfrom", 0))
            if first < 0:
                continue  # the optional keyword is absent: no key
            first += 1
        if first <= 0 or first >= argc:
            continue
        step = max(ks.get("step", 1), 1)
        if ks["find"] == "range":
            lk, limit = ks.get("lastkey", 0), ks.get("limit", 0)
            if lk >= 0:
                last = first + lk
            elif limit > 0:
                last = first + (argc - first) // limit - 1
            else:
                last = argc + lk
        else:
            ni = first + ks.get("keynumidx", 0)
            if ni >= argc:
                continue
            try:
                n = int(_name(args[ni]))
            except ValueError:
                continue
            if n < 0:
                continue
            first += ks.get("firstkey", 0)
            last = first + (n - 1) * step
        last = min(last, argc - 1)
        out.extend(args[first:last + 1:step])
    return out, False
