"""The driver interface: the one small async Connection that every engine driver implements.

The runtime talks to PostgreSQL, MySQL/MariaDB and SQLite only through this class, so the
claim forms, the consumer and the benchmarks never see psycopg, PyMySQL or aiosqlite. The
contract, shared by every driver:

* SQL arrives already in the driver's parameter style (``%(name)s`` or ``:name``, see
  ``Dialect.paramstyle``); the driver always hands the driver a params mapping, even ``{}``, so
  a literal ``%%`` means ``%`` on every pyformat engine.
* Rows come back as ``dict`` keyed by column name.
* Outside ``begin()`` … ``commit()``/``rollback()`` every statement commits on its own.
* A lost connection is raised as ``ConnectionLost`` (and ``closed`` turns True); every other
  error the database or its driver reports is raised as ``runtime.DatabaseError`` (a
  BrokerError) carrying the driver's message, with the driver's own exception as
  ``__cause__`` (``exc.__cause__.sqlstate``, ``.args[0]`` for MySQL's error number).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Mapping, Sequence
from types import ModuleType, TracebackType
from typing import Any, ClassVar
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from runtime.contract.dialects import Dialect
from runtime.contract.errors import ConfigurationError, ConnectionLost, DatabaseError

#: one result row
Row = dict[str, Any]
#: the parameters of one statement
Params = Mapping[str, Any]
#: a statement's column names and its rows as tuples in that order (``fetchrows``)
Rows = tuple[tuple[str, ...], list[tuple[Any, ...]]]
#: a step of several statements, one statement at a time (``run_script``): it yields each
#: statement, its parameters and whether it returns rows, is sent what it returned (its
#: ``Rows``, or None for a write), and returns the step's rows
Script = Generator[tuple[str, Params, bool], Rows | None, Rows]

# Savepoint names are spliced into SQL, so only plain identifiers are accepted.
_SAVEPOINT_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}\Z")
# Query-string keys whose values are secrets (libpq accepts password=… in the query).
_SECRET_KEYS = frozenset({"password", "passwd", "pass", "sslpassword"})


def redact_url(url: str) -> str:
    """The URL with any password masked, fit for messages and logs.

    ``postgresql://u:secret@h/db`` → ``postgresql://u:***@h/db``. Never raises: a URL that cannot
    be parsed comes back with everything after the scheme's ``//`` up to ``@`` masked.
    """
    try:
        parts = urlsplit(url)
        netloc = parts.netloc
        changed = False
        if "@" in netloc:
            userinfo, hostport = netloc.rsplit("@", 1)
            if ":" in userinfo:
                netloc = userinfo.split(":", 1)[0] + ":***@" + hostport
                changed = True
        query = parts.query
        if query:
            pairs = parse_qsl(query, keep_blank_values=True)
            if any(k.lower() in _SECRET_KEYS for k, _ in pairs):
                query = urlencode(
                    [(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in pairs],
                    quote_via=quote,
                    safe="*/:",
                )
                changed = True
        if not changed:
            return url
        # Rebuilt by hand: urlunsplit would turn sqlite:////abs into sqlite://abs.
        text = f"{parts.scheme}://{netloc}{parts.path}"
        if query:
            text += f"?{query}"
        if parts.fragment:
            text += f"#{parts.fragment}"
        return text
    except (ValueError, TypeError):
        # Malformed beyond urlsplit: drop the user-info part wholesale rather than risk a leak.
        return re.sub(r"//[^/]*@", "//***@", str(url))


def import_driver(module: str, extra: str) -> ModuleType:
    """Import a database driver on first use, or say which extra installs it.

    Drivers are imported lazily so that ``import runtime`` works with none of them installed.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ConfigurationError(
            f"the {module} driver is not installed; install with: pip install 'qgen-sql[{extra}]'"
        ) from exc


def first_line(exc: BaseException) -> str:
    """A driver exception as one readable line (libpq messages carry tabs and hints)."""
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return " ".join(text.split())


