"""`qgen apply`, `runtime.apply` and `qgen schema` against real databases: every queue of the
examples (each form, dead letter as a group and as a table, dedupe keys) and the outbox
created in a namespace of the test's own, checked by verify and by a message through each."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from support.cli import (
    qgen,
    space_fixture,  # noqa: F401 (the space fixture)
)
from support.engines import Engine, engine_params, run

import runtime
from qgen.cli import main
from runtime.apply import SchemaDiffers, declared_objects, plain_sql, plan
from runtime.verify import describe, verify

EXAMPLES = Path(__file__).resolve().parents[2] / "generated_examples"
CONFIG = str(EXAMPLES / "qgen.toml")


def examples(dialect: str) -> list[Any]:
    """Every queue of the examples, then the outbox, loaded for ``dialect``."""
    folder = EXAMPLES / "sql" / dialect
    queues = [runtime.load(p) for p in sorted(folder.glob("*.sql")) if p.stem != "outbox"]
    return [*queues, runtime.load(folder / "outbox.sql")]


def declared(target: Any) -> list[Any]:
    return [
        o for st in target.rendered.require("schema") for o in declared_objects(st, target.dialect)
    ]


def objects(target: Any) -> list[str]:
    """What the file's schema block declares, as apply reports it."""
    return [str(o) for o in declared(target)]


async def tables_of(url: str, target: Any) -> dict[str, int]:
    """Each table the target declares → its number of columns (0: missing)."""
    async with await runtime.connect(url) as conn:
        return {
            o.name: len(await describe(conn, target, o.name))
            for st in target.rendered.require("schema")
            for o in declared_objects(st, target.dialect)
            if o.kind == "table"
        }


async def index_rows(conn: Any, target: Any, table: str) -> list[str]:
    rows = await conn.fetchall(
        target.rendered.require("indexes")[0], {"table_schema": None, "table_name": table}
    )
    return sorted(str(r["name"]) for r in rows)


async def one_message_through(url: str, target: Any) -> None:
    """Enqueue (put) one message and consume (relay) it: the created tables work."""
    seen: list[Any] = []

    async def handle(message: Any, ctx: Any) -> Any:
        seen.append(message.payload)
        return runtime.ack()

    async with await runtime.connect(url) as conn:
        if isinstance(target, runtime.Queue):
            await target.enqueue(conn, {"n": target.name})
        else:
            await target.put(conn, {"n": target.name})
    if isinstance(target, runtime.Queue):
        counts = await runtime.Consumer(url, target, handle, concurrency=1).drain()
        assert counts["ack"] == 1, (target.name, counts)
    else:
        report = await target.relay(url, handle)
        assert report["ack"] == 1, (target.name, report)
    assert seen == [{"n": target.name}]


def test_apply_creates_every_object_and_the_queues_work(engine: Engine, space: str) -> None:
    targets = examples(engine.dialect_name)

    async def go() -> None:
        for t in targets:
            assert set((await tables_of(space, t)).values()) == {0}
            created = await runtime.apply(space, t)
            assert [str(o) for o in created] == objects(t), t.name
        by_name = {t.name: t for t in targets}
        inline = engine.dialect_name in ("mysql", "mariadb")  # no index over processed rows
        assert objects(by_name["orders"]) == [
            "table orders_queue",
            "index orders_queue_claim",
            *([] if inline else ["index orders_queue_processed", "index orders_queue_enqueued"]),
            "index orders_queue_dedupe",
            "table orders_queue_pause",
        ]
        assert objects(by_name["emails"]) == [
            "table emails_queue",
            "table emails_dead",
            "table emails_queue_pause",
        ]
        assert objects(by_name["outbox"]) == [
            "table outbox",
            "index outbox_claim",
            *([] if inline else ["index outbox_processed", "index outbox_enqueued"]),
        ]
        async with await runtime.connect(space) as conn:
            for t in targets:
                if isinstance(t, runtime.Queue):
                    assert await verify(conn, t) == [], t.name
            for t in targets:  # the database lists every index reported
                for table in {o.table for o in declared(t)}:
                    listed = await index_rows(conn, t, table)
                    assert {
                        o.name for o in declared(t) if o.table == table and o.kind == "index"
                    } <= set(listed)
                assert await runtime.apply(conn, t) == [], t.name  # a second run: nothing
        for t in targets:
            await one_message_through(space, t)

    run(go())


