"""A service's own connection, adapted so that enqueue and outbox put run on it, in its open
transaction: psycopg 3 (async and sync, any row factory), asyncpg (a Connection or one
acquired from a Pool), aiosqlite and sqlite3, PyMySQL, SQLAlchemy 2 (Connection, Session,
AsyncConnection, AsyncSession) and Django's database connection (sync).

Each kind is recognised by the name and module of its class or of a class it derives from,
so no optional library is imported unless the service passed one of its connections.

An adapter runs the rendered statement as it is (for asyncpg, in its ``$n`` style), through
the driver the connection already uses, and never begins, commits or changes a setting of a connection it did not open: the
service's transaction decides what commits. Sync connections get adapters whose methods
never suspend, so the sync API (``queue.sync``) runs the same async code to completion
without an event loop (``run_sync``).
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from functools import lru_cache
from typing import Any, TypeVar

from runtime.contract.dialects import DIALECTS, Dialect
from runtime.contract.errors import ConfigurationError, InvalidArgument
from runtime.contract.sqltext import named_to_pyformat
from runtime.drivers.base import Connection, Params, Row
from runtime.drivers.mysql import insert_rows

T = TypeVar("T")

#: SQLAlchemy drivers that take the rendered files' parameters (asyncpg: turned into $n)
_SQLALCHEMY_DRIVERS = {
    "postgresql": ("psycopg", "psycopg2", "asyncpg"),
    "mysql": ("pymysql", "mysqldb", "aiomysql", "asyncmy"),
    "mariadb": ("pymysql", "mysqldb", "aiomysql", "asyncmy"),
    "sqlite": ("pysqlite", "aiosqlite"),
}
_SQLALCHEMY_DIALECTS = {"postgresql": "postgres", "sqlite": "sqlite", "mysql": "mysql"}


class Adapted:
    """The part of the runtime's Connection that enqueue and put use, over a foreign one.

    ``in_transaction`` is always True: the service owns its transactions, so a step of
    several statements runs in whatever the service has open and never commits on its own.
    """

    in_transaction = True
    closed = False

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    async def ready(self) -> None:
        """Learn what the connection reaches when that needs the server (a fresh engine's
        Session has not connected yet); an adapter of a blocking connection never suspends."""

    async def execute(self, sql: str, params: Params | None = None) -> int:
        _, count = await self._run(sql, params or {})
        return count

    async def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        rows, _ = await self._run(sql, params or {})
        return rows

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        for params in seq_of_params:
            await self._run(sql, params)

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        raise NotImplementedError


def _rows(description: Any, fetched: Sequence[Any]) -> list[Row]:
    """Rows as dicts whatever the row factory (tuples, dicts, sqlite3.Row, named tuples)."""
    if description is None:
        return []
    cols = [d[0] for d in description]
    out = []
    for r in fetched:
        if isinstance(r, dict):
            out.append(dict(r))
        else:
            out.append(dict(zip(cols, tuple(r), strict=True)))
    return out


def _json_as_text(cur: Any) -> None:
    """json/jsonb come back as their text on this cursor only (the connection keeps its own
    loaders), as the runtime's own connections hand them over: a payload, result or progress
    is decoded one way everywhere."""
    from psycopg.types.string import TextLoader

    for name in ("json", "jsonb"):
        cur.adapters.register_loader(name, TextLoader)


class _PsycopgAsync(Adapted):
    def __init__(self, conn: Any) -> None:
        super().__init__(DIALECTS["postgres"])
        self.conn = conn

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        from psycopg.rows import dict_row

        async with self.conn.cursor(row_factory=dict_row) as cur:
            _json_as_text(cur)
            await cur.execute(sql, params)
            rows = await cur.fetchall() if cur.description is not None else []
            return rows, cur.rowcount

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        async with self.conn.cursor() as cur:
            await cur.executemany(sql, seq_of_params)


class _PsycopgSync(Adapted):
    def __init__(self, conn: Any) -> None:
        super().__init__(DIALECTS["postgres"])
        self.conn = conn

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        from psycopg.rows import dict_row

        with self.conn.cursor(row_factory=dict_row) as cur:
            _json_as_text(cur)
            cur.execute(sql, params)
            return (cur.fetchall() if cur.description is not None else []), cur.rowcount

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(sql, seq_of_params)


class _Sqlite3(Adapted):
    def __init__(self, conn: Any) -> None:
        super().__init__(DIALECTS["sqlite"])
        self.conn = conn

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        cur = self.conn.execute(sql, params)
        try:
            rows = _rows(cur.description, cur.fetchall())
            return rows, len(rows) if cur.description is not None else cur.rowcount
        finally:
            cur.close()


class _Aiosqlite(Adapted):
    def __init__(self, conn: Any) -> None:
        super().__init__(DIALECTS["sqlite"])
        self.conn = conn

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        async with self.conn.execute(sql, params) as cur:
            rows = _rows(cur.description, await cur.fetchall())
            return rows, len(rows) if cur.description is not None else cur.rowcount


class _PyMySQL(Adapted):
    def __init__(self, conn: Any) -> None:
        info = str(conn.get_server_info())
        super().__init__(DIALECTS["mariadb" if "mariadb" in info.lower() else "mysql"])
        self.conn = conn

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        with self.conn.cursor() as cur:
            cur.execute(sql, params)
            return _rows(cur.description, cur.fetchall()), cur.rowcount

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        with self.conn.cursor() as cur:
            insert_rows(cur, sql, seq_of_params)


#: a parameter (a JSON one: cast to JSONB, as every rendered file binds JSON) or a literal %
_PYFORMAT = re.compile(r"CAST\(%\(([A-Za-z_]\w*)\)s AS JSONB\)|%\(([A-Za-z_]\w*)\)s|%%")


@lru_cache(maxsize=1024)
def dollar_params(sql: str) -> tuple[str, tuple[str, ...]]:
    """A rendered PostgreSQL statement (``%(name)s``, ``%%`` for ``%``) in asyncpg's style:
    ``$n`` by each name's first use, and the names in ``$n`` order (converted once per
    statement text). ``dollar_params("… %(a)s, %(b)s, %(a)s")`` → ``("… $1, $2, $1", ("a", "b"))``

    JSON travels as text (``CAST($n::text AS JSONB)``), so a connection whose own jsonb
    codec encodes Python values (``set_type_codec("jsonb", encoder=json.dumps, …)``) does
    not encode the runtime's JSON text a second time.
    """
    names: dict[str, int] = {}

    def number(m: re.Match[str]) -> str:
        json_name, name = m.group(1), m.group(2)
        if json_name is not None:
            return f"CAST(${names.setdefault(json_name, len(names) + 1)}::text AS JSONB)"
        if name is None:
            return "%"
        return f"${names.setdefault(name, len(names) + 1)}"

    return _PYFORMAT.sub(number, sql), tuple(names)


def _positional(sql: str, params: Params) -> tuple[str, list[Any]]:
    text, names = dollar_params(sql)
    return text, [params[n] for n in names]


def _status_count(status: str | None) -> int:
    """The row count of a command status (``INSERT 0 3``, ``UPDATE 2``), -1 without one."""
    last = (status or "").rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else -1


_BAD_ARGUMENT = re.compile(
    r"invalid input for query argument \$(\d+)(?: in element #(\d+) of executemany\(\) sequence)?: (.*)"
)


def _bad_argument(exc: BaseException, sql: str) -> InvalidArgument | None:
    """asyncpg's refusal of a value whose type is not its column's (it converts nothing, as
    psycopg lets the server do), naming the argument as the caller gave it: ``values['amount']``
    rather than ``$4``. None for any other error."""
    found = _BAD_ARGUMENT.search(str(exc))
    if found is None or not type(exc).__module__.startswith(("asyncpg", "sqlalchemy")):
        return None
    names = dollar_params(sql)[1]
    name = names[int(found.group(1)) - 1]
    what = f"values[{name[6:]!r}]" if name.startswith("value_") else name
    item = f"item {found.group(2)} of the batch: " if found.group(2) else ""
    return InvalidArgument(
        f"{item}{what}: {found.group(3)}; asyncpg binds a value only of its column's own type "
        "(int for INTEGER, datetime for TIMESTAMPTZ, Decimal or float for NUMERIC, …)"
    )


async def _checked(sql: str, call: Awaitable[T]) -> T:
    """The call's result; a value asyncpg refused as InvalidArgument (see _bad_argument)."""
    try:
        return await call
    except Exception as exc:
        bad = _bad_argument(exc, sql)
        if bad is None:
            raise
        raise bad from exc


