"""The MySQL/MariaDB driver: PyMySQL, run on one dedicated thread per connection.

PyMySQL is blocking, so every call runs off the event loop on the connection's own thread
(``runtime.drivers.thread``): one thread means calls reach the server in the order they were
made.
The session is set up for a queue: autocommit on, READ COMMITTED, utf8mb4, rows as dicts,
time_zone '+00:00', and CLIENT.FOUND_ROWS so an UPDATE's rowcount counts the rows it matched
(not only those it changed): settlements check rowcount, and re-setting a column to the value it
already holds must still count as "the row was there".
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar

from runtime.contract.dialects import DIALECTS, Dialect
from runtime.contract.errors import ConfigurationError, ConnectionLost
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
from runtime.drivers.private import mysql_force_close, mysql_socket
from runtime.drivers.thread import CallThread

if TYPE_CHECKING:
    import pymysql
    from pymysql.cursors import DictCursor

T = TypeVar("T")

# Client/server error numbers that mean the session is gone:
# 2003 can't connect, 2006 server has gone away, 2013 lost connection during query,
# 2014/2055 lost connection / commands out of sync on a dead socket,
# 1053 server shutdown in progress, 1927 connection was killed (MariaDB),
# 4031 disconnected by the server for inactivity (MySQL 8.0.24+).
_LOST_ERRNOS = frozenset({2003, 2006, 2013, 2014, 2055, 1053, 1927, 4031})
# Errors at connect time that retrying will not fix: access denied, unknown database.
_CONFIG_ERRNOS = frozenset({1044, 1045, 1049, 1698})
# How long close() waits for a statement in flight before dropping the socket instead.
_CLOSE_TIMEOUT = 5.0
# PyMySQL's options unless the URL (or the caller's keyword arguments) sets them, in seconds:
# connect_timeout per host; read_timeout bounds the wait for any one reply (a server that is
# up but never answers: generous, so a handler's own long statement and a lock wait fit);
# write_timeout, the wait for the server to take a request, is read_timeout's value unless
# set: PyMySQL sets the socket's timeout again whenever it turns from writing to reading with
# two different values, twice a statement, and each such call lets go of the GIL (a queue's
# worker threads then wait on each other). tcp_user_timeout below bounds a write to a dead
# peer in any case.
DEFAULT_OPTIONS: dict[str, int] = {
    "connect_timeout": 10,
    "read_timeout": 300,
}
# The socket's TCP keepalives and user timeout (as libpq names them; tcp_user_timeout in
# milliseconds), so an idle connection, or one awaiting a reply, notices a silently dead peer
# after idle + interval * count = 60 s, as on PostgreSQL. keepalives=0 turns them off.
DEFAULT_KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}
_KEEPALIVE_SOCKOPTS = (
    ("keepalives_idle", "TCP_KEEPIDLE"),
    ("keepalives_interval", "TCP_KEEPINTVL"),
    ("keepalives_count", "TCP_KEEPCNT"),
    ("tcp_user_timeout", "TCP_USER_TIMEOUT"),
)
# Session variables a URL may set (the names are fixed here, the values travel bound).
# innodb_lock_wait_timeout defaults to 30 s, or the server's own value when that is shorter: a
# queue's statements never wait long for a lock (claims skip locked rows). MariaDB's
# max_statement_time and MySQL's max_execution_time (milliseconds, SELECT only) stay off
# unless the URL sets them: they would also end a handler's own long statements.
SESSION_VARIABLES = ("innodb_lock_wait_timeout", "max_statement_time", "max_execution_time")
_DEFAULT_LOCK_WAIT = (
    "SET SESSION innodb_lock_wait_timeout = LEAST(@@session.innodb_lock_wait_timeout, 30)"
)
_SESSION_SETUP = (
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    # DATETIME has no zone: pin the session's so NOW() means the same on every server.
    "SET time_zone = '+00:00'",
)


# connect(read_only=True): no transaction of the session can write
_READ_ONLY = "SET SESSION TRANSACTION READ ONLY"

#: ER_LOCK_DEADLOCK: InnoDB rolled the whole transaction back
_DEADLOCK = 1213


#: an INSERT whose one row of values ends it: ``INSERT INTO t (a, b) VALUES (…)``
_INSERT_VALUES = re.compile(r"(\s*INSERT\b.*?\bVALUES\s*)(\(.*\))\s*\Z", re.I | re.S)
#: a multi-row INSERT is cut before it passes this many bytes (as PyMySQL cuts its own), far
#: under the servers' max_allowed_packet (16 MiB on MariaDB, 64 MiB on MySQL 8.0 by default)
INSERT_BYTES = 1_000_000


def _one_row(values: str) -> bool:
    """Whether ``values`` is one parenthesised row: its first parenthesis closes at its end
    (quoted text skipped), so ``(…) ON DUPLICATE KEY UPDATE c = VALUES(c)`` is not."""
    depth, quote = 0, ""
    for i, ch in enumerate(values):
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i == len(values) - 1
    return False


def insert_rows(cur: Any, sql: str, seq: Sequence[Params]) -> int:
    """``executemany`` of an INSERT … VALUES (…) on a PyMySQL cursor as multi-row INSERTs of
    up to INSERT_BYTES: a round trip per chunk, not per row. PyMySQL rewrites only rows of
    bare placeholders, and a rendered enqueue's row holds expressions
    (``UTC_TIMESTAMP(6) + INTERVAL %(delay_s)s SECOND``). Each row's values are escaped by the
    cursor's own ``mogrify``, as its ``execute`` escapes them. Any other statement: the
    cursor's ``executemany``. Returns the rows written."""
    found = _INSERT_VALUES.match(sql)
    # a head that binds a value itself (a placeholder in a comment before VALUES) is left to
    # the cursor: only the row is formatted for each item
    if found is None or not seq or "%(" in found.group(1) or not _one_row(found.group(2)):
        return int(cur.executemany(sql, seq) or 0)
    head = found.group(1).replace("%%", "%")  # as execute's formatting leaves it
    values = found.group(2)
    written, size = 0, len(head)
    chunk: list[str] = []
    for params in seq:
        row = cur.mogrify(values, params)
        n = len(row) if row.isascii() else len(row.encode())
        if chunk and size + n + 1 > INSERT_BYTES:
            written += cur.execute(head + ",".join(chunk))
            chunk, size = [], len(head)
        chunk.append(row)
        size += n + 1
    return written + int(cur.execute(head + ",".join(chunk)))


