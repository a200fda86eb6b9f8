"""A service's own connection, of the kinds a service stack hands out: asyncpg (a Connection,
a pool's connection, a subclass), SQLAlchemy 2 over asyncpg (AsyncConnection, AsyncSession),
a brand-new mysql+pymysql engine on MariaDB, and Django's connection. Every enqueue option and
the outbox put run inside the caller's transaction; what committed or rolled back is read on a
separate connection."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import AsyncIterator, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.engines import Engine, engine_params, engine_url, run
from support.outboxes import make, records
from support.queues import QueueUnderTest, make_queue
from support.services import _assert_together, _setup, _teardown, sqlalchemy_url

import runtime
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.adapters import adapt, adapted, dollar_params, run_sync
from runtime.contract.errors import ConfigurationError, InvalidArgument
from runtime.contract.rendered import parse_rendered
from runtime.queue import Queue


class Rollback(Exception):
    """Raised inside the service's transaction to roll it back."""


# ------------------------------------------------------------------- the queue and its calls


async def full_queue(engine: Engine) -> QueueUnderTest:
    """A lease queue with every column an enqueue option fills: delay (retry_after), group,
    priority, fifo_key, dedupe_key and an other column, kind."""
    qt = await make_queue(
        engine,
        "lease",
        columns=("attempt", "retry_after", "processed_at", "priority", "fifo_key", "dedupe_key"),
        dead="group",
    )
    await qt.sql(f"ALTER TABLE {qt.q(qt.table)} ADD COLUMN kind VARCHAR(20)")
    decl = {
        "table": qt.table,
        "form": "lease",
        "lease_s": 30,
        "columns": qt.columns,
        "max_attempts": 2,
        "dead_letter": {"group": "dead"},
        "other_columns": ["kind"],
    }
    parsed = parse_declaration({"dialects": [engine.dialect_name], "queues": {"q": decl}})
    qt.queue = Queue(parse_rendered(build_unit(parsed.queues["q"], engine.dialect_name), "q.sql"))
    qt.columns = {**qt.columns, "kind": "kind"}
    return qt


#: one enqueue per option (payload, keyword arguments), then a duplicate of the dedupe_key
CALLS: list[tuple[Any, dict[str, Any]]] = [
    ({"n": 0}, {}),
    ({"n": 1}, {"delay": 3600}),
    ({"n": 2}, {"delay": 0.5}),
    ({"n": 3}, {"group": "other"}),
    ({"n": 4}, {"priority": 7}),
    ({"n": 5}, {"fifo_key": "customer-1"}),
    ({"n": 6}, {"dedupe_key": "once"}),
    ({"n": 7}, {"values": {"kind": "welcome"}}),
    ({"n": 8, "text": "100% é"}, {"priority": -3, "fifo_key": "f", "values": {"kind": "all"}}),
    ({"n": 9}, {"dedupe_key": "once"}),
]
#: then enqueue_many with these options, and with dedupe_keys
MANY: tuple[list[Any], dict[str, Any]] = ([{"m": 0}, {"m": 1}], {"delay": 2.5, "priority": 2})
MANY_KEYED: tuple[list[Any], list[str | None]] = ([{"k": 0}, {"k": 1}], ["once", "twice"])


def check_results(ids: list[Any], count: int, keyed: list[Any]) -> None:
    """What the calls returned: a duplicate dedupe_key gives the pending message's id."""
    assert ids[9] == ids[6] and ids[9].duplicate and not ids[6].duplicate
    assert len(set(ids[:9])) == 9
    assert count == 2
    assert keyed[0] == ids[6] and keyed[0].duplicate and not keyed[1].duplicate