def database_error(exc: BaseException, deadlock: bool = False) -> DatabaseError:
    """A driver's error as the runtime's DatabaseError (raise it ``from exc``)."""
    error = DatabaseError(f"{type(exc).__name__}: {first_line(exc)}")
    error.deadlock = deadlock
    return error


class _Nothing:
    """Done at once: an awaitable whose value is None, and an async context manager that
    does nothing. Entered, left or awaited without a coroutine made for it (the async
    methods of ``contextlib.nullcontext`` make one each), for the hot paths."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return iter(())  # type: ignore[return-value] # an iterator that ends at once will do

    def __aenter__(self) -> _Nothing:
        return self

    def __aexit__(self, *exc: object) -> _Nothing:
        return self  # None: an exception goes on


NOTHING = _Nothing()


@contextlib.asynccontextmanager
async def atomic(conn: Any, immediate: bool = False) -> AsyncIterator[None]:
    """Run the block in a transaction unless one is open: begin now, commit at the end, roll
    back on any error (or cancellation). Inside the caller's transaction it adds nothing: the
    caller's commit decides. ``conn`` is a Connection or an adapted service connection."""
    if conn.in_transaction:
        yield
        return
    await conn.begin(immediate)
    try:
        yield
    except BaseException:
        if not conn.closed:
            await conn.rollback()
        raise
    await conn.commit()


