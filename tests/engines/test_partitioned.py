"""layout = "partitioned" (PostgreSQL): rows ranged by processed_at, the pending ones in the
default partition; prune drops whole partitions past the age and deletes only what is left.

The outcomes themselves run through the ordinary suites with the layout switched on:
``QGEN_TEST_LAYOUT=partitioned pytest tests/runtime/test_forms.py tests/runtime/test_outcomes.py -k postgres``
(tests/support/queues.py makes every PostgreSQL queue that keeps processed rows partitioned).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, engine_params, run
from support.queues import QueueUnderTest, make_queue

import runtime
from qgen.build import build_unit
from qgen.cli import main
from qgen.declaration import parse_declaration
from runtime.contract.rendered import parse_rendered
from runtime.queue import Queue
from runtime.verify import verify

POSTGRES = pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
KEPT = ("attempt", "retry_after", "processed_at")


def render(tmp_path: Path, toml: str) -> tuple[int, str]:
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(textwrap.dedent(toml), encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["render", "--config", str(cfg)])
    return code, err.getvalue()


QUEUE = """
    dialects = [{dialects}]
    [queues.jobs]
    table = "jobs"
    form = "lease"
    {extra}
    [queues.jobs.columns]
    id = "id"
    payload = "payload"
    locked_until = "locked_until"
    {processed}
"""


def _toml(dialects: str, extra: str = 'layout = "partitioned"', processed: bool = True) -> str:
    return QUEUE.format(
        dialects=dialects,
        extra=extra,
        processed='processed_at = "processed_at"' if processed else "",
    )


@pytest.mark.parametrize("dialect", ["mysql", "mariadb", "sqlite"])
def test_another_dialect_is_refused_in_one_line_naming_postgresql(tmp_path, dialect):
    code, err = render(tmp_path, _toml(f'"postgres", "{dialect}"'))
    assert code == 2, err
    assert err.count("\n") == 1 and "PostgreSQL only" in err and dialect in err, err


def test_a_table_without_processed_at_or_hours_without_the_layout_are_refused(tmp_path):
    code, err = render(tmp_path, _toml('"postgres"', processed=False))
    assert code == 2 and "processed_at" in err and err.count("\n") == 1, err
    code, err = render(tmp_path, _toml('"postgres"', extra="partition_hours = 6"))
    assert code == 2 and 'layout = "partitioned"' in err, err
    code, err = render(tmp_path, _toml('"postgres"', extra='layout = "sharded"'))
    assert code == 2 and "unknown layout" in err, err
    bad_hours = 'layout = "partitioned"\n    partition_hours = 0'
    code, err = render(tmp_path, _toml('"postgres"', extra=bad_hours))
    assert code == 2 and "partition_hours" in err, err
    assert render(tmp_path, _toml('"postgres"'))[0] == 0


async def _relations(qt: QueueUnderTest) -> dict[str, str]:
    """The table's partitions: name → bound ("DEFAULT" for the pending one)."""
    rows = await qt.sql(
        "SELECT c.relname AS name, pg_get_expr(c.relpartbound, c.oid) AS bound "
        "FROM pg_inherits AS i JOIN pg_class AS c ON c.oid = i.inhrelid "
        "WHERE i.inhparent = to_regclass(%(t)s)",
        {"t": qt.q(qt.table)},
    )
    return {str(r["name"]): str(r["bound"]) for r in rows}


async def _where(qt: QueueUnderTest) -> dict[int, str]:
    """Each row's id → the partition that holds it."""
    rows = await qt.sql(
        f"SELECT {qt.col('id')} AS id, tableoid::regclass::text AS part FROM {qt.q(qt.table)}"
    )
    return {int(r["id"]): str(r["part"]) for r in rows}