class MySQLConnection(Connection):
    """A PyMySQL connection driven from asyncio through its own thread."""

    def __init__(
        self,
        my: pymysql.connections.Connection[DictCursor],
        thread: CallThread,
        url: str,
        dialect: Dialect,
        errors: ModuleType,
    ) -> None:
        super().__init__(url, dialect)
        self._my = my
        self._thread = thread
        self._err = errors
        # One DictCursor reused for every statement: it only ever runs on the connection's
        # thread.
        self._cur = my.cursor()
        #: and one that hands rows over as tuples (``fetchrows``: a claim's batch)
        import pymysql.cursors

        self._tuples = my.cursor(pymysql.cursors.Cursor)

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on this connection's thread, translating a lost connection."""
        if self._closed:
            self._check_open()
        try:
            return await self._thread.call(fn, *args)
        except Exception as exc:
            if self._closed or self._is_lost(exc):
                raise self._lost(exc) from exc
            if isinstance(exc, self._err.MySQLError):
                raise database_error(exc, deadlock=exc.args[:1] == (_DEADLOCK,)) from exc
            raise

    # ------------------------------------------------------------ statements
    # These run on the connection's thread.

    def _sync_execute(self, sql: str, params: Params) -> int:
        cur = self._cur
        cur.execute(sql, params)
        return cur.rowcount

    def _sync_fetchall(self, sql: str, params: Params) -> list[Row]:
        cur = self._cur
        cur.execute(sql, params)
        rows = cur.fetchall()
        # DictCursor hands back its own list (or an empty tuple for a statement without rows).
        return rows if isinstance(rows, list) else list(rows)

    def _sync_fetchrows(self, sql: str, params: Params) -> Rows:
        cur = self._tuples
        cur.execute(sql, params)
        if cur.description is None:
            return (), []
        return tuple(d[0] for d in cur.description), list(cur.fetchall())

    def _sync_fetchone(self, sql: str, params: Params) -> Row | None:
        cur = self._cur
        cur.execute(sql, params)
        return cur.fetchone()

    def _sync_script(self, script: Script, own: bool, abandoned: list[bool]) -> Rows:
        """``run_script`` on the thread: BEGIN (``own``), every statement, COMMIT; ROLLBACK on
        an error, and instead of the COMMIT when the caller was cancelled meanwhile."""
        my = self._my
        if own:
            my.begin()
        try:
            sql, params, returns_rows = next(script)
            while True:
                if returns_rows:
                    got: Rows | None = self._sync_fetchrows(sql, params)
                else:
                    self._sync_execute(sql, params)
                    got = None
                sql, params, returns_rows = script.send(got)
        except StopIteration as done:
            result: Rows = done.value
        except BaseException:
            if own:
                with contextlib.suppress(Exception):
                    my.rollback()
            raise
        if own:
            if abandoned[0]:  # nobody waits for its rows: nothing of it stands
                my.rollback()
            else:
                my.commit()
        return result

    def _sync_execute_commit(self, sql: str, params: Params, ran: list[bool]) -> int:
        changed = self._sync_execute(sql, params)
        ran[0] = True  # a COMMIT that fails has ended the transaction either way
        self._my.commit()
        return changed

    def _sync_executemany(self, sql: str, seq: list[Params]) -> None:
        insert_rows(self._cur, sql, seq)

    # -------------------------------------------------------- async surface

    async def execute(self, sql: str, params: Params | None = None) -> int:
        return await self._call(self._sync_execute, sql, {} if params is None else params)

    async def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        return await self._call(self._sync_fetchall, sql, {} if params is None else params)

    async def fetchrows(self, sql: str, params: Params | None = None) -> Rows:
        return await self._call(self._sync_fetchrows, sql, {} if params is None else params)

    async def fetchone(self, sql: str, params: Params | None = None) -> Row | None:
        return await self._call(self._sync_fetchone, sql, {} if params is None else params)

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        await self._call(self._sync_executemany, sql, list(seq_of_params))

    async def run_script(self, script: Script) -> Rows:
        """The whole step in one trip to the connection's thread (BEGIN, each statement,
        COMMIT), where each statement was a trip of its own."""
        return await self._script_trip(self._call, self._sync_script, script)

    async def begin(self, immediate: bool = False) -> None:
        self._check_begin()
        try:
            await self._call(self._my.begin)
        except asyncio.CancelledError:
            # Cancelling the await does not stop the thread: BEGIN still runs, ahead of any
            # later statement, so the transaction counts as open (rollback() ends it).
            self._in_transaction = not self._closed
            raise
        self._in_transaction = True

    async def execute_commit(self, sql: str, params: Params | None = None) -> int:
        """The statement and the COMMIT in one trip to the connection's thread."""
        self._check_commit()
        ran = [False]
        try:
            changed = await self._call(
                self._sync_execute_commit, sql, {} if params is None else params, ran
            )
        except asyncio.CancelledError:
            self._in_transaction = not self._closed  # the caller rolls back (a no-op if ended)
            raise
        except Exception:
            self._in_transaction = not ran[0] and not self._closed  # the statement refused
            raise
        self._in_transaction = False
        return changed

    async def commit(self) -> None:
        self._check_commit()
        try:
            await self._call(self._my.commit)
        finally:
            # A COMMIT that fails on MySQL/MariaDB has ended the transaction either way, and a
            # cancelled one still runs to its end on the thread.
            self._in_transaction = False

    async def rollback(self) -> None:
        if self._closed or not self._in_transaction:
            return
        try:
            await self._call(self._my.rollback)
        finally:
            self._in_transaction = False

    async def _control(self, sql: str) -> None:
        await self._call(self._sync_execute, sql, {})

    # ------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        thread = self._thread
        if not thread.running:  # already released
            return
        self._closed = True
        self._in_transaction = False
        try:
            # COM_QUIT, queued behind anything still running on the thread; bounded, so a
            # statement stuck on a lock cannot make close() hang.
            await asyncio.wait_for(thread.call(self._my.close), _CLOSE_TIMEOUT)
        except Exception:
            # close() never raises: drop the socket instead.
            with contextlib.suppress(Exception):
                self._release_hard()
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                self._release_hard()
            raise
        finally:
            thread.shutdown()

    async def abort(self) -> None:
        self._closed = True
        self._in_transaction = False
        with contextlib.suppress(Exception):
            self._release_hard()

    def _release_hard(self) -> None:
        # shutdown() (not close()) from this thread: a recv() blocked on the connection's thread
        # returns at once, PyMySQL raises "Lost connection" there, and no COM_QUIT is sent.
        sock = mysql_socket(self._my)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        thread = self._thread
        if thread.running:
            # Free the descriptor after whatever is still queued on the thread has failed.
            with contextlib.suppress(RuntimeError):
                thread.post(mysql_force_close, self._my)
            thread.shutdown()

    async def server_version_text(self) -> str:
        row = await self.fetchone("SELECT VERSION() AS v")
        return str(row["v"]) if row else ""

    async def server_identity(self) -> str:
        # one statement every MySQL-protocol server answers; a variable it lacks is left out
        rows = await self.fetchall(
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
            "('version', 'version_comment', 'wsrep_on', 'aurora_version')"
        )
        return "; ".join(f"{r['Variable_name']}={r['Value']}" for r in rows)

    def _is_lost(self, exc: BaseException) -> bool:
        err = self._err
        if isinstance(exc, err.InterfaceError):
            # PyMySQL raises InterfaceError(0, '') for any use of a closed connection.
            return True
        if isinstance(exc, err.OperationalError) and exc.args and exc.args[0] in _LOST_ERRNOS:
            return True
        if isinstance(exc, OSError | EOFError):
            return True
        # Whatever the error, a connection whose socket PyMySQL dropped is gone.
        return not self._my.open


