"""The SQLite driver: aiosqlite's worker thread running the standard library's sqlite3.

``isolation_level=None`` turns off the sqlite3 module's implicit transactions so that begin()
and commit() are the only ones; the file is put in WAL mode (readers do not block the writer)
with a 30 s busy timeout and ``synchronous=NORMAL`` (durable at checkpoints, safe under WAL).

SQLite has one writer per file. The connections of one process to the same file take their
turn through the file's writer turn: begin() takes it alone (and opens ``BEGIN IMMEDIATE``)
until commit() or rollback(); a single write outside a transaction shares it with the other
single writes, for that statement. Transactions thus queue in order instead of sleeping and
retrying in SQLite's busy handler, which under load starves some of them past the busy
timeout; single writes wait for the transactions that asked before them, and the
transactions that ask after them wait for them. Between single writes, each a moment long,
SQLite's own lock and busy handler decide, as they do between processes. A step of several
statements (``run_script``) opens its transaction, runs and ends it in one trip to the
connection's thread, a moment long too: it shares the turn as a single write does.

On a consumer's worker connection (``inline_steps``) that step, when nothing is in its way,
does not go to the thread at all: it runs on the event loop's thread, where it was asked
for, at once. Nothing is in its way when the connection's thread runs no call of it, the
file's writer turn can be shared without waiting, and SQLite's write lock is free (its
``BEGIN IMMEDIATE`` runs with a busy timeout of 0). Otherwise nothing of it has run, and it
goes to the thread, which waits as before: the loop never waits for a lock. What it saves is
the trip: the loop's wake-up for the answer, and the thread's waits for the GIL, which it
takes back after each of SQLite's steps while the loop runs handlers. The step's statements
take their time on the loop instead (a claim and a settlement: tens of µs), and so does a
checkpoint its COMMIT may run (SQLite's automatic one, every 1,000 pages of WAL: a few ms).

The turn is taken and given back on each connection's own thread, around the statement that
needs it: when one connection's COMMIT ends, the next one's statement starts on its thread at
once, while the event loop reads the first one's answer (SQLite runs without the GIL), instead
of waiting for the loop to hand the turn on. A single write does not hold other single writes
back for the Python around its statement (binding, fetching the rows it returns), which,
while the event loop holds the GIL, lasts many times the statement itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
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
    Script,
    database_error,
    first_line,
    import_driver,
    redact_url,
)
from runtime.drivers.private import aiosqlite_caller, aiosqlite_raw, aiosqlite_thread

if TYPE_CHECKING:
    import sqlite3

    import aiosqlite

T = TypeVar("T")

BUSY_TIMEOUT_MS = 30_000
#: how long a close whose caller was cancelled is still waited for (aiosqlite's thread ends)
CLOSE_WAIT_S = 5.0
#: a connection's busy timeout (set again after a ``BEGIN IMMEDIATE`` that was not to wait)
_BUSY_TIMEOUT = f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}"
_PRAGMAS = (
    # busy_timeout first: switching to WAL needs a moment of exclusive access.
    _BUSY_TIMEOUT,
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
)


# These run on aiosqlite's thread. Each one finishes and closes its cursor before returning,
# so no statement is left half-stepped holding a read snapshot (and, with it, the WAL) open.


def _counted(done: list[int], fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on the connection's thread, counted in ``done`` once it has returned."""
    try:
        return fn(*args)
    finally:
        done[0] += 1


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


#: how often a connection waiting for the writer turn looks whether it was closed meanwhile
TURN_POLL_S = 0.05


class _TurnTimeout(Exception):
    """The writer turn was not free within the busy timeout."""


class _TurnClosed(Exception):
    """The connection was closed while it waited for the writer turn."""


