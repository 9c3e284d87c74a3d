"""Which DB each connection of a client's pool is on.

redis-py does not track it: ``r.select(1)`` on a pooled client moves one
pooled connection to DB 1 and gives it back to the pool; a single-connection
client moves its one connection; a pipeline's ``SELECT`` moves the
connection the pipeline used; and a reconnect silently goes back to the
pool's DB. So the shim watches what every connection of the pool sends: the
commands a connection packs (``SELECT n``, ``RESET``) and its (re)connects.
Every command goes through the connection's ``pack_command``, whatever
path sent it (a typed command, ``execute_command``, a pipeline, a
transaction, ``Redis.client()``), so no SELECT is missed.

The cache serves a read locally only while no connection of the pool is on
another DB than the one the cache is for (for a pool, the connection a read
would take cannot be known in advance), and a refresh read goes through a
connection checked to be on that DB.
"""

from __future__ import annotations

import inspect
import threading
from typing import Any, Dict, Optional

_ATTR = "_hotsniff_db"
_TRACKER = "_hotsniff_tracker"
_UNKNOWN = -1


def _db_arg(args: tuple) -> Optional[int]:
    """The DB a SELECT/RESET moves the connection to; _UNKNOWN when the
    argument cannot be read; None when the command does not move it."""
    if not args:
        return None
    name = args[0]
    if isinstance(name, (bytes, bytearray)):
        name = bytes(name).decode("latin-1")
    if not isinstance(name, str) or len(name) not in (5, 6):
        return None
    u = name.upper()
    if u == "RESET":
        return 0
    if u != "SELECT":
        return None
    if len(args) != 2:
        return _UNKNOWN
    a = args[1]
    if isinstance(a, (bytes, bytearray)):
        a = bytes(a).decode("latin-1")
    try:
        n = int(a)
    except (TypeError, ValueError):
        return _UNKNOWN
    return n if n >= 0 else _UNKNOWN


def _pool_connections(pool: Any) -> list:
    """Every connection pool holds: a ConnectionPool keeps them in
    _available_connections and _in_use_connections, a redis-py 4
    BlockingConnectionPool (sync and asyncio) in _connections. A connection
    missed here would be pruned as gone while still on another DB."""
    out = list(getattr(pool, "_available_connections", None) or ())
    out.extend(getattr(pool, "_in_use_connections", None) or ())
    out.extend(getattr(pool, "_connections", None) or ())
    return out


_NAME_ARG: Dict[type, bool] = {}


def get_connection_args(pool: Any, command: str) -> tuple:
    """The arguments of pool.get_connection: redis-py before 5.3 requires
    a command name, later versions deprecate it."""
    t = type(pool)
    need = _NAME_ARG.get(t)
    if need is None:
        try:
            ps = list(inspect.signature(pool.get_connection).parameters.values())
            need = bool(ps) and ps[0].kind in (ps[0].POSITIONAL_ONLY, ps[0].POSITIONAL_OR_KEYWORD) \
                and ps[0].default is ps[0].empty
        except (TypeError, ValueError):
            need = True
        _NAME_ARG[t] = need
    return (command,) if need else ()


class DBTracker:
    """Tracks the connections of one pool (sync or asyncio)."""

    def __init__(self, pool: Any, db: int, is_async: bool = False) -> None:
        self.pool = pool
        self.db = db
        self.is_async = is_async
        self.lock = threading.Lock()
        # Strong references (asyncio connections cannot be weakly
        # referenced); connections the pool no longer has are pruned.
        self.foreign: set = set()
        self._orig_make = pool.make_connection
        pool.make_connection = self._make_connection
        for c in _pool_connections(pool):
            self.watch(c)

    def ok(self) -> bool:
        """No connection of the pool is on another DB."""
        if not self.foreign:
            return True
        self._prune()
        return not self.foreign

    def _prune(self) -> None:
        try:
            live = set(map(id, _pool_connections(self.pool)))
        except RuntimeError:  # changed while copied: try next time
            return
        with self.lock:
            for c in list(self.foreign):
                if id(c) not in live:
                    self.foreign.discard(c)

    def conn_ok(self, conn: Any) -> bool:
        return getattr(conn, _ATTR, self.db) == self.db and conn not in self.foreign

    def close(self) -> None:
        if self.pool.__dict__.get("make_connection") == self._make_connection:
            del self.pool.__dict__["make_connection"]

    def _make_connection(self) -> Any:
        c = self._orig_make()
        self.watch(c)
        return c

    def _set(self, conn: Any, db: int) -> None:
        setattr(conn, _ATTR, db)
        with self.lock:
            if db == self.db:
                self.foreign.discard(conn)
            else:
                self.foreign.add(conn)

    def watch(self, conn: Any) -> None:
        """Wrap conn's command packing and connect (instance attributes:
        the class is untouched). The wrappers note into whichever tracker
        the connection names now, so a shim installed again after close()
        takes over connections wrapped before."""
        if conn is None:
            return
        if hasattr(conn, _TRACKER):
            setattr(conn, _TRACKER, self)
            db = getattr(conn, _ATTR, self.db)
            if db != self.db:
                self._set(conn, db)
            return
        setattr(conn, _TRACKER, self)
        # A connection is on its own configured DB until it says otherwise
        # (a connection created from other kwargs says so here).
        setattr(conn, _ATTR, int(getattr(conn, "db", 0) or 0))
        if getattr(conn, _ATTR) != self.db:
            self._set(conn, getattr(conn, _ATTR))

        def note(db: int) -> None:
            getattr(conn, _TRACKER)._set(conn, db)

        orig_pack = conn.pack_command

        def pack_command(*args: Any) -> Any:
            db = _db_arg(args)
            if db is not None:
                note(db)
            return orig_pack(*args)

        conn.pack_command = pack_command
        # redis-py 5 and later send single commands through the
        # connection's command packer, not pack_command.
        packer = getattr(conn, "_command_packer", None)
        if packer is not None and not isinstance(packer, _Packer):
            conn._command_packer = _Packer(packer, note)
        # A (re)connect starts a new session on DB 0, and redis-py's
        # on_connect then SELECTs the connection's configured DB (seen by
        # the packer above): what a reconnect after a SELECT leads to.
        # redis-py 5.2 and later also connect through connect_check_health.
        for name in ("connect", "connect_check_health"):
            orig = getattr(conn, name, None)
            if orig is not None:
                setattr(conn, name, _reset_on_connect(conn, orig, note, self.is_async))


def _reset_on_connect(conn: Any, orig: Any, note: Any, is_async: bool) -> Any:
    if is_async:
        async def connect(*a: Any, **kw: Any) -> Any:
            if not conn.is_connected:
                note(0)
            return await orig(*a, **kw)
    else:
        def connect(*a: Any, **kw: Any) -> Any:
            if getattr(conn, "_sock", None) is None:
                note(0)
            return orig(*a, **kw)
    return connect


class _Packer:
    """A connection's command packer that notes SELECT/RESET."""

    def __init__(self, inner: Any, note: Any) -> None:
        self._inner = inner
        self._note = note

    def pack(self, *args: Any) -> Any:
        db = _db_arg(args)
        if db is not None:
            self._note(db)
        return self._inner.pack(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)