@POSTGRES
def test_apply_creates_the_layout_once_and_verify_finds_it_matching(engine: Engine) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease", columns=KEPT, extra={"layout": "partitioned"})
        try:
            await qt.drop()  # apply makes it all, from nothing
            async with await runtime.connect(qt.url) as db:
                created = [str(o) for o in await runtime.apply(db, qt.queue)]
                assert f"table {qt.table}_pending" in created
                assert f"function {qt.table}_rotate" in created
                assert await runtime.apply(db, qt.queue) == []
                assert await verify(db, qt.queue) == []
            parts = await _relations(qt)
            assert parts.pop(f"{qt.table}_pending") == "DEFAULT"
            assert len(parts) == 4  # today and three days ahead
            kind = await qt.sql(
                "SELECT relkind FROM pg_class WHERE oid = to_regclass(%(t)s)",
                {"t": qt.q(qt.table)},
            )
            assert kind == [{"relkind": "p"}]
        finally:
            await qt.drop()

    run(go())


@POSTGRES
def test_verify_finds_a_plain_table_behind_a_partitioned_file(engine: Engine) -> None:
    """A table created before layout = "partitioned" was declared has no pending partition:
    verify says so, with the fix, instead of passing it."""

    async def go() -> None:
        qt = await make_queue(engine, "lease", columns=KEPT, extra={"layout": "partitioned"})
        try:
            await qt.drop()
            await qt.sql(
                f"CREATE TABLE {qt.q(qt.table)} (id BIGSERIAL PRIMARY KEY, payload JSONB NOT "
                "NULL, attempt INTEGER NOT NULL DEFAULT 0, retry_after TIMESTAMPTZ, "
                "locked_until TIMESTAMPTZ, processed_at TIMESTAMPTZ)"
            )
            async with await runtime.connect(qt.url) as db:
                found = [str(f) for f in await verify(db, qt.queue)]
            plain = [f for f in found if "partition of pending rows, does not exist" in f]
            assert len(plain) == 1, found
            assert f"{qt.table}_pending" in plain[0] and 'layout = "plain"' in plain[0]
        finally:
            await qt.drop()

    run(go())


@POSTGRES
def test_verify_finds_a_partitioned_table_behind_a_plain_file(engine: Engine) -> None:
    """The other way round: the table was created with the partitioned layout and the file
    rendered plain afterwards. Its settlements would set processed_at in place and move rows
    between partitions; verify says so, with the fix. The same file on a plain table passes."""

    async def go() -> None:
        parted = await make_queue(engine, "lease", columns=KEPT, extra={"layout": "partitioned"})
        plain = await make_queue(engine, "lease", columns=KEPT, extra={"layout": "plain"})
        try:
            async with await runtime.connect(plain.url) as db:
                assert await verify(db, plain.queue) == []
                # a plain file of the same shape, for the partitioned table
                behind = _plain_file_for(parted.table)
                found = [str(f) for f in await verify(db, behind)]
            moved = [f for f in found if "the table is partitioned, but the file" in f]
            assert len(moved) == 1, found
            assert 'layout = "partitioned"' in moved[0]
        finally:
            await plain.drop()
            await parted.drop()

    run(go())


def _plain_file_for(table: str) -> Queue:
    """A lease queue keeping processed rows, plain layout, rendered for ``table``."""
    cols = {c: c for c in ("id", "payload", *KEPT, "locked_until")}
    decl = {"table": table, "form": "lease", "columns": cols, "lease_s": 30, "layout": "plain"}
    parsed = parse_declaration({"dialects": ["postgres"], "queues": {"q": decl}})
    return Queue(parse_rendered(build_unit(parsed.queues["q"], "postgres"), f"{table}.sql"))


@POSTGRES
@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
def test_an_ack_moves_the_row_out_of_the_pending_partition(engine: Engine, form: str) -> None:
    async def go() -> None:
        qt = await make_queue(engine, form, columns=KEPT, extra={"layout": "partitioned"})
        try:
            ids = await qt.enqueue({"n": 1}, {"n": 2})
            pending = f"{qt.table}_pending"
            assert set((await _where(qt)).values()) == {pending}
            acked: list[int] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                if message.payload["n"] == 1:
                    acked.append(message.id)
                    return runtime.ack()
                return runtime.retry_after(3600)

            await runtime.Consumer(qt.url, qt.queue, handle).drain()
            (mid,) = acked
            where = await _where(qt)
            assert where[mid] != pending and where[mid].startswith(f"{qt.table}_p2")
            other = next(i for i in ids if i != mid)
            assert where[other] == pending
            async with await runtime.connect(qt.url) as db:
                status = await qt.queue.status(db, mid)
            assert status is not None and status.state == "done"
        finally:
            await qt.drop()

    run(go())


