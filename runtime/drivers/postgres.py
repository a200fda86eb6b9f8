"""The PostgreSQL driver: psycopg 3's AsyncConnection behind the runtime's Connection interface.

The connection runs with ``autocommit=True`` and ``dict_row``; transactions are opened with a
plain ``BEGIN`` and ended with psycopg's commit()/rollback(), which send COMMIT/ROLLBACK only when
libpq says a transaction is open. psycopg's automatic prepared statements stay on (the default
``prepare_threshold``): a queue runs the same few statements millions of times. On PostgreSQL
12 and later the session plans each prepared statement once (``plan_cache_mode =
force_generic_plan``): a queue's statements read the same index whatever their parameters,
and by default PostgreSQL would re-plan a claim at every call once its table is big (a
``LIMIT $n`` is estimated at a tenth of the table, which makes the one-off plan look dear).
The templates are written to plan well without the parameters' values (the lease claim picks
its ids with ``= ANY(ARRAY(…))``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

from runtime.contract.dialects import DIALECTS
from runtime.contract.errors import ConfigurationError, ConnectionLost
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

if TYPE_CHECKING:
    import psycopg

log = logging.getLogger("runtime")

# Server-sent errors that end the session: admin_shutdown, crash_shutdown, cannot_connect_now.
# (Class 08, connection_exception, is matched by prefix.) And read_only_sql_transaction: the
# server reached is (or became) a standby, or a primary demoted to read-only; the session can
# never write again, so it is dropped like a lost one and the next connection (libpq's
# target_session_attrs=read-write, the default here) finds the writable host.
_READ_ONLY = "25006"
_LOST_SQLSTATES = frozenset({"57P01", "57P02", "57P03", _READ_ONLY})
#: deadlock_detected and serialization_failure: the server rolled the transaction back whole
#: because another one conflicted with it (a race, retried like InnoDB's deadlock)
_CONFLICT_SQLSTATES = frozenset({"40P01", "40001"})


def _is_conflict(exc: BaseException) -> bool:
    return getattr(exc, "sqlstate", None) in _CONFLICT_SQLSTATES


#: seconds between two warnings that the server of one URL is read-only
READ_ONLY_WARNING_EVERY = 60.0
_read_only_warned: dict[str, float] = {}
# Connection parameters libpq gets unless the URL (or the caller's keyword arguments) sets
# them. libpq waits forever for an unreachable host unless told otherwise (connect_timeout,
# seconds, per host); only a writable server will do for a queue (target_session_attrs,
# which also makes a URL listing several hosts skip standbys); TCP keepalives (an idle
# connection or one awaiting a reply notices a silently dead peer after idle + interval *
# count = 60 s) and tcp_user_timeout (milliseconds data sent may stay unacknowledged: the same
# bound while sending).
DEFAULT_PARAMETERS: dict[str, str | int] = {
    "connect_timeout": 10,
    "target_session_attrs": "read-write",
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
    "tcp_user_timeout": 60_000,
}
# Session settings set at connect, each only where nobody else set it (pg_settings.source is
# 'default': the server's configuration, ALTER ROLE/DATABASE … SET and the URL's
# options=-c name=value all win). lock_timeout: a queue's statements never wait long for a
# lock (claims skip locked rows), so a wait past 30 s is a stuck session or a migration and
# the statement fails (its batch's rows return) instead of queueing up behind it.
# statement_timeout: a bound on a runaway statement, generous enough for a handler's own work
# and a purge. idle_in_transaction_session_timeout is left alone (off): a transactional
# consumer's session sits idle in its transaction while the handler runs, so any value must
# exceed the handler's longest run (handler_timeout). The server's own TCP keepalives and
# user timeout (its defaults are the system's: two hours idle on Linux): a client lost in a
# silent partition is noticed in about a minute, its session ends and its transaction rolls
# back, so the rows a row-lock batch held return then, not hours later. jit: a queue's
# statements are short index reads, and their generic plans (see the module) estimate a
# ``LIMIT $n`` at a tenth of the table: at a million rows a claim with a per-row subquery
# (concurrency_limit, fifo_key) looks dear enough that PostgreSQL JIT-compiled it at every
# call, 2.8 s of compiling for 0.5 ms of work.
DEFAULT_SETTINGS: dict[str, str] = {
    "jit": "off",
    "lock_timeout": "30s",
    "statement_timeout": "5min",
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
    "tcp_user_timeout": "60000",
}
# Set on every connection whatever its source (see the module's docstring); a server without
# the setting (plan_cache_mode is PostgreSQL 12+) skips it.
_FIXED_SETTINGS: dict[str, str] = {"plan_cache_mode": "force_generic_plan"}
# A read-only connection (connect(read_only=True): stats, the dead-letter listing on a
# replica) prefers a standby, and no transaction of its session can write.
READ_ONLY_PARAMETERS: dict[str, str | int] = {"target_session_attrs": "prefer-standby"}
_READ_ONLY_SETTINGS: dict[str, str] = {"default_transaction_read_only": "on"}
_SESSION_SETUP = (
    "SELECT set_config(d.name, d.value, false) "
    "FROM (SELECT unnest(%(names)s::text[]) AS name, unnest(%(values)s::text[]) AS value, "
    "unnest(%(fixed)s::boolean[]) AS fixed) AS d "
    "JOIN pg_settings AS s ON s.name = d.name "
    "WHERE d.fixed OR s.source = 'default'"
)
# What libpq says when a connection is refused for a reason that retrying cannot fix. libpq
# gives no SQLSTATE for a failed connection, only the server's or its own words (in English
# unless the server's lc_messages says otherwise; a refusal not recognised here is taken as
# transient and retried). The server's: invalid_password 28P01, invalid_authorization_
# specification 28000 (unknown role, no pg_hba.conf entry), invalid_catalog_name 3D000,
# insufficient_privilege 42501 (no CONNECT on the database). libpq's own: a password it does
# not have, an sslmode the server cannot meet, a connection option it cannot read; and a
# setting in the URL's options=-c … the server refuses (22023, 42704).
_CONFIG_REFUSALS = re.compile(
    r"password authentication failed"
    r"|authentication failed for user"
    r"|role \S+ does not exist"
    r"|database \S+ does not exist"
    r"|no pg_hba\.conf entry"
    r"|pg_hba\.conf rejects connection"
    r"|permission denied for database"
    r"|is not permitted to log in"
    r"|no password supplied"
    r"|server does not support SSL, but SSL was required"
    r"|invalid \w+ value"
    r"|invalid (?:connection option|URI|integer value|port number)"
    r"|invalid value for parameter"
    r"|unrecognized configuration parameter",
    re.IGNORECASE,
)


#: libpq's result statuses of a statement that returned rows (``psycopg.pq.ExecStatus``:
#: TUPLES_OK, SINGLE_TUPLE, TUPLES_CHUNK)
_ROW_STATUSES = frozenset({2, 9, 12})


def _returns_rows(res: Any) -> bool:
    """Whether a statement's result is a set of rows (psycopg's ``cursor.description`` is
    not None), read off the result itself: ``description`` builds a Column object for each
    column at every access, which a claim's hot path would pay twice a statement."""
    return res is not None and (res.nfields > 0 or res.status in _ROW_STATUSES)


