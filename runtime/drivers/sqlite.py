"""The SQLite driver: aiosqlite's worker thread running the standard library's sqlite3.

``isolation_level=None`` turns off the sqlite3 module's implicit transactions so that begin()
and commit() are the only ones; the file is put in WAL mode (readers do not block the writer)
with a 30 s busy timeout and ``synchronous=NORMAL`` (durable at checkpoints, safe under WAL).

SQLite has one writer per file. The connections of one process (and event loop) to the same
file take their turn through one asyncio.Lock, the file's writer lock: begin() takes it (and
opens ``BEGIN IMMEDIATE``) until commit() or rollback(), and a write outside a transaction
takes it for that statement. Our own connections thus queue in order instead of sleeping and
retrying in SQLite's busy handler, which under load starves some of them past the busy
timeout; the busy handler is left to arbitrate only with other processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote

from runtime.contract.dialects import DIALECTS
from runtime.contract.errors import ConfigurationError, DatabaseError
from runtime.drivers.base import (
    Connection,
    Params,
    Row,
    Rows,
    database_error,
    first_line,
    import_driver,
    redact_url,
)
from runtime.drivers.private import aiosqlite_call, aiosqlite_raw, aiosqlite_thread

if TYPE_CHECKING:
    import sqlite3

    import aiosqlite

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
#: how long a close whose caller was cancelled is still waited for (aiosqlite's thread ends)
CLOSE_WAIT_S = 5.0
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


def _run_fetchrows(raw: sqlite3.Connection, sql: str, params: Params) -> Rows:
    cur = raw.execute(sql, params)
    try:
        if cur.description is None:
            return (), []
        return tuple(d[0] for d in cur.description), cur.fetchall()
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


#: event loop → database file → the file's writer lock (asyncio locks belong to one loop)
_WRITER_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


def _writer_lock(path: str) -> asyncio.Lock | None:
    """The writer lock of this database file in the running loop (None for a private
    in-memory database, which no other connection sees)."""
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    locks = _WRITER_LOCKS.setdefault(asyncio.get_running_loop(), {})
    key = os.path.realpath(path)
    lock = locks.get(key)
    if lock is None:
        lock = locks[key] = asyncio.Lock()
    return lock


def _reads_only(sql: str) -> bool:
    return sql.lstrip()[:6].upper() == "SELECT"


class SQLiteConnection(Connection):
    """An aiosqlite connection; statements are queued to its one worker thread, in order."""

    def __init__(
        self, db: aiosqlite.Connection, raw: sqlite3.Connection, url: str, path: str = ""
    ) -> None:
        super().__init__(url, DIALECTS["sqlite"])
        self._db = db
        self._raw = raw
        self._close_task: asyncio.Future[None] | None = None
        self._writer = _writer_lock(path)
        self._holds_writer = False
        import sqlite3

        self._sqlite3 = sqlite3

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            self._check_open()
        try:
            # aiosqlite's own queue, one hop per call: its public Cursor API would cost a hop
            # for execute() and another for each fetch.
            return await aiosqlite_call(self._db, fn, self._raw, *args)
        except Exception as exc:
            if self._closed or self._is_lost(exc):
                raise self._lost(exc) from exc
            if isinstance(exc, self._sqlite3.Error):
                raise database_error(exc) from exc
            raise

    async def _write(self, fn: Callable[..., T], sql: str, params: Any) -> T:
        """Run a statement; one that writes, outside a transaction, takes the writer lock."""
        if self._writer is None or self._holds_writer or _reads_only(sql):
            return await self._call(fn, sql, params)
        await self._take_writer()
        try:
            return await self._call(fn, sql, params)
        finally:
            self._give_writer()

    async def _take_writer(self) -> None:
        assert self._writer is not None
        try:
            # asyncio.timeout, not wait_for: no task of its own per statement (an uncontended
            # lock is taken without waiting; this runs around every write and transaction)
            async with asyncio.timeout(BUSY_TIMEOUT_MS / 1000):
                await self._writer.acquire()
        except TimeoutError:
            raise DatabaseError(
                f"{self.url}: another connection of this process kept the database's write "
                f"lock for {BUSY_TIMEOUT_MS / 1000:g} s (a transaction left open?)"
            ) from None
        self._holds_writer = True

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        if self._writer is None or self._holds_writer:
            yield
            return
        self._check_open()
        await self._take_writer()
        try:
            yield
        finally:
            if not self._in_transaction:
                self._give_writer()

    def _give_writer(self) -> None:
        if self._holds_writer and self._writer is not None:
            self._holds_writer = False
            self._writer.release()

    async def execute(self, sql: str, params: Params | None = None) -> int:
        return await self._write(_run_execute, sql, {} if params is None else params)

    async def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        return await self._write(_run_fetchall, sql, {} if params is None else params)

    async def fetchrows(self, sql: str, params: Params | None = None) -> Rows:
        return await self._write(_run_fetchrows, sql, {} if params is None else params)

    async def fetchone(self, sql: str, params: Params | None = None) -> Row | None:
        return await self._write(_run_fetchone, sql, {} if params is None else params)

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        await self._write(_run_executemany, sql, list(seq_of_params))

    async def begin(self, immediate: bool = False) -> None:
        """Take the file's writer lock, then ``BEGIN IMMEDIATE`` (``immediate`` is always true
        here: with our own connections queued on the lock, taking SQLite's write lock at once
        costs nothing, and a deferred transaction that read first could only fail with BUSY
        when it writes)."""
        self._check_begin()
        if self._writer is not None and not self._holds_writer:  # (inside writing(): held)
            await self._take_writer()
        try:
            await self._call(_run_execute, "BEGIN IMMEDIATE", {})
        except asyncio.CancelledError:
            # Cancelling the await does not unqueue BEGIN from aiosqlite's thread: it still
            # runs, ahead of any later statement, so the transaction counts as open.
            self._in_transaction = not self._closed
            if not self._in_transaction:
                self._give_writer()
            raise
        except BaseException:
            self._give_writer()
            raise
        self._in_transaction = True

    async def commit(self) -> None:
        self._check_commit()
        try:
            await self._control("COMMIT")
            self._in_transaction = False
        except asyncio.CancelledError:
            self._in_transaction = False  # COMMIT still runs on the thread
            raise
        except Exception:
            # A COMMIT refused with SQLITE_BUSY leaves the transaction open: ask sqlite.
            self._in_transaction = self._raw_in_transaction()
            raise
        finally:
            if not self._in_transaction:
                self._give_writer()
        self._in_transaction = False

    async def rollback(self) -> None:
        if self._closed or not self._in_transaction:
            self._give_writer()
            return
        try:
            await self._control("ROLLBACK")
            self._in_transaction = False
        except asyncio.CancelledError:
            self._in_transaction = False
            raise
        except Exception:
            self._in_transaction = self._raw_in_transaction()
            raise
        finally:
            if not self._in_transaction:
                self._give_writer()
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
        try:
            await self._close_once()  # an open transaction rolls back with the handle
        finally:
            self._give_writer()

    async def abort(self) -> None:
        # No socket to drop: interrupt whatever runs now (sqlite3's interrupt() is meant to be
        # called from another thread), then close; the open transaction rolls back.
        self._closed = True
        self._in_transaction = False
        if self._close_task is None:
            with contextlib.suppress(Exception):
                self._raw.interrupt()
        try:
            await self._close_once()
        finally:
            self._give_writer()

    async def _close_once(self) -> None:
        # aiosqlite's close() must run once: two of them each queue a stop for its worker
        # thread, and the second waits forever for a thread that has already exited. Every
        # caller awaits the same task; shielded, so a cancelled caller does not stop it midway.
        # A caller cancelled while it waits still waits for the close to end (once more, at
        # most 5 s) before the cancellation goes on: a close left running past the event
        # loop's end leaves aiosqlite's thread reporting to a closed loop.
        if self._close_task is None:
            self._close_task = asyncio.ensure_future(self._close_db())
        try:
            await asyncio.shield(self._close_task)
        except asyncio.CancelledError:
            with contextlib.suppress(
                Exception, asyncio.CancelledError
            ):  # timed out, cancelled again
                await asyncio.wait_for(asyncio.shield(self._close_task), CLOSE_WAIT_S)
            raise

    async def _close_db(self) -> None:
        # Never raises, so a task nobody awaits leaves no "exception never retrieved" behind.
        with contextlib.suppress(Exception):
            await self._db.close()

    def _release_hard(self) -> None:
        # The handle was found closed under us or the connection was aborted: stop what runs
        # now and close through the one close task.
        self._give_writer()
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


async def _set(conn: SQLiteConnection, pragma: str) -> None:
    """Run one pragma of a new connection. Switching a new file to WAL needs the database to
    itself for a moment, and SQLite answers "database is locked" at once (without its busy
    handler) when another connection opening the same new file holds it then: try again,
    within the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    delay = 0.005
    while True:
        try:
            await conn.execute(pragma)
            return
        except DatabaseError as exc:
            if "database is locked" not in str(exc) or time.monotonic() + delay > deadline:
                raise
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.1)