def test_apply_from_the_command_line_then_again(engine: Engine, space: str) -> None:
    targets = examples(engine.dialect_name)
    code, out, err = qgen("apply", "--config", CONFIG, "--db", space)
    assert (code, err) == (0, ""), err
    want = [
        f"{'outbox' if t.name == 'outbox' else 'queue'} '{t.name}': created {o}"
        for t in sorted(targets, key=lambda t: t.name == "outbox")
        for o in objects(t)
    ]
    assert sorted(out.splitlines()) == sorted(want)
    code, out, err = qgen("apply", "--config", CONFIG, "--db", space)
    assert (code, err) == (0, "")
    assert len(out.splitlines()) == len(targets)
    assert all(
        line.endswith("nothing to create (every table and index exists)")
        for line in out.splitlines()
    ), out


def test_dry_run_creates_nothing_and_prints_sql_that_creates_the_tables(
    engine: Engine, space: str
) -> None:
    targets = {t.name: t for t in examples(engine.dialect_name)}
    code, out, err = qgen(
        "apply", "emails", "orders", "outbox", "--config", CONFIG, "--db", space, "--dry-run"
    )
    assert (code, err) == (0, ""), err
    for name in ("emails", "orders", "outbox"):
        assert set(run(tables_of(space, targets[name])).values()) == {0}  # nothing created
        assert f"'{name}': would create {', '.join(objects(targets[name]))}" in out
    statements = [
        "\n".join(ln for ln in s.splitlines() if not ln.startswith("-- ")) for s in out.split(";\n")
    ]

    async def run_printed() -> None:
        async with await runtime.connect(space) as conn:
            for sql in statements:
                if sql.strip():
                    await conn.execute(sql, {})
            for name in ("emails", "orders", "outbox"):
                assert await runtime.apply(conn, targets[name]) == []
                assert (await plan(conn, targets[name])).statements == []
            for name in ("emails", "orders"):
                assert await verify(conn, targets[name]) == []

    run(run_printed())
    code, out, _ = qgen("apply", "emails", "--config", CONFIG, "--db", space, "--dry-run")
    assert (code, out) == (
        0,
        "-- queue 'emails': would create nothing (every table and index exists)\n",
    )


def test_a_live_table_that_differs_is_reported_never_altered(engine: Engine, space: str) -> None:
    emails = next(t for t in examples(engine.dialect_name) if t.name == "emails")
    first = plain_sql(emails.rendered.require("schema")[0], emails.dialect)
    q = emails.dialect.quote
    # the queue table as someone made it by hand, without retry_after
    without = first.replace(f"  {q}retry_after{q} ", f"  {q}not_it{q} ")
    assert without != first

    async def make() -> None:
        async with await runtime.connect(space) as conn:
            await conn.execute(without, {})

    run(make())
    before = run(tables_of(space, emails))
    code, out, err = qgen("apply", "emails", "--config", CONFIG, "--db", space)
    assert code == 1
    assert (
        "queue 'emails': emails_queue: no column 'retry_after' (role retry_after); fix: add retry_after to emails_queue"
        in out.splitlines()
    ), out
    assert "apply never alters a table" in err and len(err.splitlines()) == 1, err
    assert run(tables_of(space, emails)) == before  # the dead-letter table was not created
    assert before["emails_dead"] == 0
    with pytest.raises(SchemaDiffers, match="no column 'retry_after'") as raised:
        run(runtime.apply(space, emails))
    assert any("retry_after" in f.problem for f in raised.value.findings)
    code, out, _ = qgen("apply", "emails", "--config", CONFIG, "--db", space, "--dry-run")
    assert (
        code == 1
        and "CREATE" not in out
        and "-- queue 'emails': emails_queue: no column 'retry_after'" in out
    ), out