async def check_rows(qt: QueueUnderTest, committed: bool) -> None:
    """The rows of one committed round of CALLS and MANY, each column as its option set it;
    nothing at all after a rolled-back one."""
    rows = await qt.rows()
    if not committed:
        assert rows == []
        return
    by = {str(sorted(r["payload"].items())): r for r in rows}
    assert len(rows) == 9 + 2 + 1, rows

    def row(payload: dict[str, Any]) -> dict[str, Any]:
        return by[str(sorted(payload.items()))]

    plain = row({"n": 0})
    assert (plain["group"], plain["priority"], plain["fifo_key"], plain["dedupe_key"]) == (
        qt.queue.default_group,
        0,
        None,
        None,
    )
    assert plain["kind"] is None and plain["retry_after_future"] == 0
    assert row({"n": 1})["retry_after_future"] == 1
    assert row({"n": 3})["group"] == "other"
    assert row({"n": 4})["priority"] == 7
    assert row({"n": 5})["fifo_key"] == "customer-1"
    assert row({"n": 6})["dedupe_key"] == "once"
    assert row({"n": 7})["kind"] == "welcome"
    every = row({"n": 8, "text": "100% é"})
    assert (every["priority"], every["fifo_key"], every["kind"]) == (-3, "f", "all")
    for m in (0, 1):
        assert (row({"m": m})["priority"], row({"m": m})["retry_after_future"]) == (2, 1)
    assert row({"k": 1})["dedupe_key"] == "twice"


# ------------------------------------------------------------------------ async connections

ASYNC_KINDS = ["asyncpg", "asyncpg-pool", "asyncpg-subclass", "sqlalchemy", "session"]


@contextlib.asynccontextmanager
async def async_connection(engine: Engine, kind: str) -> AsyncIterator[Any]:
    """A PostgreSQL connection of the service's own, of this kind."""
    parts = urlsplit(engine.url)
    dsn = f"postgresql://{parts.netloc}{parts.path}"
    if kind.startswith("asyncpg"):
        import asyncpg

        class ServiceConnection(asyncpg.Connection):  # type: ignore[misc]
            """A service's own connection class (asyncpg's connection_class=)."""

        if kind == "asyncpg-pool":
            # a pool whose connections decode and encode JSON themselves, as services set up
            async def codecs(conn: Any) -> None:
                for name in ("json", "jsonb"):
                    await conn.set_type_codec(
                        name, encoder=json.dumps, decoder=json.loads, schema="pg_catalog"
                    )

            pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2, init=codecs)
            try:
                async with pool.acquire() as conn:
                    yield conn
            finally:
                await pool.close()
        else:
            cls = ServiceConnection if kind == "asyncpg-subclass" else asyncpg.Connection
            conn = await asyncpg.connect(dsn, connection_class=cls)
            try:
                yield conn
            finally:
                await conn.close()
    else:
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        sa = create_async_engine(f"postgresql+asyncpg://{parts.netloc}{parts.path}")
        try:
            if kind == "sqlalchemy":
                async with sa.connect() as conn:
                    yield conn
            else:
                async with AsyncSession(sa) as session:
                    yield session
        finally:
            await sa.dispose()


@contextlib.asynccontextmanager
async def transaction(conn: Any) -> AsyncIterator[None]:
    """The service's own transaction: committed at the end, rolled back by an exception."""
    if hasattr(conn, "transaction"):  # asyncpg
        async with conn.transaction():
            yield
    else:  # SQLAlchemy AsyncConnection, AsyncSession
        async with conn.begin():
            yield


async def execute(conn: Any, sql: str) -> None:
    if hasattr(conn, "transaction"):
        await conn.execute(sql)
    elif hasattr(conn, "exec_driver_sql"):
        await conn.exec_driver_sql(sql)
    else:
        await (await conn.connection()).exec_driver_sql(sql)


async_params = pytest.mark.parametrize(
    ("engine", "kind"),
    [pytest.param("postgres", k, id=k, marks=pytest.mark.engine("postgres")) for k in ASYNC_KINDS],
    indirect=["engine"],
)