class PostgresConnection(Connection):
    """A psycopg 3 AsyncConnection in autocommit mode with dict rows."""

    def __init__(self, pg: psycopg.AsyncConnection[Row], url: str) -> None:
        super().__init__(url, DIALECTS["postgres"])
        self._pg = pg
        import psycopg
        from psycopg.rows import tuple_row

        self._driver_error = psycopg.Error
        self._tuple_row = tuple_row
        #: the client encoding's Python codec, which column names arrive in
        self._encoding = pg.info.encoding

    # ------------------------------------------------------------ statements
    # Each method has its own small try/except instead of sharing a wrapper: this is the hot
    # path the benchmark measures against bare psycopg, and a wrapper costs an extra await.

    def _translated(self, exc: Exception) -> Exception | None:
        """What a statement's failure raises instead (``from`` the driver's): ConnectionLost
        when the connection is gone, a DatabaseError for the server's refusal; None: the
        failure itself, as it is."""
        if self._closed or self._is_lost(exc):
            return self._lost(exc)
        if isinstance(exc, self._driver_error):
            return database_error(exc, deadlock=_is_conflict(exc))
        return None

    async def execute(self, sql: str, params: Params | None = None) -> int:
        if self._closed:
            self._check_open()
        try:
            cur = await self._pg.execute(sql, {} if params is None else params)
        except Exception as exc:
            if (translated := self._translated(exc)) is None:
                raise
            raise translated from exc
        return cur.rowcount

    async def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        if self._closed:
            self._check_open()
        try:
            cur = await self._pg.execute(sql, {} if params is None else params)
            if not _returns_rows(cur.pgresult):
                return []
            return await cur.fetchall()
        except Exception as exc:
            if (translated := self._translated(exc)) is None:
                raise
            raise translated from exc

    async def fetchrows(self, sql: str, params: Params | None = None) -> Rows:
        if self._closed:
            self._check_open()
        try:
            cur = self._pg.cursor(row_factory=self._tuple_row)
            await cur.execute(sql, {} if params is None else params)
            res = cur.pgresult
            if res is None or not _returns_rows(res):
                return (), []
            decode = self._encoding
            names = tuple(bytes(res.fname(i) or b"").decode(decode) for i in range(res.nfields))
            return names, await cur.fetchall()
        except Exception as exc:
            if (translated := self._translated(exc)) is None:
                raise
            raise translated from exc

    async def fetchone(self, sql: str, params: Params | None = None) -> Row | None:
        if self._closed:
            self._check_open()
        try:
            cur = await self._pg.execute(sql, {} if params is None else params)
            if not _returns_rows(cur.pgresult):
                return None
            return await cur.fetchone()
        except Exception as exc:
            if (translated := self._translated(exc)) is None:
                raise
            raise translated from exc

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        self._check_open()
        try:
            # psycopg pipelines executemany (one network round trip for the batch).
            async with self._pg.cursor() as cur:
                await cur.executemany(sql, seq_of_params)
        except Exception as exc:
            if (translated := self._translated(exc)) is None:
                raise
            raise translated from exc

    # ---------------------------------------------------------- transactions

    async def begin(self, immediate: bool = False) -> None:
        self._check_begin()
        try:
            await self._control("BEGIN")
        except asyncio.CancelledError:
            self._after_cancel()
            raise
        self._in_transaction = True

    async def commit(self) -> None:
        self._check_commit()
        try:
            await self._pg.commit()
        except BaseException as exc:
            if (translated := self._ended(exc)) is None:
                raise
            raise translated from exc
        self._in_transaction = False

    #: one simple-protocol query of two statements: the BEGIN runs only when the COMMIT did
    chains_transactions = True

    async def commit_begin(self) -> None:
        self._check_commit()
        try:
            await self._pg.execute(b"COMMIT; BEGIN", prepare=False)
        except BaseException as exc:
            if (translated := self._ended(exc)) is None:
                raise
            raise translated from exc
        self._in_transaction = True

    async def rollback(self) -> None:
        if self._closed or not self._in_transaction:
            return
        try:
            await self._pg.rollback()
        except BaseException as exc:
            if (translated := self._ended(exc)) is None:
                raise
            raise translated from exc
        self._in_transaction = False

    def _ended(self, exc: BaseException) -> Exception | None:
        """What a failed COMMIT or ROLLBACK raises; whether a transaction is still open is
        read off libpq (a failed COMMIT, on a deferred constraint or a serialization
        failure, ends the transaction on PostgreSQL; a cancelled one may have taken
        effect: psycopg waits for the server's answer to the cancellation)."""
        if isinstance(exc, asyncio.CancelledError):
            self._after_cancel()
            return None
        if self._closed or self._is_lost(exc):
            return self._lost(exc)
        self._in_transaction = self._libpq_in_transaction()
        if isinstance(exc, self._driver_error):
            return database_error(exc, deadlock=_is_conflict(exc))
        return None

    async def _control(self, sql: str) -> None:
        self._check_open()
        try:
            # Never prepare BEGIN/SAVEPOINT: they are cheap to parse and would only take up
            # slots in psycopg's prepared-statement cache.
            await self._pg.execute(sql, prepare=False)
        except Exception as exc:
            if (translated := self._translated(exc)) is None:
                raise
            raise translated from exc

    def _after_cancel(self) -> None:
        # psycopg answers a cancelled await by cancelling the statement on the server and
        # waiting for the outcome, so libpq's status says whether BEGIN/COMMIT took effect.
        if not self._closed:
            with contextlib.suppress(Exception):
                self._in_transaction = self._libpq_in_transaction()

    def _libpq_in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        status = self._pg.info.transaction_status
        return status in (TransactionStatus.INTRANS, TransactionStatus.INERROR)

    async def notifies(self, timeout: float | None = None) -> AsyncIterator[str]:
        self._check_open()
        try:
            async for n in self._pg.notifies(timeout=timeout):
                yield n.channel
        except Exception as exc:
            if isinstance(exc, self._driver_error | OSError):
                raise self._lost(exc) from exc
            raise
        if timeout is not None and not self._pg.closed and not self._pg.broken:
            return  # the time is up
        # without a timeout the generator ends only when psycopg finds the connection closed
        raise self._lost(ConnectionError("the listening connection closed"))

    # ------------------------------------------------------------- lifecycle

    async def close(self) -> None:
        if self._closed and self._pg.closed:
            return
        self._closed = True
        self._in_transaction = False
        # psycopg's close() sends libpq's Terminate message; the server rolls back what was open.
        with contextlib.suppress(Exception):
            await self._pg.close()

    async def abort(self) -> None:
        self._closed = True
        self._in_transaction = False
        with contextlib.suppress(Exception):
            self._release_hard()

    def _release_hard(self) -> None:
        if self._pg.closed:
            return
        # Shut the socket down under libpq (through a dup of its descriptor, so libpq still
        # owns and closes the original): a statement awaiting a reply in another task wakes up
        # at once with "connection socket closed", and no Terminate message is sent.
        with contextlib.suppress(Exception):
            fd = os.dup(self._pg.fileno())
            sock = socket.socket(fileno=fd)
            try:
                sock.shutdown(socket.SHUT_RDWR)
            finally:
                sock.close()
        self._pg.pgconn.finish()

    async def server_version_text(self) -> str:
        # libpq read server_version_num during the startup handshake: no round trip needed.
        return str(self._pg.info.server_version)

    async def server_identity(self) -> str:
        # CockroachDB and YugabyteDB name themselves here, not in server_version_num
        row = await self.fetchone("SELECT version() AS v")
        return str(row["v"]) if row else ""

    def _is_lost(self, exc: BaseException) -> bool:
        if self._pg.closed or self._pg.broken:
            return True
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate and (sqlstate.startswith("08") or sqlstate in _LOST_SQLSTATES):
            if sqlstate == _READ_ONLY:
                _warn_read_only(self.url, exc)
            return True
        # A raw socket error that psycopg did not wrap.
        return isinstance(exc, OSError)