class _FileTurn:
    """A database file's writer turn, shared by the process's connections to it.

    A transaction holds it alone. Single writes outside a transaction share it with each
    other (SQLite's own lock and busy handler order them, for the moment each one lasts),
    never with a transaction. The turn is phase-fair: transactions go in the order they
    asked; one waits for the single writes that came before it, and the single writes that
    come after it wait for it. So neither kind can starve the other, and a single write does
    not queue behind another one for the statement's Python on its thread.

    A waiting transaction parks on a lock of its own, which the one before hands it the turn
    through: one thread woken a hand-over, as with a plain lock.

    Every method runs on a connection's thread and may wait there.
    """

    def __init__(self) -> None:
        #: the turn's state is read and changed under it
        self._guard = threading.Lock()
        #: single writes waiting for the transactions that asked before them
        self._singles = threading.Condition(self._guard)
        #: transactions that asked for the turn (each one's ticket is the count before it)
        self.issued = 0
        #: tickets ended (given back or given up), all of those below it
        self.done = 0
        self._given_up: set[int] = set()
        #: a transaction holds the turn (the one whose ticket is ``done``)
        self.transaction = False
        #: single writes running now
        self.singles = 0
        #: single writes waiting → how many transactions asked before each
        self._waiting: dict[int, int] = {}
        #: a waiting transaction's ticket → the lock it is parked on, held until its turn
        self._parked: dict[int, threading.Lock] = {}

    def take(self, wait_s: float, closed: Callable[[], bool]) -> None:
        """Hold the turn alone: after the transactions and single writes that came before
        (waiting at most ``wait_s`` seconds)."""
        with self._guard:
            ticket = self.issued
            self.issued += 1
            if self._may_go(ticket):
                self.transaction = True
                return
            park = threading.Lock()
            park.acquire()
            self._parked[ticket] = park
        deadline = time.monotonic() + wait_s  # read only by a transaction that waits
        try:
            while not park.acquire(timeout=TURN_POLL_S):
                if closed():
                    raise _TurnClosed
                if time.monotonic() >= deadline:
                    raise _TurnTimeout
        except BaseException:
            with self._guard:
                if self._parked.pop(ticket, None) is None:  # handed the turn meanwhile
                    self.transaction = False
                    self.done += 1
                else:
                    self._given_up.add(ticket)
                self._advance()
            raise
        # handed over: ``_hand_on`` took the ticket off ``_parked`` and set ``transaction``

    def give(self) -> None:
        with self._guard:
            self.transaction = False
            self.done += 1
            self._advance()

    def share(self, wait_s: float, closed: Callable[[], bool]) -> None:
        """Hold the turn beside other single writes: after the transactions that came before
        (waiting at most ``wait_s`` seconds)."""
        with self._guard:
            before = self.issued
            if self.done < before or self.transaction:
                self._waiting[before] = self._waiting.get(before, 0) + 1
                deadline = time.monotonic() + wait_s  # read only by a single write that waits
                try:
                    while self.done < before or self.transaction:
                        _wait(self._singles, deadline, closed)
                except BaseException:
                    self._unwait(before)
                    self._hand_on()  # a transaction may have waited for this one alone
                    raise
                self._unwait(before)
            self.singles += 1

    def try_share(self) -> bool:
        """``share`` when it needs no wait; False (nothing held) when a transaction holds the
        turn or asked for it before."""
        with self._guard:
            if self.done < self.issued or self.transaction:
                return False
            self.singles += 1
            return True

    def unshare(self) -> None:
        with self._guard:
            self.singles -= 1
            if not self.singles:
                self._hand_on()

    # The rest runs under ``_guard``.

    def _may_go(self, ticket: int) -> bool:
        return (
            self.done == ticket
            and not self.transaction
            and not self.singles
            and not any(before <= ticket for before in self._waiting)
        )

    def _unwait(self, before: int) -> None:
        left = self._waiting[before] - 1
        if left:
            self._waiting[before] = left
        else:
            del self._waiting[before]

    def _advance(self) -> None:
        """Skip the tickets given up; wake the single writes the last ticket held back, or
        hand the turn to the next transaction."""
        while self.done in self._given_up:
            self._given_up.discard(self.done)
            self.done += 1
        if self._waiting:
            self._singles.notify_all()
        self._hand_on()

    def _hand_on(self) -> None:
        """The turn to the transaction whose ticket is next, if it waits and may go now."""
        park = self._parked.get(self.done)
        if park is not None and self._may_go(self.done):
            del self._parked[self.done]
            self.transaction = True
            park.release()


def _wait(cond: threading.Condition, deadline: float, closed: Callable[[], bool]) -> None:
    """One wait for the turn (the caller holds ``cond``), polling for a close and the deadline."""
    if closed():
        raise _TurnClosed
    if time.monotonic() >= deadline:
        raise _TurnTimeout
    cond.wait(TURN_POLL_S)


#: database file (its real path) → its writer turn, shared by the process's connections
_TURNS: dict[str, _FileTurn] = {}
_TURNS_GUARD = threading.Lock()


def _file_turn(path: str) -> _FileTurn | None:
    """The writer turn of this database file (None for a private in-memory database, which no
    other connection sees)."""
    if not path or path == ":memory:" or path.startswith("file:"):
        return None
    key = os.path.realpath(path)
    with _TURNS_GUARD:
        turn = _TURNS.get(key)
        if turn is None:
            turn = _TURNS[key] = _FileTurn()
        return turn