@async_params
def test_every_enqueue_option_commits_and_rolls_back_with_the_services_transaction(
    engine: Engine, kind: str
) -> None:
    async def go() -> None:
        qt = await full_queue(engine)
        try:
            for committed in (True, False):
                async with async_connection(engine, kind) as conn:
                    with contextlib.suppress(Rollback):
                        async with transaction(conn):
                            queue = qt.queue
                            ids = [await queue.enqueue(conn, p, **kw) for p, kw in CALLS]
                            count = await queue.enqueue_many(conn, MANY[0], **MANY[1])
                            keyed = await queue.enqueue_many(
                                conn, MANY_KEYED[0], dedupe_keys=MANY_KEYED[1]
                            )
                            check_results(ids, count, keyed)
                            if not committed:
                                raise Rollback
                await check_rows(qt, committed)
                if not committed:
                    return
                await qt.sql(f"DELETE FROM {qt.q(qt.table)}")
        finally:
            await qt.drop()

    run(go())


@async_params
def test_a_business_write_and_its_message_commit_or_roll_back_together(
    engine: Engine, kind: str
) -> None:
    async def go() -> None:
        qt, business = await _setup(engine)
        try:
            ids = []
            for commit in (True, False):
                async with async_connection(engine, kind) as conn:
                    with contextlib.suppress(Rollback):
                        async with transaction(conn):
                            await execute(conn, f"INSERT INTO {business} (note) VALUES ('order')")
                            ids.append(await qt.queue.enqueue(conn, {"order": commit}))
                            if not commit:
                                raise Rollback
            await _assert_together(qt, business, ids)
        finally:
            await _teardown(qt, business)

    run(go())


@async_params
def test_a_value_of_another_type_than_its_column_is_named_in_one_error(
    engine: Engine, kind: str
) -> None:
    """asyncpg converts no value to its column's type (psycopg lets the server): the error
    names the argument as given, and nothing of the transaction is kept."""

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        await qt.sql(f"ALTER TABLE {qt.q(qt.table)} ADD COLUMN amount INTEGER")
        await qt.sql(f"ALTER TABLE {qt.q(qt.table)} ADD COLUMN due TIMESTAMPTZ")
        decl = {"table": qt.table, "columns": qt.columns, "other_columns": ["amount", "due"]}
        decl |= {"form": "lease", "lease_s": 30}
        parsed = parse_declaration({"dialects": ["postgres"], "queues": {"q": decl}})
        queue = Queue(parse_rendered(build_unit(parsed.queues["q"], "postgres"), "q.sql"))
        due = datetime(2030, 1, 2, 3, 4, 5, tzinfo=UTC)
        try:
            async with async_connection(engine, kind) as conn:
                async with transaction(conn):
                    await queue.enqueue(conn, {"n": 1}, values={"amount": 5, "due": due})
                for values, many, wanted in [
                    ({"amount": "5"}, False, r"^values\['amount'\]: '5' \('str' object"),
                    ({"due": "2030-01-02"}, False, r"^values\['due'\]: '2030-01-02' \(expected"),
                    ({"amount": "x"}, True, r"^item 0 of the batch: values\['amount'\]: 'x'"),
                ]:
                    with pytest.raises(InvalidArgument, match=wanted) as exc:
                        async with transaction(conn):
                            await queue.enqueue(conn, {"n": 2})
                            if many:
                                await queue.enqueue_many(conn, [{"n": 3}, {"n": 4}], values=values)
                            else:
                                await queue.enqueue(conn, {"n": 3}, values=values)
                    assert "asyncpg binds a value only of its column's own type" in str(exc.value)
            rows = await qt.sql(f"SELECT amount, due FROM {qt.q(qt.table)}")
            assert rows == [{"amount": 5, "due": due}]
        finally:
            await qt.drop()

    run(go())


@async_params
def test_stats_and_cancel_run_on_the_services_connection(engine: Engine, kind: str) -> None:
    async def go() -> None:
        qt = await full_queue(engine)
        try:
            first, _ = await qt.enqueue({"n": 1}, {"n": 2}, delay=60)
            async with async_connection(engine, kind) as conn, transaction(conn):
                stats = await qt.queue.stats(conn)
                assert (stats["ready"], stats["delayed"], stats["dead"]) == (0, 2, 0)
                assert await qt.queue.cancel(conn, first) is True
                assert await qt.queue.cancel(conn, 10**12) is False
                assert (await qt.queue.stats(conn, group="other"))["delayed"] == 0
            pending = [r["payload"] for r in await qt.rows() if r["processed_at"] is None]
            assert pending == [{"n": 2}]
        finally:
            await qt.drop()

    run(go())