class Connection(abc.ABC):
    """One open database connection, async, in autocommit mode outside begin()/commit()."""

    #: the dialect of the server actually reached (a mysql:// URL on MariaDB gets "mariadb")
    dialect: Dialect
    #: the server's version, as (major, minor, patch); set by ``runtime.connect``
    server_version: tuple[int, int, int]
    #: the URL this connection was opened with, password masked
    url: str

    def __init__(self, url: str, dialect: Dialect) -> None:
        self.url = redact_url(url)
        self.dialect = dialect
        self.server_version = (0, 0, 0)
        self._in_transaction = False
        self._closed = False
        #: a step of several statements in a transaction of its own (``run_script``) may run
        #: on the event loop's thread when nothing is in its way, rather than on the
        #: connection's thread (the SQLite driver; the others have no thread to skip). Set by
        #: a Consumer on its workers' connections, whose claims and settlements are each a
        #: moment long; a step of a connection's other users may take any time, and would
        #: hold up the loop for it.
        self.inline_steps = False

    # ----------------------------------------------------------------- state

    @property
    def closed(self) -> bool:
        """True once close()/abort() ran or the connection was found lost."""
        return self._closed

    @property
    def in_transaction(self) -> bool:
        """True between a successful begin() and the commit()/rollback() that ends it."""
        return self._in_transaction

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("in transaction" if self._in_transaction else "idle")
        return f"<{type(self).__name__} {self.url} {self.dialect.name} {state}>"

    # ------------------------------------------------------------ statements

    @abc.abstractmethod
    async def execute(self, sql: str, params: Params | None = None) -> int:
        """Run one statement; return its rowcount.

        The rowcount is the number of rows matched by an UPDATE/DELETE (on MySQL/MariaDB too:
        the connection sets CLIENT.FOUND_ROWS), inserted by an INSERT, or returned by a query.
        """

    @abc.abstractmethod
    async def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        """Run one statement and return all its rows as dicts (``[]`` if it returns none)."""

    async def fetchrows(self, sql: str, params: Params | None = None) -> Rows:
        """Run one statement and return its column names and its rows as tuples in that
        order (``((), [])`` if it returns none): a claim's batch, read without a dict a row.
        Drivers that can hand tuples over as they read them override it."""
        rows = await self.fetchall(sql, params)
        names = tuple(rows[0]) if rows else ()
        return names, [tuple(row.values()) for row in rows]

    async def begin_fetchrows(self, sql: str, params: Params | None = None) -> Rows:
        """``begin(immediate=True)``, then ``fetchrows`` in the transaction it opened (a
        row-lock claim, whose rows stay locked until its COMMIT). A driver that runs
        statements on a thread of its own overrides it to send both in one trip there. When
        the statement fails the transaction stays open: the caller rolls it back."""
        await self.begin(immediate=True)
        return await self.fetchrows(sql, params)

    async def execute_commit(self, sql: str, params: Params | None = None) -> int:
        """``execute``, then ``commit`` the open transaction (a row-lock batch's last
        settlement and its COMMIT); the statement's rowcount. A driver that runs statements
        on a thread of its own overrides it to send both in one trip there. When the
        statement fails the transaction stays open: the caller rolls it back."""
        self._check_commit()
        changed = await self.execute(sql, params)
        await self.commit()
        return changed

    #: ``commit_begin`` sends the COMMIT and the next BEGIN in one trip
    chains_transactions: ClassVar[bool] = False

    async def commit_begin(self) -> None:
        """Commit the open transaction and open the next one (a row-lock worker about to
        claim again: its claim then goes without a BEGIN of its own). A driver that can send
        both in one trip overrides it and sets ``chains_transactions``; here, one after the
        other. When the COMMIT fails no transaction is opened."""
        await self.commit()
        await self.begin()

    async def _script_trip(self, call: Callable[..., Awaitable[Rows]], *args: Any) -> Rows:
        """``run_script`` in one trip to the connection's thread: ``call(*args, own,
        abandoned)`` runs the whole step there, in the caller's transaction or (``own``) in one
        of its own, BEGIN and COMMIT included. A caller cancelled meanwhile leaves the thread
        to finish the step, which then rolls back instead of committing (``abandoned[0]``,
        read before its COMMIT; unless it committed already: then as a reply lost after a
        commit)."""
        own = not self._in_transaction
        if own:
            self._check_begin()
        abandoned = [False]
        try:
            return await call(*args, own, abandoned)
        except asyncio.CancelledError:
            abandoned[0] = True
            raise

    async def run_script(self, script: Script) -> Rows:
        """Run a step of several statements (``script``) in one transaction: the caller's
        when one is open, else its own, committed at the end and rolled back on any error or
        cancellation. A driver that runs statements on a thread of its own overrides it to
        run the whole step in one trip there (``_script_trip``: MySQL/MariaDB, SQLite)."""
        async with atomic(self):
            try:
                sql, params, returns_rows = next(script)
                while True:
                    if returns_rows:
                        got: Rows | None = await self.fetchrows(sql, params)
                    else:
                        await self.execute(sql, params)
                        got = None
                    sql, params, returns_rows = script.send(got)
            except StopIteration as done:
                result: Rows = done.value
        return result

    @abc.abstractmethod
    async def fetchone(self, sql: str, params: Params | None = None) -> Row | None:
        """Run one statement and return its first row as a dict, or None."""

    @abc.abstractmethod
    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        """Run one statement once per params mapping, on the driver's batch fast path.

        Outside begin()/commit() each row commits on its own, so a failure part-way leaves the
        earlier rows in place: wrap the call in a transaction for an all-or-nothing batch.
        """

    async def ping(self) -> None:
        """One round trip to the server (a heartbeat); ConnectionLost when it is gone."""
        await self.fetchone("SELECT 1 AS ok")

    # ---------------------------------------------------------- transactions

    @abc.abstractmethod
    async def begin(self, immediate: bool = False) -> None:
        """Open a transaction. ``immediate=True`` takes SQLite's write lock now (BEGIN IMMEDIATE);
        other engines ignore it. Raises RuntimeError if a transaction is already open, because
        MySQL would silently commit it and SQLite would refuse."""

    @abc.abstractmethod
    async def commit(self) -> None:
        """Commit the open transaction. Raises RuntimeError if none is open."""

    @abc.abstractmethod
    async def rollback(self) -> None:
        """Roll back the open transaction; a no-op when none is open (safe in cleanup paths)."""

    async def savepoint(self, name: str) -> None:
        """Set a savepoint inside the open transaction."""
        await self._savepoint_sql("SAVEPOINT", name)

    async def release_savepoint(self, name: str) -> None:
        """Forget a savepoint, keeping what was done since."""
        await self._savepoint_sql("RELEASE SAVEPOINT", name)

    async def rollback_to_savepoint(self, name: str) -> None:
        """Undo everything since the savepoint; the transaction stays open."""
        await self._savepoint_sql("ROLLBACK TO SAVEPOINT", name)

    async def _savepoint_sql(self, verb: str, name: str) -> None:
        if not _SAVEPOINT_NAME.match(name):
            raise ValueError(f"savepoint name {name!r} is not a plain identifier")
        self._check_open()
        # Outside a transaction PostgreSQL errors, MySQL's autocommit drops the savepoint at once
        # and SQLite's SAVEPOINT silently opens a transaction: refuse the same way everywhere.
        if not self._in_transaction:
            raise RuntimeError(f"{verb} {name} needs an open transaction: call begin() first")
        await self._control(f"{verb} {name}")

    async def _control(self, sql: str) -> None:
        """Run a transaction-control statement (drivers may skip statement preparation)."""
        await self.execute(sql)

    def writing(self) -> contextlib.AbstractAsyncContextManager[None]:
        """Hold this database's writer turn across several statements outside a transaction
        (SQLite: the file's writer lock, see drivers/sqlite.py; a no-op on servers)::

            async with conn.writing():
                for d in held: await extend(conn, d)
        """
        return contextlib.nullcontext()

    def notifies(self, timeout: float | None = None) -> AsyncIterator[str]:
        """The channel of each notification this connection receives after it ran a rendered
        ``listen`` statement, as they arrive, until the connection is lost (ConnectionLost),
        or until ``timeout`` seconds have passed (the iteration then ends, so the caller can
        check the connection and listen on). Only engines whose dialect has
        ``listen_notify`` deliver them."""
        raise NotImplementedError(f"{self.dialect.name} delivers no notifications")

    # ------------------------------------------------------------- lifecycle

    @abc.abstractmethod
    async def close(self) -> None:
        """Close the connection cleanly (an open transaction rolls back). Idempotent; never
        raises."""

    @abc.abstractmethod
    async def abort(self) -> None:
        """Drop the connection hard, without the protocol's goodbye, waking any statement in
        flight with ConnectionLost; the server rolls back what was open. Never raises."""

    @abc.abstractmethod
    async def server_version_text(self) -> str:
        """The server's own version string (``SHOW server_version_num``, ``SELECT VERSION()``,
        ``sqlite3.sqlite_version``), read by ``runtime.connect`` for the floor check."""

    async def server_identity(self) -> str:
        """What the server says of itself beyond its version, for ``dialects.recognise``: a
        cluster node, a distributed engine or a managed fork speaking this protocol (one round
        trip; the version text where there is nothing more to read)."""
        return await self.server_version_text()

    async def __aenter__(self) -> Connection:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    # --------------------------------------------------------------- helpers

    def _check_open(self) -> None:
        if self._closed:
            raise ConnectionLost(f"the connection to {self.url} is closed")

    def _check_begin(self) -> None:
        self._check_open()
        if self._in_transaction:
            raise RuntimeError(
                "begin() while a transaction is open: commit() or rollback() it first"
            )

    def _check_commit(self) -> None:
        self._check_open()
        if not self._in_transaction:
            raise RuntimeError("commit() with no open transaction: call begin() first")

    def _lost(self, exc: BaseException) -> ConnectionLost:
        """Mark the connection dead, free its resources, and build the error to raise.

        Drivers call it when an error means the session is gone, and for any error raised by a
        statement on a connection that was closed or aborted (by another task) while it ran.
        """
        self._closed = True
        self._in_transaction = False
        # Best effort: the connection is already gone, so a failure to free it changes nothing.
        with contextlib.suppress(Exception):
            self._release_hard()
        return ConnectionLost(f"lost the connection to {self.url}: {first_line(exc)}")

    @abc.abstractmethod
    def _release_hard(self) -> None:
        """Synchronously drop the socket/handle without a goodbye. Must tolerate repeats."""