def _warn_read_only(url: str, exc: BaseException) -> None:
    """One WARNING per URL and READ_ONLY_WARNING_EVERY seconds: the server reached is read-only
    (reconnecting finds a writable one only if the URL lets libpq skip read-only servers)."""
    now = time.monotonic()
    if now - _read_only_warned.get(url, -READ_ONLY_WARNING_EVERY) < READ_ONLY_WARNING_EVERY:
        return
    _read_only_warned[url] = now
    log.warning(
        "the server at %s is read-only (%s): a standby or a demoted primary; dropping the "
        "connection and reconnecting (target_session_attrs=read-write, the default, skips "
        "read-only servers)",
        url,
        first_line(exc),
    )


def connect_error(url: str, exc: BaseException) -> ConfigurationError | ConnectionLost:
    """A failed connection as the runtime's error: ConfigurationError for a refusal retrying
    cannot fix (wrong password, role, database or sslmode), else ConnectionLost (the server is
    unreachable, refuses connections, is starting up or shutting down: 57P03)."""
    text = first_line(exc)
    if _CONFIG_REFUSALS.search(text):
        return ConfigurationError(
            f"cannot log in at {redact_url(url)}: {text}; retrying will not help: fix the URL "
            "(user, password, database, sslmode, options) or the server's access rules"
        )
    return ConnectionLost(f"cannot connect to {redact_url(url)}: {text}")