class _Asyncpg(Adapted):
    """An asyncpg Connection, or a pool's connection (its proxy): the statement in ``$n``
    style with its values in order, as asyncpg's own prepared-statement cache keeps it."""

    def __init__(self, conn: Any) -> None:
        super().__init__(DIALECTS["postgres"])
        self.conn = conn

    async def execute(self, sql: str, params: Params | None = None) -> int:
        text, args = _positional(sql, params or {})
        return _status_count(await _checked(sql, self.conn.execute(text, *args)))

    async def fetchall(self, sql: str, params: Params | None = None) -> list[Row]:
        text, args = _positional(sql, params or {})
        return [dict(r) for r in await _checked(sql, self.conn.fetch(text, *args))]

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        text, names = dollar_params(sql)
        rows = [[p[n] for n in names] for p in seq_of_params]
        await _checked(sql, self.conn.executemany(text, rows))


class _SQLAlchemy(Adapted):
    """Connection or Session, sync or async: the statement goes to the DBAPI driver as it
    is (``exec_driver_sql``; for asyncpg in ``$n`` style with its values in order), in the
    session's transaction."""

    def __init__(self, conn: Any, is_async: bool) -> None:
        bind = conn.get_bind() if hasattr(conn, "get_bind") else conn
        super().__init__(_sqlalchemy_dialect(bind.dialect))
        self.conn = conn
        self.is_async = is_async
        self.positional = bind.dialect.driver == "asyncpg"
        self._known = hasattr(conn, "exec_driver_sql")

    async def ready(self) -> None:
        # A Session's engine may not have connected yet, and an engine learns whether a
        # mysql:// URL reaches MariaDB only when it first connects: ask the connection the
        # session runs on (the one its transaction holds).
        if not self._known:
            conn = await self._connection()
            self.dialect = _sqlalchemy_dialect(conn.dialect)
            self._known = True

    async def _connection(self) -> Any:
        conn = self.conn
        if hasattr(conn, "exec_driver_sql"):
            return conn
        return (await conn.connection()) if self.is_async else conn.connection()

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        conn = await self._connection()
        if self.positional:  # asyncpg: always async
            text, args = _positional(sql, params)
            result = await _checked(sql, conn.exec_driver_sql(text, tuple(args)))
        else:
            result = conn.exec_driver_sql(sql, dict(params))
            if self.is_async:
                result = await result
        rows = [dict(r) for r in result.mappings().all()] if result.returns_rows else []
        return rows, result.rowcount

    async def executemany(self, sql: str, seq_of_params: Sequence[Params]) -> None:
        if not self.positional:
            await super().executemany(sql, seq_of_params)
            return
        text, names = dollar_params(sql)
        conn = await self._connection()
        rows = [tuple(p[n] for n in names) for p in seq_of_params]
        await _checked(sql, conn.exec_driver_sql(text, rows))