async def open_sqlite(
    url: str, path: str, query: str = "", read_only: bool = False, **kwargs: Any
) -> SQLiteConnection:
    """Open (creating if needed) the SQLite file at ``path`` (``:memory:`` for a private one).

    ``query`` (the URL's query string, e.g. ``mode=rw``) goes to SQLite as URI parameters.
    ``kwargs`` go to ``sqlite3.connect`` through aiosqlite; ``isolation_level`` is fixed.
    """
    aiosqlite_mod = import_driver("aiosqlite", "sqlite")
    import sqlite3

    kwargs["isolation_level"] = None
    target = path
    if query:
        target, kwargs["uri"] = f"file:{quote(path)}?{query}", True
    db = aiosqlite_mod.connect(target, **kwargs)
    try:
        await db
    except asyncio.CancelledError:
        # aiosqlite has queued its thread's stop too: let the thread end while the loop runs
        with contextlib.suppress(BaseException):
            await asyncio.to_thread(aiosqlite_thread(db).join, 5.0)
        raise
    except sqlite3.Error as exc:
        # aiosqlite has queued its worker thread's stop; wait for it here, while the event loop
        # still runs, or the thread reports to a closed loop when the caller exits.
        with contextlib.suppress(Exception):
            await asyncio.to_thread(aiosqlite_thread(db).join, 5.0)
        raise ConfigurationError(
            f"cannot open the SQLite database {path!r} ({redact_url(url)}): {first_line(exc)}"
        ) from exc
    conn = SQLiteConnection(db, aiosqlite_raw(db), url, path)
    try:
        for pragma in _PRAGMAS + (("PRAGMA query_only = 1",) if read_only else ()):
            await _set(conn, pragma)
    except BaseException:
        await conn.close()
        raise
    return conn