@pytest.mark.parametrize("engine", engine_params("postgres", "mariadb", "sqlite"), indirect=True)
def test_concurrent_applies_create_each_object_once(engine: Engine, space: str) -> None:
    """Several processes' applies at once (workers starting together): none fails, each
    object is made once, and together they report each object created (two may both report
    one that the other made between their look and their CREATE; on SQLite, one writer at a
    time, never)."""
    targets = examples(engine.dialect_name)
    racers = 4

    async def go() -> None:
        conns = [await runtime.connect(space) for _ in range(racers)]
        try:
            for t in targets:
                results = await asyncio.gather(*(runtime.apply(c, t) for c in conns))
                reported = {str(o) for created in results for o in created}
                assert reported == set(objects(t)), t.name
                if engine.name == "sqlite":  # BEGIN IMMEDIATE: each object reported once
                    assert sorted(str(o) for created in results for o in created) == sorted(
                        objects(t)
                    )
            conn = conns[0]
            for t in targets:
                if isinstance(t, runtime.Queue):
                    assert await verify(conn, t) == [], t.name
                for table in {o.split(" ", 1)[1] for o in objects(t) if o.startswith("table ")}:
                    names = await index_rows(conn, t, table)
                    assert len(names) == len(set(names)), names
                    declared = {o.split(" ", 1)[1] for o in objects(t) if o.startswith("index ")}
                    # only the declared indexes (and the primary key's) exist: none twice
                    extra = set(names) - declared
                    assert len(extra) <= 1, names
        finally:
            for c in conns:
                await c.close()

    run(go())