async def _old_partition(qt: QueueUnderTest, days_ago: int) -> str:
    """A partition of the day ``days_ago`` days back, as rotate names them."""
    rows = await qt.sql(
        "SELECT to_char(d AT TIME ZONE 'UTC', 'YYYYMMDDHH24') AS tag, "
        "CAST(d AS TEXT) AS lo, CAST(d + interval '1 day' AS TEXT) AS hi FROM ("
        "SELECT to_timestamp(floor(extract(epoch FROM now()) / 86400) * 86400) "
        f"- interval '{int(days_ago)} days' AS d) AS x"
    )
    name = f"{qt.table}_p{rows[0]['tag']}"
    await qt.sql(
        f"CREATE TABLE {qt.q(name)} PARTITION OF {qt.q(qt.table)} "
        f"FOR VALUES FROM ('{rows[0]['lo']}') TO ('{rows[0]['hi']}')"
    )
    return name


async def _age(qt: QueueUnderTest, ids: list[int], days: int) -> None:
    """Mark rows ``ids`` processed ``days`` days ago (they move to that day's partition)."""
    await qt.sql(
        f"UPDATE {qt.q(qt.table)} SET {qt.col('processed_at')} = clock_timestamp() "
        f"- interval '{int(days)} days' WHERE {qt.col('id')} = ANY(%(ids)s)",
        {"ids": ids},
    )


@POSTGRES
def test_prune_drops_old_partitions_and_leaves_pending_rows_untouched(engine: Engine) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "row_lock", columns=KEPT, extra={"layout": "partitioned"})
        try:
            ids = await qt.enqueue(*[{"n": i} for i in range(10)])
            old = await _old_partition(qt, 3)
            await _age(qt, ids[:4], 3)  # whole partition past the age: dropped
            await _age(qt, ids[4:5], 5)  # no partition of its day: kept in the default one
            await _age(qt, ids[5:7], 0)  # processed just now: stays
            before = await qt.rows()
            pending = [r for r in before if r["processed_at"] is None]
            assert [r["id"] for r in pending] == ids[7:]
            async with await runtime.connect(qt.url) as db:
                pruned = await qt.queue.prune(db, 86400, batch=2)
            assert pruned == 5
            assert old not in await _relations(qt)
            after = await qt.rows()
            assert [r["id"] for r in after] == ids[5:]
            assert [r for r in after if r["processed_at"] is None] == pending
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.prune(db, 86400) == 0
        finally:
            await qt.drop()

    run(go())


@POSTGRES
def test_prune_keeps_a_partition_that_holds_another_groups_rows(engine: Engine) -> None:
    async def go() -> None:
        cols = (*KEPT, "group")
        extra: dict[str, Any] = {"layout": "partitioned", "default_group": "a"}
        qt = await make_queue(engine, "lease", columns=cols, extra=extra)
        try:
            mine = await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as db:
                theirs = await qt.queue.enqueue(db, {"n": 3}, group="b")
            old = await _old_partition(qt, 2)
            await _age(qt, [*mine, theirs], 2)
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.prune(db, 86400) == 2  # group a's, row by row
            assert old in await _relations(qt)
            assert [r["id"] for r in await qt.rows()] == [theirs]
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.prune(db, 86400, group="b") == 1  # the partition, whole
            assert old not in await _relations(qt)
        finally:
            await qt.drop()

    run(go())