@async_params
def test_outbox_put_and_put_many_in_the_services_transaction(
    engine: Engine, kind: str, tmp_path: Path
) -> None:
    async def go(ob: Any) -> list[dict[str, Any]]:
        for committed in (True, False):
            async with async_connection(engine, kind) as conn:
                with contextlib.suppress(Rollback):
                    async with transaction(conn):
                        await ob.put(conn, {"event": committed}, topic="orders", key="o-1")
                        assert await ob.put_many(conn, [{"e": 1}, {"e": 2}], topic="t") == 2
                        if not committed:
                            raise Rollback
        return await records(engine.url, ob)

    with make(engine, tmp_path) as ob:
        rows = run(go(ob))
    assert [(r["topic"], r["marked"]) for r in rows] == [
        ("orders", False),
        ("t", False),
        ("t", False),
    ]


def test_statements_become_asyncpgs_numbered_parameters_once() -> None:
    text, names = dollar_params("SELECT %(a)s, %(b)s, %(a)s, '100%%' WHERE x LIKE 'a%%'")
    assert text == "SELECT $1, $2, $1, '100%' WHERE x LIKE 'a%'"
    assert names == ("a", "b")
    text, names = dollar_params("VALUES (%(id)s, CAST(%(payload)s AS JSONB), %(id)s)")
    assert (text, names) == ("VALUES ($1, CAST($2::text AS JSONB), $1)", ("id", "payload"))
    before = dollar_params.cache_info().hits
    dollar_params("SELECT %(a)s, %(b)s, %(a)s, '100%%' WHERE x LIKE 'a%%'")
    assert dollar_params.cache_info().hits == before + 1


# --------------------------------------------------- a fresh mysql+pymysql engine on MariaDB


@contextlib.contextmanager
def fresh_session(engine: Engine, kind: str) -> Iterator[tuple[Any, Callable[[bool], None]]]:
    """A brand-new engine's Session or Connection: nothing ran on it before."""
    import sqlalchemy
    from sqlalchemy.orm import Session, scoped_session, sessionmaker

    sa = sqlalchemy.create_engine(sqlalchemy_url(engine, False))
    try:
        if kind == "session":
            with Session(sa) as session:
                yield session, lambda c: session.commit() if c else session.rollback()
        elif kind == "scoped_session":  # as Flask-SQLAlchemy's db.session
            scoped = scoped_session(sessionmaker(sa))
            yield scoped, lambda c: scoped.commit() if c else scoped.rollback()
            scoped.remove()
        else:
            with sa.connect() as conn:
                yield conn, lambda c: conn.commit() if c else conn.rollback()
    finally:
        sa.dispose()


@pytest.mark.parametrize("kind", ["session", "scoped_session", "connection"])
@pytest.mark.parametrize("engine", engine_params("mariadb", "mysql"), indirect=True)
def test_a_fresh_mysql_pymysql_engines_first_statement_is_the_enqueue(
    engine: Engine, kind: str
) -> None:
    """mysql+pymysql:// learns that it reached MariaDB only when it connects: the first
    enqueue of a Session that has not connected yet runs the MariaDB file there."""
    qt = run(full_queue(engine))
    try:
        for committed in (True, False):
            with fresh_session(engine, kind) as (conn, finish):
                ids = [qt.queue.sync.enqueue(conn, p, **kw) for p, kw in CALLS]
                count = qt.queue.sync.enqueue_many(conn, MANY[0], **MANY[1])
                keyed = qt.queue.sync.enqueue_many(conn, MANY_KEYED[0], dedupe_keys=MANY_KEYED[1])
                check_results(ids, count, keyed)
                finish(committed)
            run(check_rows(qt, committed))
            run(qt.sql(f"DELETE FROM {qt.q(qt.table)}"))
        with fresh_session(engine, kind) as (conn, finish):
            adapter = adapt(conn, sync=True)
            run_sync(adapted(adapter))
            assert adapter.dialect.name == "mariadb"
            finish(False)
    finally:
        run(qt.drop())