async def open_postgres(
    url: str, conninfo: str, read_only: bool = False, **kwargs: Any
) -> PostgresConnection:
    """Connect with psycopg to ``conninfo`` (a postgresql:// URI); ``url`` is for messages.

    ``kwargs`` go to ``psycopg.AsyncConnection.connect`` (e.g. ``connect_timeout``,
    ``application_name``, ``prepare_threshold``); autocommit and the row factory are fixed.
    DEFAULT_PARAMETERS fill in what neither the URL nor ``kwargs`` set; DEFAULT_SETTINGS apply
    to the session where nobody else set them.
    """
    psycopg_mod = import_driver("psycopg", "postgres")
    rows = import_driver("psycopg.rows", "postgres")
    given = {key for key, _ in parse_qsl(urlsplit(conninfo).query, keep_blank_values=True)}
    defaults = {**DEFAULT_PARAMETERS, **(READ_ONLY_PARAMETERS if read_only else {})}
    for key, value in defaults.items():
        if key not in kwargs and key not in given:
            kwargs[key] = value
    kwargs["autocommit"] = True
    kwargs["row_factory"] = rows.dict_row
    try:
        pg = await psycopg_mod.AsyncConnection.connect(conninfo, **kwargs)
    except psycopg_mod.Error as exc:
        raise connect_error(url, exc) from exc
    fixed = {**_FIXED_SETTINGS, **(_READ_ONLY_SETTINGS if read_only else {})}
    settings = {**DEFAULT_SETTINGS, **fixed}
    try:
        await pg.execute(
            _SESSION_SETUP,
            {
                "names": list(settings),
                "values": list(settings.values()),
                "fixed": [name in fixed for name in settings],
            },
            prepare=False,
        )
    except psycopg_mod.Error as exc:
        await pg.close()
        raise ConnectionLost(f"cannot set up {redact_url(url)}: {first_line(exc)}") from exc
    # json/jsonb come back as their text, as on every other engine: the runtime decodes a
    # payload one way everywhere (psycopg's own loader would hand a JSON string back as str,
    # indistinguishable from the text of any other payload)
    text_loader = import_driver("psycopg.types.string", "postgres").TextLoader
    for name in ("json", "jsonb"):
        pg.adapters.register_loader(name, text_loader)
    return PostgresConnection(pg, url)