class _WriterTurn:
    """One connection's part in its file's writer turn. ``take`` (a transaction's hold)
    runs on the connection's thread (it may wait); ``give`` on any thread, at most once per
    take."""

    def __init__(self, file: _FileTurn) -> None:
        self.file = file
        self.held = False
        #: set when the connection closes: a take still waiting gives up
        self.closed = False
        #: the caller of a take yet to run went away: that take gives the turn straight back
        self._abandoned = False
        self._flag = threading.Lock()

    def _closed(self) -> bool:
        return self.closed

    def take(self) -> None:
        try:
            self.file.take(BUSY_TIMEOUT_MS / 1000, self._closed)
        except BaseException:
            with self._flag:
                self._abandoned = False
            raise
        with self._flag:
            if self._abandoned:
                self._abandoned = False
                self.file.give()
                return
            self.held = True

    def abandon(self) -> None:
        """The caller of a take was cancelled: the turn goes back now if the take ran, or as
        soon as it does."""
        with self._flag:
            if not self.held:
                self._abandoned = True
                return
            self.held = False
        self.file.give()

    def give(self) -> None:
        with self._flag:
            if not self.held:
                return
            self.held = False
        self.file.give()


# On the connection's thread: a single write in its share of the turn, and a transaction's
# ends.


def _in_turn(turn: _WriterTurn, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in the connection's share of the file's writer turn."""
    file = turn.file
    file.share(BUSY_TIMEOUT_MS / 1000, turn._closed)
    try:
        return fn(*args)
    finally:
        file.unshare()


def _begin(turn: _WriterTurn | None, raw: sqlite3.Connection) -> None:
    took = turn is not None and not turn.held  # (inside writing(): held already)
    if took:
        assert turn is not None
        turn.take()
    try:
        raw.execute("BEGIN IMMEDIATE").close()
    except BaseException:
        if took:
            assert turn is not None
            turn.give()
        raise


def _begin_fetchrows(
    turn: _WriterTurn | None, raw: sqlite3.Connection, sql: str, params: Params
) -> Rows:
    """``_begin``, then the statement's rows in the transaction it opened (one trip)."""
    _begin(turn, raw)
    return _run_fetchrows(raw, sql, params)


def _execute_commit(
    turn: _WriterTurn | None, raw: sqlite3.Connection, sql: str, params: Params
) -> int:
    """The statement, then COMMIT (one trip); a statement that fails leaves the transaction
    open."""
    changed = _run_execute(raw, sql, params)
    _end(turn, raw, "COMMIT")
    return changed


def _run_script(
    turn: _WriterTurn | None,
    raw: sqlite3.Connection,
    script: Script,
    own: bool,
    abandoned: list[bool],
) -> Rows:
    """``run_script`` on the connection's thread, in one trip: every statement, in the
    caller's transaction or (``own``) in one of its own. A transaction of its own lives and
    ends in this trip, a moment long like a single write, so it shares the writer turn as
    single writes do (SQLite's own lock orders it among them)."""
    if not own:
        return _script(raw, script)
    if turn is None or turn.held:  # (inside writing(): held already)
        return _script_in_transaction(raw, script, abandoned)
    return _in_turn(turn, _script_in_transaction, raw, script, abandoned)


def _script_in_transaction(raw: sqlite3.Connection, script: Script, abandoned: list[bool]) -> Rows:
    """``BEGIN IMMEDIATE``, the script, COMMIT; ROLLBACK on an error, and instead of the
    COMMIT when the caller was cancelled meanwhile."""
    raw.execute("BEGIN IMMEDIATE").close()
    return _script_to_end(raw, script, abandoned)


def _script_now(turn: _WriterTurn, raw: sqlite3.Connection, script: Script) -> Rows | None:
    """``run_script``'s step of its own transaction, run where it is called (the event loop's
    thread), when nothing is in its way: the file's writer turn shared at once, SQLite's write
    lock taken at once. None when either is taken: nothing of it has run, the script is not
    started, and the caller sends it to the connection's thread."""
    file = turn.file
    if not file.try_share():
        return None
    try:
        raw.execute("PRAGMA busy_timeout = 0").close()
        try:
            raw.execute("BEGIN IMMEDIATE").close()
        except raw.OperationalError as exc:
            if getattr(exc, "sqlite_errorcode", None) == _SQLITE_BUSY:
                return None
            raise
        finally:
            raw.execute(_BUSY_TIMEOUT).close()
        return _script_to_end(raw, script, [False])
    finally:
        file.unshare()


#: SQLite's result code for a lock another connection holds
_SQLITE_BUSY = 5


def _script_to_end(raw: sqlite3.Connection, script: Script, abandoned: list[bool]) -> Rows:
    """The script in the transaction just opened, then COMMIT (ROLLBACK on an error, and
    instead of the COMMIT when the caller was cancelled meanwhile)."""
    try:
        result = _script(raw, script)
        raw.execute("ROLLBACK" if abandoned[0] else "COMMIT").close()
    except BaseException:
        # a statement refused, or a COMMIT refused (SQLITE_BUSY), which leaves the
        # transaction open: nothing of it stands
        if raw.in_transaction:
            with contextlib.suppress(Exception):
                raw.execute("ROLLBACK").close()
        raise
    return result


def _script(raw: sqlite3.Connection, script: Script) -> Rows:
    """Every statement of the script, each sent the rows of the one before."""
    try:
        sql, params, returns_rows = next(script)
        while True:
            got: Rows | None = None
            if returns_rows:
                got = _run_fetchrows(raw, sql, params)
            else:
                _run_execute(raw, sql, params)
            sql, params, returns_rows = script.send(got)
    except StopIteration as done:
        result: Rows = done.value
    return result


def _end(turn: _WriterTurn | None, raw: sqlite3.Connection, sql: str) -> None:
    try:
        raw.execute(sql).close()
    finally:
        # a COMMIT refused with SQLITE_BUSY leaves the transaction open, and the turn held
        if turn is not None and not raw.in_transaction:
            turn.give()


#: statement text → whether it only reads (a worker runs the same few statements again and again)
_READS_ONLY: dict[str, bool] = {}


def _reads_only(sql: str) -> bool:
    reads = _READS_ONLY.get(sql)
    if reads is None:
        reads = sql.lstrip()[:6].upper() == "SELECT"
        if len(_READS_ONLY) < 4096:  # text made up at run time is bounded out
            _READS_ONLY[sql] = reads
    return reads


class SQLiteConnection(Connection):
    """An aiosqlite connection; statements are queued to its one worker thread, in order."""

    def __init__(
        self, db: aiosqlite.Connection, raw: sqlite3.Connection, url: str, path: str = ""
    ) -> None:
        super().__init__(url, DIALECTS["sqlite"])
        self._db = db
        self._raw = raw
        #: runs a function on aiosqlite's thread, one hop of its own queue (its public Cursor
        #: API would cost a hop for execute() and another for each fetch)
        self._on_thread = aiosqlite_caller(db)
        #: calls sent to the thread, and calls it has finished (each counter written by one
        #: thread only): equal, the thread runs nothing of this connection's (a cancelled
        #: caller's call may still run there)
        self._sent = 0
        self._done = [0]
        self._close_task: asyncio.Future[None] | None = None
        file = _file_turn(path)
        self._turn = None if file is None else _WriterTurn(file)
        import sqlite3

        self._sqlite3 = sqlite3

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            self._check_open()
        self._sent += 1
        try:
            result: T = await self._on_thread(_counted, self._done, fn, *args)
            return result
        except _TurnTimeout as exc:
            raise self._failure(exc) from None
        except Exception as exc:
            failure = self._failure(exc)
            if failure is exc:
                raise
            raise failure from exc

    def _failure(self, exc: Exception) -> Exception:
        """What a failed call raises: ConnectionLost, DatabaseError, or the error itself."""
        if isinstance(exc, _TurnTimeout):
            return DatabaseError(
                f"{self.url}: another connection of this process kept the database's write "
                f"lock for {BUSY_TIMEOUT_MS / 1000:g} s (a transaction left open?)"
            )
        if self._closed or self._is_lost(exc) or isinstance(exc, _TurnClosed):
            return self._lost(exc)
        if isinstance(exc, self._sqlite3.Error):
            return database_error(exc)
        return exc

    async def _write(self, fn: Callable[..., T], sql: str, params: Any) -> T:
        """Run a statement; one that writes, outside a transaction, takes the writer turn."""
        turn = self._turn
        if turn is None or turn.held or _reads_only(sql):
            return await self._call(fn, self._raw, sql, params)
        return await self._call(_in_turn, turn, fn, self._raw, sql, params)

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        turn = self._turn
        if turn is None or turn.held:
            yield
            return
        self._check_open()
        try:
            await self._call(turn.take)
        except asyncio.CancelledError:
            turn.abandon()  # the take still runs on the connection's thread
            raise
        try:
            yield
        finally:
            if not self._in_transaction:
                turn.give()

    def _give_writer(self) -> None:
        """The connection is closing: its writer turn, if it holds it, goes to the next one."""
        if self._turn is not None:
            self._turn.closed = True
            self._turn.give()

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
        """Take the file's writer turn, then ``BEGIN IMMEDIATE`` (``immediate`` is always true
        here: with our own connections queued on the turn, taking SQLite's write lock at once
        costs nothing, and a deferred transaction that read first could only fail with BUSY
        when it writes)."""
        self._check_begin()
        try:
            await self._call(_begin, self._turn, self._raw)
        except asyncio.CancelledError:
            # Cancelling the await does not unqueue BEGIN from aiosqlite's thread: it still
            # runs, ahead of any later statement, so the transaction counts as open.
            self._in_transaction = not self._closed
            raise
        self._in_transaction = True

    async def begin_fetchrows(self, sql: str, params: Params | None = None) -> Rows:
        """``begin()`` and the statement's rows in one trip to the connection's thread (a
        row-lock claim: a hop less per batch)."""
        self._check_begin()
        try:
            rows = await self._call(
                _begin_fetchrows, self._turn, self._raw, sql, {} if params is None else params
            )
        except asyncio.CancelledError:
            self._in_transaction = not self._closed  # it still runs on the thread, as begin()
            raise
        except Exception:
            # BEGIN refused: no transaction; the statement refused: BEGIN's stays open
            self._in_transaction = self._raw_in_transaction()
            raise
        self._in_transaction = True
        return rows

    async def execute_commit(self, sql: str, params: Params | None = None) -> int:
        """The statement and the COMMIT in one trip to the connection's thread."""
        self._check_commit()
        try:
            changed = await self._call(
                _execute_commit, self._turn, self._raw, sql, {} if params is None else params
            )
        except asyncio.CancelledError:
            self._in_transaction = not self._closed  # as begin(): the caller rolls back
            raise
        except Exception:
            # the statement refused: the transaction stays open; a COMMIT refused with
            # SQLITE_BUSY leaves it open too: ask sqlite
            self._in_transaction = self._raw_in_transaction()
            raise
        self._in_transaction = False
        return changed

    async def run_script(self, script: Script) -> Rows:
        """The whole step in one trip to the connection's thread (the writer turn, BEGIN, each
        statement, COMMIT), where each was a trip of its own; or, with ``inline_steps``, in a
        transaction of its own when nothing is in its way, here on the event loop's thread,
        with no trip at all."""
        turn = self._turn
        if (
            self.inline_steps
            and turn is not None
            and not turn.held
            and not self._in_transaction
            and not self._closed
            and self._sent == self._done[0]
        ):
            try:
                rows = _script_now(turn, self._raw, script)
            except Exception as exc:
                failure = self._failure(exc)
                if failure is exc:
                    raise
                raise failure from exc
            if rows is not None:
                return rows
        return await self._script_trip(self._call, _run_script, self._turn, self._raw, script)

    async def commit(self) -> None:
        self._check_commit()
        await self._end("COMMIT")

    async def rollback(self) -> None:
        if self._closed or not self._in_transaction:
            return
        await self._end("ROLLBACK")

    async def _end(self, sql: str) -> None:
        """COMMIT or ROLLBACK; the thread gives the writer turn back once no transaction is
        open."""
        try:
            await self._call(_end, self._turn, self._raw, sql)
        except asyncio.CancelledError:
            self._in_transaction = False  # it still runs on the thread
            raise
        except Exception:
            # A COMMIT refused with SQLITE_BUSY leaves the transaction open: ask sqlite.
            self._in_transaction = self._raw_in_transaction()
            raise
        self._in_transaction = False

    async def _control(self, sql: str) -> None:
        await self._call(_run_execute, self._raw, sql, {})

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
        if self._turn is not None:  # a take still waiting on the thread gives up
            self._turn.closed = True
        try:
            await self._close_once()  # an open transaction rolls back with the handle
        finally:
            self._give_writer()

    async def abort(self) -> None:
        # No socket to drop: interrupt whatever runs now (sqlite3's interrupt() is meant to be
        # called from another thread), then close; the open transaction rolls back.
        self._closed = True
        self._in_transaction = False
        if self._turn is not None:
            self._turn.closed = True
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
            # outside the writer turn: a connection's settings are its own, and opening one
            # does not wait for another connection's transaction to end
            await conn._control(pragma)
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
    # the connection's thread runs its statements; a step with nothing in its way runs on the
    # event loop's thread (run_script), never while the other runs anything of it
    kwargs["check_same_thread"] = False
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