def test_concurrent_cli_applies(engine: Engine, space: str) -> None:
    """Two `qgen apply` processes started together both exit 0 and between them report
    every object created."""
    import subprocess
    import sys

    argv = [sys.executable, "-m", "qgen.cli", "apply", "--config", CONFIG, "--db", space]
    procs = [
        subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    results = [(*p.communicate(timeout=120), p.returncode) for p in procs]
    for _, err, code in results:
        assert (code, err) == (0, ""), err
    lines = [ln for out, _, _ in results for ln in out.splitlines() if ": created " in ln]
    declared_count = sum(len(objects(t)) for t in examples(engine.dialect_name))
    assert len(set(lines)) == declared_count
    if engine.name == "sqlite":  # BEGIN IMMEDIATE: one apply at a time, each object once
        assert len(lines) == declared_count


def test_a_transaction_open_is_refused_where_ddl_commits_it(engine: Engine, space: str) -> None:
    """MySQL and MariaDB: a CREATE would commit the caller's open transaction, so apply
    refuses it and the caller's work stays uncommitted; PostgreSQL and SQLite: apply runs in
    the caller's transaction, and its rollback takes the tables away."""
    pings = next(t for t in examples(engine.dialect_name) if t.name == "pings")
    audit = next(t for t in examples(engine.dialect_name) if t.name == "audit")

    async def go() -> None:
        await runtime.apply(space, audit)
        async with await runtime.connect(space) as conn:
            await conn.begin()
            await audit.enqueue(conn, {"n": 1})
            if not conn.dialect.transactional_ddl:
                with pytest.raises(runtime.ConfigurationError, match="transaction open"):
                    await runtime.apply(conn, pings)
                assert conn.in_transaction
            else:
                assert [str(o) for o in await runtime.apply(conn, pings)] == objects(pings)
            await conn.rollback()
        assert set((await tables_of(space, pings)).values()) == {0}
        async with await runtime.connect(space) as conn:
            assert (await audit.stats(conn))["ready"] == 0  # the caller's enqueue rolled back

    run(go())


def test_the_sync_forms(engine: Engine, space: str) -> None:
    targets = {t.name: t for t in examples(engine.dialect_name)}
    assert [str(o) for o in targets["pings"].sync.apply(space)] == objects(targets["pings"])
    assert targets["pings"].sync.apply(space) == []
    assert [str(o) for o in targets["outbox"].sync.apply(space)] == objects(targets["outbox"])
    assert [str(o) for o in runtime.apply_sync(space, targets["emails"])] == objects(
        targets["emails"]
    )
    assert runtime.apply_sync(space, targets["emails"]) == []


def test_sync_apply_on_a_service_connection(engine: Engine, space: str) -> None:
    """A blocking connection of the service's own: PostgreSQL runs the DDL in its
    transaction (the service's rollback takes it back); MySQL and MariaDB refuse it, since
    the first CREATE would commit whatever the service has open."""
    from support.services import sync_connection

    invoices = next(t for t in examples(engine.dialect_name) if t.name == "invoices")
    if engine.name == "postgres":
        import psycopg

        with psycopg.connect(space) as conn:
            assert [str(o) for o in invoices.sync.apply(conn)] == objects(invoices)
            conn.rollback()
            assert set(run(tables_of(space, invoices)).values()) == {0}
            assert [str(o) for o in invoices.sync.apply(conn)] == objects(invoices)
            conn.commit()
    else:
        here = Engine(name=engine.name, url=space, dialect_name=engine.dialect_name)
        with sync_connection(here, "driver") as (conn, commit, _, _):
            if engine.name == "sqlite":
                assert [str(o) for o in invoices.sync.apply(conn)] == objects(invoices)
                commit()
            else:
                with pytest.raises(runtime.ConfigurationError, match="transaction open"):
                    invoices.sync.apply(conn)
                assert set(run(tables_of(space, invoices)).values()) == {0}
                assert [str(o) for o in invoices.sync.apply(space)] == objects(invoices)
    assert invoices.sync.apply(space) == []


def test_schema_prints_the_schema_block_and_it_runs(engine: Engine, space: str) -> None:
    targets = {t.name: t for t in examples(engine.dialect_name)}
    for name in ("orders", "invoices", "outbox"):
        code, out, err = qgen("schema", name, "--config", CONFIG, "--dialect", engine.dialect_name)
        assert (code, err) == (0, "")
        want = [
            plain_sql(st, targets[name].dialect) + ";"
            for st in targets[name].rendered.require("schema")
        ]
        assert out == "\n".join(want) + "\n"

        async def run_it(sql: str = out, target: Any = targets[name]) -> None:
            async with await runtime.connect(space) as conn:
                for st in sql.split(";\n"):
                    if st.strip():
                        await conn.execute(st, {})
                assert await runtime.apply(conn, target) == []
                if isinstance(target, runtime.Queue):
                    assert await verify(conn, target) == []

        run(run_it())


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["apply", "nosuch", "--db", "sqlite:///x.db"], "no queue 'nosuch'"),
        (["apply", "--db", "nosuch://x"], "unknown scheme 'nosuch'"),
        (["schema", "nosuch", "--dialect", "sqlite"], "declares no queue or outbox 'nosuch'"),
        (["schema", "orders"], "give --dialect, one of the declaration's dialects"),
        (["schema", "orders", "--dialect", "oracle"], "--dialect oracle is not one of"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], says: str) -> None:
    code, out, err = qgen(*argv, "--config", CONFIG)
    assert code == 2 and out == "" and says in err and len(err.splitlines()) == 1, err