# ------------------------------------------------------------------------------------ Django

_DJANGO_ENGINES = {
    "postgres": "django.db.backends.postgresql",
    "mariadb": "django.db.backends.mysql",
    "mysql": "django.db.backends.mysql",
    "sqlite": "django.db.backends.sqlite3",
}


@pytest.fixture(scope="session")
def django_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Django set up once in this process, one database alias per engine (default: PostgreSQL);
    the SQLite alias's file, created here."""
    import django
    import pymysql
    from django.conf import settings

    path = tmp_path_factory.mktemp("django") / "django.db"
    pymysql.install_as_MySQLdb()  # Django's MySQL backend on PyMySQL
    databases: dict[str, Any] = {"sqlite": {"ENGINE": _DJANGO_ENGINES["sqlite"], "NAME": str(path)}}
    for name in ("postgres", "mariadb", "mysql"):
        parts = urlsplit(engine_url(name, path.parent))
        databases[name] = {
            "ENGINE": _DJANGO_ENGINES[name],
            "NAME": parts.path.lstrip("/"),
            "USER": parts.username or "",
            "PASSWORD": parts.password or "",
            "HOST": parts.hostname or "",
            "PORT": str(parts.port or ""),
        }
    databases["default"] = databases["postgres"]
    settings.configure(DATABASES=databases, USE_TZ=True)
    django.setup()
    return path


def django_engine(engine: Engine, sqlite: Path) -> Engine:
    """The engine as Django reaches it: SQLite in the file its settings name."""
    if engine.name != "sqlite":
        return engine
    return Engine("sqlite", f"sqlite:///{sqlite}", "sqlite")


def django_connection(alias: str) -> Any:
    """``django.db.connection`` for the default alias; for the others the same proxy class
    over their alias (what ``django.db.connection`` is when that alias is the default)."""
    import django.db
    from django.utils.connection import ConnectionProxy

    if alias == "default":
        return django.db.connection
    return ConnectionProxy(django.db.connections, alias)


@pytest.mark.parametrize("engine", engine_params(), indirect=True)
def test_djangos_connection_enqueues_inside_transaction_atomic(
    engine: Engine, django_sqlite: Path
) -> None:
    from django.db import transaction

    alias = "default" if engine.name == "postgres" else engine.name
    conn = django_connection(alias)
    engine = django_engine(engine, django_sqlite)
    qt = run(full_queue(engine))
    try:
        for committed in (True, False):
            with contextlib.suppress(Rollback), transaction.atomic(using=alias):
                ids = [qt.queue.sync.enqueue(conn, p, **kw) for p, kw in CALLS]
                count = qt.queue.sync.enqueue_many(conn, MANY[0], **MANY[1])
                keyed = qt.queue.sync.enqueue_many(conn, MANY_KEYED[0], dedupe_keys=MANY_KEYED[1])
                check_results(ids, count, keyed)
                if not committed:
                    raise Rollback
            run(check_rows(qt, committed))
            run(qt.sql(f"DELETE FROM {qt.q(qt.table)}"))
    finally:
        conn.close()
        run(qt.drop())


@pytest.mark.parametrize("engine", engine_params(), indirect=True)
def test_djangos_connection_puts_to_the_outbox_with_the_business_write(
    engine: Engine, tmp_path: Path, django_sqlite: Path
) -> None:
    from django.db import connections, transaction

    alias = "default" if engine.name == "postgres" else engine.name
    engine = django_engine(engine, django_sqlite)
    qt, business = run(_setup(engine))
    try:
        ids = []
        with make(engine, tmp_path) as ob:
            for commit in (True, False):
                with contextlib.suppress(Rollback), transaction.atomic(using=alias):
                    with connections[alias].cursor() as cur:
                        cur.execute(f"INSERT INTO {business} (note) VALUES ('order')")
                    ids.append(qt.queue.sync.enqueue(connections[alias], {"order": commit}))
                    ob.sync.put(connections[alias], {"order": commit}, topic="orders")
                    if not commit:
                        raise Rollback
            assert [r["topic"] for r in run(records(engine.url, ob))] == ["orders"]
        run(_assert_together(qt, business, ids))
    finally:
        connections[alias].close()
        run(_teardown(qt, business))


