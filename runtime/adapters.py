"""A service's own connection, adapted so that enqueue and outbox put run on it, in its open
transaction: psycopg 3 (async and sync, any row factory), aiosqlite and sqlite3, PyMySQL, and
SQLAlchemy 2 (Connection, Session, AsyncConnection, AsyncSession).

An adapter runs the rendered statement as it is, through the driver the connection already
uses, and never begins, commits or changes a setting of a connection it did not open: the
service's transaction decides what commits. Sync connections get adapters whose methods
never suspend, so the sync API (``queue.sync``) runs the same async code to completion
without an event loop (``run_sync``).
"""

from __future__ import annotations

from collections.abc import Coroutine, Sequence
from typing import Any, TypeVar

from runtime.dialects import DIALECTS, Dialect
from runtime.drivers.base import Connection, Params, Row
from runtime.errors import ConfigurationError

T = TypeVar("T")

#: SQLAlchemy drivers that take the rendered files' parameter style as they are
_SQLALCHEMY_DRIVERS = {
    "postgresql": ("psycopg", "psycopg2"),
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


class _PsycopgAsync(Adapted):
    def __init__(self, conn: Any) -> None:
        super().__init__(DIALECTS["postgres"])
        self.conn = conn

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        from psycopg.rows import dict_row

        async with self.conn.cursor(row_factory=dict_row) as cur:
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


class _SQLAlchemy(Adapted):
    """Connection or Session, sync or async: the statement goes to the DBAPI driver as it
    is (``exec_driver_sql``), in the session's transaction."""

    def __init__(self, conn: Any, dialect: Dialect, is_async: bool) -> None:
        super().__init__(dialect)
        self.conn = conn
        self.is_async = is_async

    async def _run(self, sql: str, params: Params) -> tuple[list[Row], int]:
        conn = self.conn
        if self.is_async:
            if hasattr(conn, "exec_driver_sql"):
                result = await conn.exec_driver_sql(sql, dict(params))
            else:  # AsyncSession
                result = await (await conn.connection()).exec_driver_sql(sql, dict(params))
        elif hasattr(conn, "exec_driver_sql"):
            result = conn.exec_driver_sql(sql, dict(params))
        else:  # Session
            result = conn.connection().exec_driver_sql(sql, dict(params))
        rows = [dict(r) for r in result.mappings().all()] if result.returns_rows else []
        return rows, result.rowcount


def adapt(conn: Any, sync: bool = False) -> Connection | Adapted:
    """The runtime's own connection as it is; a service's, wrapped (``sync``: a blocking one)."""
    if isinstance(conn, Connection | Adapted):
        return conn
    module = type(conn).__module__.split(".")[0]
    name = type(conn).__name__
    if module == "psycopg":
        if name == "AsyncConnection" and not sync:
            return _PsycopgAsync(conn)
        if name == "Connection" and sync:
            return _PsycopgSync(conn)
    elif module == "sqlite3" and sync:
        return _Sqlite3(conn)
    elif module == "aiosqlite" and not sync:
        return _Aiosqlite(conn)
    elif module == "pymysql" and sync:
        return _PyMySQL(conn)
    elif module == "sqlalchemy":
        is_async = name in ("AsyncConnection", "AsyncSession")
        if is_async != sync and name in (
            "Connection",
            "Session",
            "AsyncConnection",
            "AsyncSession",
        ):
            return _SQLAlchemy(conn, _sqlalchemy_dialect(conn), is_async)
    if module in ("psycopg", "sqlite3", "aiosqlite", "pymysql", "sqlalchemy"):
        way = "await queue.enqueue(...)" if sync else "queue.sync.enqueue(...)"
        raise ConfigurationError(
            f"{module}.{name} is {'an async' if sync else 'a blocking'} connection here: use {way}"
        )
    raise ConfigurationError(
        f"cannot run statements on a {type(conn).__module__}.{name}: pass the runtime's own "
        "connection (runtime.connect), a psycopg 3, sqlite3, aiosqlite or PyMySQL connection, "
        "or a SQLAlchemy 2 Connection, Session, AsyncConnection or AsyncSession"
    )


def _sqlalchemy_dialect(conn: Any) -> Dialect:
    bind = conn.get_bind() if hasattr(conn, "get_bind") else conn
    sa_dialect = bind.dialect
    name = "mariadb" if getattr(sa_dialect, "is_mariadb", False) else sa_dialect.name
    drivers = _SQLALCHEMY_DRIVERS.get(sa_dialect.name, ())
    if sa_dialect.driver not in drivers:
        raise ConfigurationError(
            f"SQLAlchemy's {sa_dialect.name}+{sa_dialect.driver} driver is not one the rendered "
            f"files' parameters fit; use {' or '.join(f'{sa_dialect.name}+{d}' for d in drivers) or 'PostgreSQL, MySQL, MariaDB or SQLite'}"
        )
    return DIALECTS[_SQLALCHEMY_DIALECTS.get(name, name)]


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends (the runtime's steps over a sync adapter) to its end,
    without an event loop: the sync API shares every line of the async one."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise RuntimeError(  # pragma: no cover - a sync adapter never awaits anything real
        "a sync call awaited something: pass a blocking connection to the sync API"
    )


__all__ = ["Adapted", "adapt", "run_sync"]
