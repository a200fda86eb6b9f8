"""Using qgen from a real service: enqueue and outbox put on the service's own connection, in
its own transaction (psycopg 3, sqlite3, aiosqlite, PyMySQL, SQLAlchemy 2), the sync API, the
table's other columns given at enqueue, connections opened by the service's own opener, and a
table whose attempt default would make the consumer count wrong."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.engines import Engine, engine_params, run, unique_table
from support.queues import make_queue
from support.services import _assert_together, _setup, _teardown, sqlalchemy_url, sync_connection

import runtime
from runtime.contract.errors import ConfigurationError

SYNC_KINDS = ["driver", "sqlalchemy", "session"]


@pytest.mark.parametrize("kind", SYNC_KINDS)
@pytest.mark.parametrize("engine", engine_params(), indirect=True)
def test_sync_enqueue_commits_and_rolls_back_with_the_business_write(
    engine: Engine, kind: str
) -> None:
    qt, business = run(_setup(engine))
    try:
        ids = []
        for commit in (True, False):
            with sync_connection(engine, kind) as (conn, do_commit, do_rollback, execute):
                execute(f"INSERT INTO {business} (note) VALUES ('order')")
                ids.append(qt.queue.sync.enqueue(conn, {"order": commit}))
                (do_commit if commit else do_rollback)()
        run(_assert_together(qt, business, ids))
    finally:
        run(_teardown(qt, business))


ASYNC_KINDS = {
    "postgres": ["psycopg", "psycopg-tuple-rows", "sqlalchemy", "session"],
    "sqlite": ["aiosqlite", "sqlalchemy", "session"],
    "mariadb": [],
    "mysql": [],
}


@pytest.mark.parametrize(
    ("engine", "kind"),
    [
        pytest.param(e, k, id=f"{e}-{k}", marks=pytest.mark.engine(e))
        for e, kinds in ASYNC_KINDS.items()
        for k in kinds
    ],
    indirect=["engine"],
)
def test_async_enqueue_and_put_run_in_the_services_transaction(engine: Engine, kind: str) -> None:
    async def go() -> None:
        qt, business = await _setup(engine)
        try:
            ids = []
            for commit in (True, False):
                async with _async_connection(engine, kind) as (conn, finish, execute):
                    await execute(f"INSERT INTO {business} (note) VALUES ('order')")
                    ids.append(await qt.queue.enqueue(conn, {"order": commit}))
                    await finish(commit)
            await _assert_together(qt, business, ids)
        finally:
            await _teardown(qt, business)

    run(go())


@contextlib.asynccontextmanager
async def _async_connection(engine: Engine, kind: str) -> Any:
    parts = urlsplit(engine.url)
    if kind.startswith("psycopg"):
        import psycopg
        from psycopg.rows import dict_row, tuple_row

        factory = tuple_row if kind.endswith("tuple-rows") else dict_row
        conn = await psycopg.AsyncConnection.connect(
            f"postgresql://{parts.netloc}{parts.path}", row_factory=factory
        )

        async def finish(commit: bool) -> None:
            await (conn.commit() if commit else conn.rollback())

        yield conn, finish, conn.execute
        await conn.close()
    elif kind == "aiosqlite":
        import aiosqlite

        async with aiosqlite.connect(parts.path) as conn:

            async def finish(commit: bool) -> None:
                await (conn.commit() if commit else conn.rollback())

            yield conn, finish, conn.execute
    else:
        from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine

        sa = create_async_engine(sqlalchemy_url(engine, True))
        if kind == "sqlalchemy":
            async with sa.connect() as conn:

                async def finish(commit: bool) -> None:
                    await (conn.commit() if commit else conn.rollback())

                yield conn, finish, conn.exec_driver_sql
        else:
            async with AsyncSession(sa) as session:

                async def finish(commit: bool) -> None:
                    await (session.commit() if commit else session.rollback())

                async def execute(sql: str) -> Any:
                    return await (await session.connection()).exec_driver_sql(sql)

                yield session, finish, execute
        await sa.dispose()


def test_the_runtime_changes_no_setting_of_a_services_connection(engine: Engine) -> None:
    """The runtime's own connections pin a time zone (MySQL) or a plan mode (PostgreSQL);
    a connection the service opened keeps its own."""
    if engine.name == "sqlite":
        pytest.skip("SQLite: the runtime sets nothing per connection but its pragmas on its own")
    qt, business = run(_setup(engine))
    try:
        show = "SHOW plan_cache_mode" if engine.name == "postgres" else "SELECT @@session.time_zone"
        with sync_connection(engine, "driver") as (conn, commit, _, _execute):
            cur = conn.cursor()
            cur.execute(show)
            before = cur.fetchone()
            qt.queue.sync.enqueue(conn, {"n": 1})
            cur.execute(show)
            assert cur.fetchone() == before
            commit()
    finally:
        run(_teardown(qt, business))


def test_other_columns_take_their_values_at_enqueue(engine: Engine) -> None:
    async def go() -> list[dict[str, Any]]:
        qt = await make_queue(engine, "row_lock")
        try:
            await qt.sql(f"ALTER TABLE {qt.q(qt.table)} ADD COLUMN kind VARCHAR(20)")
            from qgen.build import build_unit
            from qgen.declaration import parse_declaration

            decl = {
                "dialects": [engine.dialect_name],
                "queues": {
                    "q": {
                        "table": qt.table,
                        "form": "row_lock",
                        "columns": {"id": "id", "payload": "payload"},
                        "other_columns": ["kind"],
                    }
                },
            }
            text = build_unit(parse_declaration(decl).queues["q"], engine.dialect_name)
            queue = runtime.Queue(runtime.contract.rendered.parse_rendered(text, "q.sql"))
            async with await runtime.connect(qt.url) as db:
                await queue.enqueue(db, {"n": 1}, values={"kind": "welcome"})
                await queue.enqueue(db, {"n": 2})
                with pytest.raises(ConfigurationError, match="no other column 'knd'"):
                    await queue.enqueue(db, {"n": 3}, values={"knd": "x"})
            return await qt.sql(f"SELECT kind FROM {qt.q(qt.table)} ORDER BY id")
        finally:
            await qt.drop()

    assert [r["kind"] for r in run(go())] == ["welcome", None]


def test_a_consumer_opens_its_connections_with_the_services_opener(engine: Engine) -> None:
    async def go() -> tuple[runtime.Counts, int]:
        qt = await make_queue(engine, "lease")
        opened = 0

        async def open_connection() -> Any:
            nonlocal opened
            opened += 1
            return await runtime.connect(qt.url)

        try:
            await qt.enqueue(*[{"n": n} for n in range(5)])
            consumer = runtime.Consumer(open_connection, qt.queue, _ack, concurrency=2)
            return await consumer.drain(), opened
        finally:
            await qt.drop()

    counts, opened = run(go())
    assert counts.outcomes == {"ack": 5} and opened >= 2


async def _ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.ack()


@pytest.mark.parametrize("engine", engine_params("postgres", "mariadb", "sqlite"), indirect=True)
def test_a_consumer_refuses_a_table_whose_attempt_default_is_not_1(engine: Engine) -> None:
    async def go() -> str:
        qt = await make_queue(engine, "lease", columns=("attempt",))
        try:
            await qt.enqueue({"n": 1})
            if engine.name == "sqlite":  # no ALTER COLUMN: the table as a service made it
                await qt.sql(f"DROP TABLE {qt.q(qt.table)}")
                await qt.sql(
                    f"CREATE TABLE {qt.q(qt.table)} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
                    "payload TEXT NOT NULL, attempt INTEGER NOT NULL DEFAULT 0, locked_until TEXT)"
                )
            else:
                await qt.sql(f"ALTER TABLE {qt.q(qt.table)} ALTER COLUMN attempt SET DEFAULT 0")
            consumer = runtime.Consumer(qt.url, qt.queue, _ack)
            with pytest.raises(ConfigurationError) as exc:
                await asyncio.wait_for(consumer.drain(), 30)
            return str(exc.value)
        finally:
            await qt.drop()

    message = run(go())
    assert "defaults to 0, not 1" in message and "fix:" in message and "\n" not in message


def test_a_connection_of_the_wrong_kind_is_one_clear_error(tmp_path: Path) -> None:
    import sqlite3

    qt_text = _sqlite_queue_text()
    queue = runtime.Queue(runtime.contract.rendered.parse_rendered(qt_text, "q.sql"))
    conn = sqlite3.connect(tmp_path / "x.db")
    with pytest.raises(ConfigurationError, match=r"sqlite3\.Connection is a blocking connection"):
        run(queue.enqueue(conn, {"n": 1}))
    with pytest.raises(ConfigurationError, match=r"cannot run statements on a builtins\.dict"):
        queue.sync.enqueue({}, {"n": 1})


def _sqlite_queue_text() -> str:
    from qgen.build import build_unit
    from qgen.declaration import parse_declaration

    decl = parse_declaration({"dialects": ["sqlite"], "queues": {"q": {"table": "q"}}})
    return build_unit(decl.queues["q"], "sqlite")


def test_without_the_generator_the_cli_names_the_extra_and_the_runtime_works(
    tmp_path: Path,
) -> None:
    """A plain `pip install qgen-sql` has no Jinja2 or sqlglot: render says which extra to
    install (exit 2), and the runtime's commands still run."""
    import subprocess
    import sys

    cfg = tmp_path / "qgen.toml"
    cfg.write_text('dialects = ["sqlite"]\n[queues.q]\ntable = "q"\n', encoding="utf-8")
    hide = "import sys; sys.modules['jinja2'] = None; sys.modules['sqlglot'] = None; "
    render = subprocess.run(
        [
            sys.executable,
            "-c",
            hide + "from qgen.cli import main; raise SystemExit(main(sys.argv[1:]))",
            "render",
            "--config",
            str(cfg),
        ],
        capture_output=True,
        text=True,
    )
    assert render.returncode == 2, render.stderr
    assert "pip install 'qgen-sql[generator]'" in render.stderr
    assert render.stderr.count("\n") == 1
    runtime_only = subprocess.run(
        [
            sys.executable,
            "-c",
            hide + "import runtime; from qgen.cli import main; "
            "raise SystemExit(main(['worker', '--file', 'missing.sql', '--handler', 'm:f', '--db', 'sqlite:///x.db']))",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert runtime_only.returncode == 2 and "missing.sql" in runtime_only.stderr, (
        runtime_only.stderr
    )


def test_a_schema_qualified_table_with_other_columns_runs_end_to_end(engine: Engine) -> None:
    """schema.table on every engine (a PostgreSQL schema, a MariaDB database, SQLite's main),
    reached from a connection whose own default is elsewhere; the dead-letter table keeps
    the other columns."""
    from support.statements import create_namespace, drop_namespace

    from qgen.build import build_unit
    from qgen.declaration import parse_declaration

    name, _url = run(create_namespace(engine))
    schema = "main" if engine.name == "sqlite" else name
    decl = {
        "dialects": [engine.dialect_name],
        "queues": {
            "q": {
                "table": f"{schema}.jobs",
                "form": "lease",
                "max_attempts": 1,
                "dead_letter": {"table": f"{schema}.jobs_dead"},
                "other_columns": ["kind"],
                "columns": {
                    "id": "id",
                    "payload": "payload",
                    "attempt": "attempt",
                    "locked_until": "locked_until",
                },
            }
        },
    }
    text = build_unit(parse_declaration(decl).queues["q"], engine.dialect_name)
    queue = runtime.Queue(runtime.contract.rendered.parse_rendered(text, "q.sql"))

    async def fail(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        return runtime.retry() if message.payload["n"] else runtime.ack()

    async def go() -> tuple[runtime.Counts, list[dict[str, Any]]]:
        async with await runtime.connect(engine.url) as db:  # the server's default schema
            for s in queue.rendered.require("schema"):
                await db.execute(s, {})
            await queue.enqueue(db, {"n": 0}, values={"kind": "welcome"})
            await queue.enqueue(db, {"n": 1}, values={"kind": "reminder"})
            counts = await runtime.Consumer(engine.url, queue, fail, concurrency=1).drain()
            q = db.dialect.quote_table
            dead = await db.fetchall(f"SELECT kind FROM {q(schema + '.jobs_dead')}", {})
            if engine.name == "sqlite":
                await db.execute('DROP TABLE "main"."jobs"', {})
                await db.execute('DROP TABLE "main"."jobs_dead"', {})
            return counts, dead

    try:
        counts, dead = run(go())
    finally:
        run(drop_namespace(engine, name))
    assert counts.outcomes == {"ack": 1, "dead_letter": 1}, counts
    assert [r["kind"] for r in dead] == ["reminder"]


@pytest.mark.parametrize("engine", engine_params(), indirect=True)
def test_outbox_put_on_the_services_connection_and_a_relay_through_an_opener(
    engine: Engine, tmp_path: Path
) -> None:
    from support.outboxes import create_schema, render_outbox

    table = unique_table("ob")
    ob = render_outbox(tmp_path, engine.dialect_name, table)
    run(create_schema(engine.url, ob))
    try:
        ids = []
        for commit in (True, False):
            with sync_connection(engine, "driver") as (conn, do_commit, do_rollback, _):
                ids.append(ob.sync.put(conn, {"event": commit}, topic="orders"))
                (do_commit if commit else do_rollback)()
        handed: list[Any] = []

        async def handle(message: Any, ctx: runtime.Ctx) -> runtime.Outcome:
            handed.append((message.id, message.payload))
            return runtime.ack()

        report = run(ob.relay(lambda: runtime.connect(engine.url), handle))
        assert handed == [(ids[0], {"event": True})] and report["ack"] == 1
    finally:
        run(_drop(engine, table))


async def _drop(engine: Engine, table: str) -> None:
    async with await runtime.connect(engine.url) as db:
        await db.execute(f"DROP TABLE IF EXISTS {db.dialect.quote_ident(table)}", {})