# ------------------------------------------------------------------- recognition and errors


def test_import_runtime_imports_no_optional_library() -> None:
    """The adapters know each kind by its class's name and module: nothing optional is
    imported until a service passes one, and none need be installed."""
    hide = "; ".join(f"sys.modules[{m!r}] = None" for m in ("asyncpg", "sqlalchemy", "django"))
    code = (
        "import sys, sqlite3\n"
        "import runtime\n"
        "loaded = {'asyncpg', 'sqlalchemy', 'django', 'psycopg', 'pymysql'} & set(sys.modules)\n"
        "assert not loaded, loaded\n"
        f"{hide}\n"
        "from runtime.adapters import adapt\n"
        "assert type(adapt(sqlite3.connect(':memory:'), sync=True)).__name__ == '_Sqlite3'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_an_unsupported_object_gets_one_error_naming_what_is_accepted() -> None:
    with pytest.raises(ConfigurationError) as exc:
        runtime.adapters.adapt(object())
    message = str(exc.value)
    assert message.startswith("cannot run statements on a builtins.object: pass ")
    for kind in ("runtime.connect", "psycopg 3", "asyncpg", "pool.acquire()", "aiosqlite"):
        assert kind in message
    for kind in ("sqlite3", "PyMySQL", "django.db.connection", "SQLAlchemy 2", "AsyncSession"):
        assert kind in message
    assert "\n" not in message


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
def test_a_pool_or_an_engine_is_not_a_connection_and_a_sync_one_is_not_async(
    engine: Engine,
) -> None:
    import asyncpg
    import sqlalchemy
    from sqlalchemy.ext.asyncio import create_async_engine

    parts = urlsplit(engine.url)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        pool = await asyncpg.create_pool(
            f"postgresql://{parts.netloc}{parts.path}", min_size=1, max_size=1
        )
        sa = create_async_engine(f"postgresql+asyncpg://{parts.netloc}{parts.path}")
        try:
            with pytest.raises(ConfigurationError, match=r"Pool is not a connection: acquire one"):
                await qt.queue.enqueue(pool, {"n": 1})
            with pytest.raises(ConfigurationError, match=r"AsyncEngine is not a connection"):
                await qt.queue.enqueue(sa, {"n": 1})
            async with pool.acquire() as conn:
                with pytest.raises(ConfigurationError, match=r"async connection here: use await"):
                    qt.queue.sync.enqueue(conn, {"n": 1})
            assert await qt.rows() == []
        finally:
            await pool.close()
            await sa.dispose()
            await qt.drop()

    run(go())
    with pytest.raises(ConfigurationError, match=r"Engine is not a connection: open one"):
        runtime.adapters.adapt(sqlalchemy.create_engine(sqlalchemy_url(engine, False)), True)


def test_djangos_connection_is_blocking_only(django_sqlite: Path) -> None:
    import django.db

    with pytest.raises(ConfigurationError, match=r"a blocking connection here: use queue\.sync"):
        runtime.adapters.adapt(django.db.connection)


@pytest.mark.parametrize("engine", engine_params("mariadb", "mysql"), indirect=True)
def test_runtime_errors_stay_database_errors_beside_djangos_mysql_backend(
    engine: Engine, django_sqlite: Path
) -> None:
    """Django's MySQL backend on PyMySQL imports ``MySQLdb.err``, a second copy of
    ``pymysql.err`` that takes its place as ``pymysql.err``: the runtime's own connections must
    still turn PyMySQL's errors into DatabaseError (a missing table stops a consumer with the
    fix, a deadlock is retried), not let them through raw."""
    with django_connection(engine.name).cursor() as cur:  # loads Django's MySQL backend
        cur.execute("SELECT 1")

    async def go() -> None:
        async with await runtime.connect(engine.url) as db:
            with pytest.raises(runtime.DatabaseError, match="1146"):
                await db.fetchall("SELECT * FROM qgen_no_such_table_here", {})

    run(go())