async def open_mysql(
    url: str,
    *,
    hosts: list[tuple[str, int]],
    user: str | None,
    password: str | None,
    database: str | None,
    dialect_name: str,
    options: dict[str, Any],
    read_only: bool = False,
    **kwargs: Any,
) -> MySQLConnection:
    """Connect with PyMySQL; the dialect is provisional until ``runtime.connect`` reads VERSION().

    ``hosts`` are tried in order; the first that answers is the one used (a login it refuses is
    not retried on the next). ``options`` come from the URL's query string; ``kwargs`` go to
    ``pymysql.connect`` and win over both. Autocommit, the cursor class, utf8mb4 and FOUND_ROWS
    are fixed.
    """
    pymysql_mod = import_driver("pymysql", "mysql")
    # the module PyMySQL raises from, by its own name: ``pymysql.err`` the attribute is replaced
    # by a second copy once something imports ``MySQLdb.err`` after install_as_MySQLdb()
    # (Django's MySQL backend on PyMySQL), and that copy's classes match none of its errors
    errors = import_driver("pymysql.err", "mysql")
    import pymysql.constants.CLIENT as client_flags
    import pymysql.cursors

    options = dict(options)
    keepalives = {k: options.pop(k, v) for k, v in DEFAULT_KEEPALIVES.items()}
    session = {k: options.pop(k) for k in SESSION_VARIABLES if k in options}
    params: dict[str, Any] = {
        "user": user,
        "password": password or "",
        "database": database,
        **DEFAULT_OPTIONS,
    }
    params.update(options)
    params.update(kwargs)
    params.setdefault("write_timeout", params["read_timeout"])
    params.update(
        charset="utf8mb4",
        cursorclass=pymysql.cursors.DictCursor,
        autocommit=True,
        client_flag=int(kwargs.get("client_flag", 0)) | client_flags.FOUND_ROWS,
    )
    safe_url = redact_url(url)
    thread = CallThread("qgen-mysql")

    def connect_and_setup(host: str, port: int) -> pymysql.connections.Connection[DictCursor]:
        my: pymysql.connections.Connection[DictCursor] = pymysql_mod.connect(
            host=host, port=port, **params
        )
        try:
            _set_keepalives(my, keepalives)
            with my.cursor() as cur:
                for statement in _SESSION_SETUP + ((_READ_ONLY,) if read_only else ()):
                    cur.execute(statement)
                if "innodb_lock_wait_timeout" not in session:
                    cur.execute(_DEFAULT_LOCK_WAIT)
                for name, value in session.items():  # name: one of SESSION_VARIABLES
                    try:
                        cur.execute(f"SET SESSION {name} = %s", (value,))
                    except errors.Error as exc:
                        if exc.args and exc.args[0] in _LOST_ERRNOS:
                            raise
                        # an unknown variable (max_statement_time is MariaDB's), a value out
                        # of range: retrying will not help
                        raise ConfigurationError(
                            f"cannot set {name}={value} at {safe_url}: {first_line(exc)}; fix "
                            "or remove that option of the URL"
                        ) from exc
        except BaseException:
            mysql_force_close(my)
            raise
        return my

    failures: list[str] = []
    last: BaseException | None = None
    try:
        for host, port in hosts:
            try:
                my = await thread.call(connect_and_setup, host, port)
            except (errors.Error, OSError) as exc:
                errno = exc.args[0] if exc.args else None
                if errno in _CONFIG_ERRNOS:
                    raise ConfigurationError(
                        f"cannot log in at {safe_url}: {first_line(exc)}"
                    ) from exc
                failures.append(f"{_host_port(host, port)}: {first_line(exc)}")
                if len(hosts) == 1:
                    failures[-1] = first_line(exc)
                last = exc
                continue
            return MySQLConnection(my, thread, url, DIALECTS[dialect_name], errors)
    except BaseException:
        thread.shutdown()
        raise
    thread.shutdown()
    if len(failures) == 1:
        raise ConnectionLost(f"cannot connect to {safe_url}: {failures[0]}") from last
    raise ConnectionLost(
        f"cannot connect to {safe_url}: none of its {len(hosts)} hosts answered: "
        + "; ".join(failures)
    ) from last


def _host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def _set_keepalives(
    my: pymysql.connections.Connection[DictCursor], keepalives: dict[str, int]
) -> None:
    """Turn TCP keepalives on for the connection's socket (not a Unix socket's), with the
    idle/interval/count and user timeout given; options this platform lacks are skipped."""
    sock = mysql_socket(my)
    if sock is None or sock.family == socket.AF_UNIX:
        return
    # PyMySQL turns keepalives on with the system's timings (two hours idle on Linux)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1 if keepalives["keepalives"] else 0)
    if not keepalives["keepalives"]:
        return
    for key, option in _KEEPALIVE_SOCKOPTS:
        number = getattr(socket, option, None)
        if number is not None:
            sock.setsockopt(socket.IPPROTO_TCP, number, keepalives[key])