def test_an_unreadable_rendered_file_is_one_line_and_exit_2(tmp_path: Path) -> None:
    cfg = tmp_path / "qgen.toml"
    cfg.write_text((EXAMPLES / "qgen.toml").read_text(encoding="utf-8"), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'app.db'}?mode=rwc"
    code, out, err = qgen("apply", "emails", "--config", str(cfg), "--db", db)  # never rendered
    assert code == 2 and out == "" and "emails.sql" in err and len(err.splitlines()) == 1, err
    assert main(["render", "--config", str(cfg), "--dialect", "sqlite"]) == 0
    path = tmp_path / "sql" / "sqlite" / "emails.sql"
    path.write_text(
        path.read_text(encoding="utf-8").replace("INTEGER", "BIGINT", 1), encoding="utf-8"
    )
    code, out, err = qgen("apply", "emails", "--config", str(cfg), "--db", db)
    assert code == 2 and out == "" and "emails.sql" in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "app.db").exists() or sqlite3.connect(tmp_path / "app.db").execute(
        "SELECT count(*) FROM sqlite_master"
    ).fetchone() == (0,)


#: dropping an index, as an operator might have
DROP_INDEX = {
    "postgres": 'DROP INDEX "{index}"',
    "sqlite": 'DROP INDEX "{index}"',
    "mariadb": "DROP INDEX `{index}` ON `{table}`",
    "mysql": "DROP INDEX `{index}` ON `{table}`",
}


def test_a_missing_index_is_created_where_it_has_a_create_index_of_its_own(
    engine: Engine, space: str
) -> None:
    """PostgreSQL and SQLite create a dropped index again; on MySQL and MariaDB the index is
    part of the CREATE TABLE, which leaves a table that exists alone: the finding says what
    is missing and nothing runs."""
    orders = next(t for t in examples(engine.dialect_name) if t.name == "orders")

    async def go() -> None:
        await runtime.apply(space, orders)
        async with await runtime.connect(space) as conn:
            await conn.execute(
                DROP_INDEX[engine.name].format(index="orders_queue_dedupe", table="orders_queue"),
                {},
            )
            if conn.dialect.transactional_ddl:
                found = await plan(conn, orders)
                assert [str(o) for o in found.missing] == ["index orders_queue_dedupe"]
                assert [str(o) for o in await runtime.apply(conn, orders)] == [
                    "index orders_queue_dedupe"
                ]
                assert await verify(conn, orders) == []
            else:
                found = await plan(conn, orders)
                assert (found.missing, found.statements) == ([], [])
                with pytest.raises(SchemaDiffers, match="no unique index on") as raised:
                    await runtime.apply(conn, orders)
                assert [f.problem for f in raised.value.findings] == [
                    f.problem for f in await verify(conn, orders)
                ]

    run(go())


def test_the_chart_index_comes_to_an_existing_table_and_verify_does_not_require_it(
    engine: Engine, space: str
) -> None:
    """The per-minute chart's index on a table made before it: apply creates it where it
    has a CREATE INDEX of its own (PostgreSQL, SQLite); verify does not require it (without
    it the chart reads the table, slower, and counts the same). On MySQL and MariaDB there
    is no such index: the claim index carries enqueued_at last, and verify takes a claim
    index without it (led by the same columns) as one made before."""
    orders = next(t for t in examples(engine.dialect_name) if t.name == "orders")

    async def go() -> None:
        await runtime.apply(space, orders)
        async with await runtime.connect(space) as conn:
            partial = conn.dialect.partial_index
            if partial:
                await conn.execute(
                    DROP_INDEX[engine.name].format(index="orders_queue_enqueued", table=""), {}
                )
            else:  # the claim index as rendered before it carried enqueued_at
                await conn.execute(
                    "ALTER TABLE `orders_queue` DROP INDEX `orders_queue_claim`, "
                    "ADD INDEX `orders_queue_claim` (`queue`, `processed_at`, `id`)",
                    {},
                )
            assert await verify(conn, orders) == []
            created = [str(o) for o in await runtime.apply(conn, orders)]
            assert created == (["index orders_queue_enqueued"] if partial else [])
            assert (
                "orders_queue_enqueued" in await index_rows(conn, orders, "orders_queue")
            ) == partial
            await orders.enqueue(conn, {"n": 1})
            minutes = await runtime.operate.per_minute(orders, conn)
        assert sum(minutes["enqueued"] or []) == 1

    run(go())