@POSTGRES
@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
def test_consumers_racing_acks_never_fail_a_claim(engine: Engine, form: str, caplog) -> None:
    """Three consumers drain every message once with nothing logged: the race with a moved
    row is rare at this scale (test_a_take_waiting_… pins it down), this is the whole path."""

    async def go() -> None:
        qt = await make_queue(engine, form, columns=KEPT, extra={"layout": "partitioned"})
        try:
            n = 400
            async with await runtime.connect(qt.url) as db:
                await qt.queue.enqueue_many(db, [{"n": i} for i in range(n)])
            seen: list[int] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append(int(message.payload["n"]))
                return runtime.ack()

            consumers = [
                runtime.Consumer(qt.url, qt.queue, handle, batch=5, concurrency=5) for _ in range(3)
            ]
            await asyncio.gather(*(c.drain() for c in consumers))
            assert sorted(seen) == list(range(n))
            rows = await qt.rows()
            assert len(rows) == n and all(r["processed_at"] is not None for r in rows)
        finally:
            await qt.drop()

    with caplog.at_level("WARNING"):
        run(go())
    assert not [r for r in caplog.records if "moved to another partition" in r.getMessage()]
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")], [
        r.getMessage() for r in caplog.records
    ]


@POSTGRES
def test_every_statement_of_a_partitioned_file_runs(engine: Engine, tmp_path: Path) -> None:
    """Each form's file with every role that fits it: each statement runs on the server
    (params from support.statements.params_for), as the examples' do on the plain layout."""
    from support.statements import namespace, params_for, run_file

    roles = ("attempt", "retry_after", "processed_at", "enqueued_at", "priority", "fifo_key")
    roles += ("dedupe_key", "last_error", "result", "progress", "group")

    async def go() -> None:
        for form in ("row_lock", "lease", "advisory"):
            cols = {"id": "id", "payload": "payload"} | {r: r for r in roles}
            if form == "lease":
                cols["locked_until"] = "locked_until"
            decl: dict[str, Any] = {
                "table": f"part_{form}",
                "form": form,
                "layout": "partitioned",
                "columns": cols,
                "max_attempts": 3,
                "dead_letter": {"group": "d"},
                "default_group": "g",
            }
            parsed = parse_declaration({"dialects": ["postgres"], "queues": {"q": decl}})
            path = tmp_path / f"{form}.sql"
            path.write_text(build_unit(parsed.queues["q"], "postgres"), encoding="utf-8")
            async with namespace(engine) as conn:
                ran, failures = await run_file(conn, path, params_for("postgres"))
            assert not failures, "\n".join(failures)
            assert ran > 40

    run(go())


@POSTGRES
def test_a_take_waiting_on_a_row_being_acked_finds_it_gone_not_an_error(engine: Engine) -> None:
    """The row-lock take waits for a row another transaction holds. When that transaction
    acks the row and commits, the take must find no row (as the plain layout's re-check of
    processed_at does), not fail: an ack that moved the row with an UPDATE would make it
    fail with "tuple to be locked was already moved to another partition"."""
    from support.statements import params_for

    async def go() -> None:
        qt = await make_queue(
            engine,
            "row_lock",
            columns=KEPT,
            dead="group",
            max_attempts=3,
            extra={"layout": "partitioned", "default_group": "g"},
        )
        try:
            (mid,) = await qt.enqueue({"n": 1})
            params = {**params_for("postgres"), "id": mid, "ids": f"[{mid}]", "group": "g"}
            (ack,) = qt.queue.rendered.require("ack")
            (take,) = qt.queue.rendered.require("take")
            async with (
                await runtime.connect(qt.url) as a,
                await runtime.connect(qt.url) as b,
            ):
                await a.begin()
                await a.execute(ack, params)  # holds the row until commit
                await b.begin()
                waiting = asyncio.create_task(b.fetchall(take, params))
                await asyncio.sleep(0.5)
                assert not waiting.done()  # the take waits for the ack's transaction
                await a.commit()
                assert await waiting == []
                await b.rollback()
            (row,) = await qt.rows()
            assert row["processed_at"] is not None
        finally:
            await qt.drop()

    run(go())