def _sqlalchemy_dialect(sa_dialect: Any) -> Dialect:
    name = "mariadb" if getattr(sa_dialect, "is_mariadb", False) else sa_dialect.name
    drivers = _SQLALCHEMY_DRIVERS.get(sa_dialect.name, ())
    if sa_dialect.driver not in drivers:
        raise ConfigurationError(
            f"SQLAlchemy's {sa_dialect.name}+{sa_dialect.driver} driver is not one the rendered "
            f"files' parameters fit; use {' or '.join(f'{sa_dialect.name}+{d}' for d in drivers) or 'PostgreSQL, MySQL, MariaDB or SQLite'}"
        )
    return DIALECTS[_SQLALCHEMY_DIALECTS.get(name, name)]


class _Django(Adapted):
    """``django.db.connection`` (or ``connections[alias]``), blocking: the statement runs on
    Django's cursor, inside whatever ``transaction.atomic()`` has open. Django's cursors take
    ``%(name)s`` on every backend (its SQLite backend turns them back into ``:name``)."""

    def __init__(self, conn: Any) -> None:
        vendor = conn.vendor
        if vendor not in _DJANGO_VENDORS:
            raise ConfigurationError(
                f"Django's {vendor} backend is not one qgen runs on: use its postgresql, "
                "mysql or sqlite3 backend"
            )
        super().__init__(DIALECTS[_DJANGO_VENDORS[vendor]])
        self.conn = conn
        self.named = self.dialect.paramstyle == "named"

    async def ready(self) -> None:
        if self.conn.vendor == "mysql" and self.conn.mysql_is_mariadb:
            self.dialect = DIALECTS["mariadb"]

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        if self.named:
            sql = named_to_pyformat(sql)
        with self.conn.cursor() as cur:
            cur.execute(sql, dict(params))
            # psycopg refuses fetchall() after a statement that returns no rows (DDL)
            fetched = cur.fetchall() if cur.description is not None else []
            return _rows(cur.description, fetched), cur.rowcount


_DJANGO_VENDORS = {"postgresql": "postgres", "mysql": "mysql", "sqlite": "sqlite"}

