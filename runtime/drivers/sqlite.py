"""The SQLite driver: aiosqlite's worker thread running the standard library's sqlite3.

``isolation_level=None`` turns off the sqlite3 module's implicit transactions so that begin()
and commit() are the only ones; the file is put in WAL mode (readers do not block the writer)
with a 30 s busy timeout and ``synchronous=NORMAL`` (durable at checkpoints, safe under WAL).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from runtime.dialects import DIALECTS
from runtime.drivers.base import Connection, Params, Row, first_line, import_driver, redact_url
from runtime.errors import ConfigurationError

if TYPE_CHECKING:
    import sqlite3

    import aiosqlite

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
_PRAGMAS = (
    # busy_timeout first: switching to WAL needs a moment of exclusive access.
    f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
)


# These run on aiosqlite's thread. Each one finishes and closes its cursor before returning,
# so no statement is left half-stepped holding a read snapshot (and, with it, the WAL) open.


def _run_execute(raw: sqlite3.Connection, sql: str, params: Params) -> int:
    cur = raw.execute(sql, params)
    try:
        if cur.description is None:
            return cur.rowcount
        # A query or a RETURNING statement: count its rows, as psycopg and PyMySQL do (sqlite3
        # itself says -1 for these).
        return len(cur.fetchall())
    finally:
        cur.close()


def _run_fetchall(raw: sqlite3.Connection, sql: str, params: Params) -> list[Row]:
    cur = raw.execute(sql, params)
    try:
        if cur.description is None:
            return []
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
    finally:
        cur.close()


def _run_fetchone(raw: sqlite3.Connection, sql: str, params: Params) -> Row | None:
    cur = raw.execute(sql, params)
    try:
        if cur.description is None:
            return None
        r = cur.fetchone()
        if r is None:
            return None
        return dict(zip([d[0] for d in cur.description], r, strict=True))
    finally:
        # Closing resets the statement; a RETURNING statement made all its changes on its first
        # step, so stopping after one row loses nothing.
        cur.close()


def _run_executemany(raw: sqlite3.Connection, sql: str, seq: Sequence[Params]) -> None:
    raw.executemany(sql, seq).close()


class SQLiteConnection(Connection):
    """An aiosqlite connection; statements are queued to its one worker thread, in order."""

    def __init__(self, db: aiosqlite.Connection, raw: sqlite3.Connection, url: str) -> None:
        super().__init__(url, DIALECTS["sqlite"])
        self._db = db
        self._raw = raw
        self._close_task: asyncio.Future[None] | None = None
        import sqlite3

        self._sqlite3 = sqlite3

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            self._check_open()
        try:
            # aiosqlite's own queue, one hop per call: its public Cursor API would cost a hop
            # for execute() and another for each fetch.
            return await self._db._execute(fn, self._raw, *args)
        except Exception as exc:
            if self._closed or self._is_lost(exc):
                raise self._lost(exc) from exc
            raise

    async def execute(self, sql: str, params: Params | None = None) -> int:
        return await self._call(_run_execute, sql, {} if params is None else params)

    async def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        return await self._call(_run_fetchall, sql, {} if params is None else params)

    async def fetchone(self, sql: str, params: Params | None = None) -> Row | None:
        return await self._call(_run_fetchone, sql, {} if params is None else params)

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        await self._call(_run_executemany, sql, list(seq_of_params))

    async def begin(self, immediate: bool = False) -> None:
        self._check_begin()
        # IMMEDIATE takes the write lock now (waiting up to busy_timeout) instead of at the first
        # write, where a deferred transaction that already read could only fail with BUSY.
        try:
            await self._control("BEGIN IMMEDIATE" if immediate else "BEGIN")
        except asyncio.CancelledError:
            # Cancelling the await does not unqueue BEGIN from aiosqlite's thread: it still
            # runs, ahead of any later statement, so the transaction counts as open.
            self._in_transaction = not self._closed
            raise
        self._in_transaction = True

    async def commit(self) -> None:
        self._check_commit()
        try:
            await self._control("COMMIT")
        except asyncio.CancelledError:
            self._in_transaction = False  # COMMIT still runs on the thread
            raise
        except Exception:
            # A COMMIT refused with SQLITE_BUSY leaves the transaction open: ask sqlite.
            self._in_transaction = self._raw_in_transaction()
            raise
        self._in_transaction = False

    async def rollback(self) -> None:
        if self._closed or not self._in_transaction:
            return
        try:
            await self._control("ROLLBACK")
        except asyncio.CancelledError:
            self._in_transaction = False
            raise
        except Exception:
            self._in_transaction = self._raw_in_transaction()
            raise
        self._in_transaction = False

    async def _control(self, sql: str) -> None:
        await self._call(_run_execute, sql, {})

    def _raw_in_transaction(self) -> bool:
        if self._closed:
            return False
        try:
            return bool(self._raw.in_transaction)
        except Exception:
            return False

    async def close(self) -> None:
        self._closed = True
        self._in_transaction = False
        await self._close_once()

    async def abort(self) -> None:
        # No socket to drop: interrupt whatever runs now (sqlite3's interrupt() is meant to be
        # called from another thread), then close; the open transaction rolls back.
        self._closed = True
        self._in_transaction = False
        if self._close_task is None:
            with contextlib.suppress(Exception):
                self._raw.interrupt()
        await self._close_once()

    async def _close_once(self) -> None:
        # aiosqlite's close() must run once: two of them each queue a stop for its worker
        # thread, and the second waits forever for a thread that has already exited. Every
        # caller awaits the same task; shielded, so a cancelled caller does not stop it midway.
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close_db())
        with contextlib.suppress(Exception):
            await asyncio.shield(self._close_task)

    async def _close_db(self) -> None:
        # Never raises, so a task nobody awaits leaves no "exception never retrieved" behind.
        with contextlib.suppress(Exception):
            await self._db.close()

    def _release_hard(self) -> None:
        # The handle was found closed under us or the connection was aborted: stop what runs
        # now and close through the one close task.
        with contextlib.suppress(Exception):
            self._raw.interrupt()
        if self._close_task is None:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to schedule on
                self._close_task = asyncio.get_running_loop().create_task(self._close_db())

    async def server_version_text(self) -> str:
        return str(self._sqlite3.sqlite_version)

    def _is_lost(self, exc: BaseException) -> bool:
        # aiosqlite raises ValueError("Connection closed" / "no active connection") and sqlite3
        # raises ProgrammingError("Cannot operate on a closed database.") once the handle is gone.
        if isinstance(exc, ValueError) and "connection" in str(exc).lower():
            return True
        return isinstance(exc, self._sqlite3.ProgrammingError) and "closed" in str(exc).lower()


async def open_sqlite(url: str, path: str, **kwargs: Any) -> SQLiteConnection:
    """Open (creating if needed) the SQLite file at ``path`` (``:memory:`` for a private one).

    ``kwargs`` go to ``sqlite3.connect`` through aiosqlite; ``isolation_level`` is fixed.
    """
    aiosqlite_mod = import_driver("aiosqlite", "sqlite")
    import sqlite3

    kwargs["isolation_level"] = None
    db = aiosqlite_mod.connect(path, **kwargs)
    try:
        await db
    except sqlite3.Error as exc:
        # aiosqlite has queued its worker thread's stop; wait for it here, while the event loop
        # still runs, or the thread reports to a closed loop when the caller exits.
        with contextlib.suppress(Exception):
            await asyncio.to_thread(db._thread.join, 5.0)
        raise ConfigurationError(
            f"cannot open the SQLite database {path!r} ({redact_url(url)}): {first_line(exc)}"
        ) from exc
    conn = SQLiteConnection(db, db._conn, url)
    try:
        for pragma in _PRAGMAS:
            await conn.execute(pragma)
    except BaseException:
        await conn.close()
        raise
    return conn