#: how each service connection is recognised: (top module, class name) of its class or of a
#: class it derives from → (the adapter of a blocking one, of an async one)
_KINDS: dict[tuple[str, str], tuple[Callable[[Any], Adapted] | None, ...]] = {
    ("psycopg", "Connection"): (_PsycopgSync, None),
    ("psycopg", "AsyncConnection"): (None, _PsycopgAsync),
    ("asyncpg", "Connection"): (None, _Asyncpg),
    ("asyncpg", "PoolConnectionProxy"): (None, _Asyncpg),
    ("sqlite3", "Connection"): (_Sqlite3, None),
    ("aiosqlite", "Connection"): (None, _Aiosqlite),
    ("pymysql", "Connection"): (_PyMySQL, None),
    ("sqlalchemy", "Connection"): (lambda c: _SQLAlchemy(c, False), None),
    ("sqlalchemy", "Session"): (lambda c: _SQLAlchemy(c, False), None),
    ("sqlalchemy", "scoped_session"): (lambda c: _SQLAlchemy(c, False), None),
    ("sqlalchemy", "AsyncConnection"): (None, lambda c: _SQLAlchemy(c, True)),
    ("sqlalchemy", "AsyncSession"): (None, lambda c: _SQLAlchemy(c, True)),
    ("sqlalchemy", "async_scoped_session"): (None, lambda c: _SQLAlchemy(c, True)),
    ("django", "ConnectionProxy"): (_Django, None),
    ("django", "BaseDatabaseWrapper"): (_Django, None),
}

#: what holds connections but is not one, and how to get one from it
_HOLDERS = {
    ("asyncpg", "Pool"): "acquire one: `async with pool.acquire() as conn:`",
    ("psycopg_pool", "ConnectionPool"): "take one: `with pool.connection() as conn:`",
    ("psycopg_pool", "AsyncConnectionPool"): "take one: `async with pool.connection() as conn:`",
    ("sqlalchemy", "Engine"): "open one: `with engine.begin() as conn:` or a Session",
    (
        "sqlalchemy",
        "AsyncEngine",
    ): "open one: `async with engine.begin() as conn:` or an AsyncSession",
}

ACCEPTED = (
    "the runtime's own connection (runtime.connect); psycopg 3, asyncpg (a Connection or "
    "one from pool.acquire()) or aiosqlite connections for `await queue.enqueue(...)`; "
    "psycopg 3, sqlite3, PyMySQL or Django (django.db.connection) connections for "
    "`queue.sync.enqueue(...)`; SQLAlchemy 2 Connection and Session or scoped_session (sync), "
    "AsyncConnection and AsyncSession or async_scoped_session (async)"
)


def _kind(conn: Any) -> tuple[str, str] | None:
    """The (top module, class name) of the first class of conn's type that is a known kind."""
    for cls in type(conn).__mro__:
        key = (cls.__module__.split(".")[0], cls.__name__)
        if key in _KINDS or key in _HOLDERS:
            return key
    return None


def adapt(conn: Any, sync: bool = False) -> Connection | Adapted:
    """The runtime's own connection as it is; a service's, wrapped (``sync``: a blocking one)."""
    if isinstance(conn, Connection | Adapted):
        return conn
    key = _kind(conn)
    what = f"{type(conn).__module__}.{type(conn).__name__}"
    if key in _HOLDERS:
        raise ConfigurationError(f"{what} is not a connection: {_HOLDERS[key]}")
    if key is None:
        raise ConfigurationError(f"cannot run statements on a {what}: pass {ACCEPTED}")
    blocking, non_blocking = _KINDS[key]
    factory = blocking if sync else non_blocking
    if factory is None:
        way = "await queue.enqueue(...)" if sync else "queue.sync.enqueue(...)"
        raise ConfigurationError(
            f"{what} is {'an async' if sync else 'a blocking'} connection here: use {way}"
        )
    return factory(conn)


async def adapted(db: Any) -> Connection | Adapted:
    """``adapt(db)``, knowing which server it reaches: what enqueue and put run on."""
    conn = adapt(db)
    if isinstance(conn, Adapted):
        await conn.ready()
    return conn


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the runtime's steps over a sync adapter) to its end,
    without an event loop: the sync API shares every line of the async one."""
    try:
        coro.send(None)
    except StopIteration as done:
        value: T = done.value
        return value
    coro.close()
    raise RuntimeError(  # pragma: no cover - a sync adapter never awaits anything real
        "a sync call awaited something: pass a blocking connection to the sync API"
    )


__all__ = ["ACCEPTED", "Adapted", "adapt", "adapted", "dollar_params", "run_sync"]
