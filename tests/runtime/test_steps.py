"""A step of several statements (runtime.steps): each SELECT hands its first row's columns and
``ids`` (a JSON array of its rows' ids) to the statements after it, a SELECT that finds nothing
ends the step, and the step's rows are those of its last row-returning statement. ``run_rows``
(a claim's path, tuples with their column names) and ``run_step`` (dicts) give the same rows
and leave the same table behind, on every engine."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from support.engines import Engine, drop_tables, run, unique_table

import runtime
from runtime.connect import connect
from runtime.contract.rendered import Kind, Statement, Step
from runtime.drivers.base import Connection
from runtime.steps import run_rows, run_rows_together, run_step

# How each dialect spells a bound parameter and "id is one of the JSON array :ids".
_PARAM = {"postgres": "%({})s", "mariadb": "%({})s", "mysql": "%({})s", "sqlite": ":{}"}
_IN_IDS = {
    "postgres": "id = ANY(ARRAY(SELECT CAST(j.value AS BIGINT) "
    "FROM jsonb_array_elements_text(CAST({ids} AS JSONB)) AS j))",
    "mariadb": "id IN (SELECT j.qgen_id FROM JSON_TABLE({ids}, '$[*]' "
    "COLUMNS (qgen_id BIGINT PATH '$')) AS j)",
    "sqlite": "id IN (SELECT j.value FROM json_each({ids}) AS j)",
}
_IN_IDS["mysql"] = _IN_IDS["mariadb"]


def _step(dialect: str, table: str) -> Step:
    """Pick up to :limit rows; read them back with a tag of their own; write the tag (handed
    on from the second SELECT's first row) onto the rows the first SELECT found."""
    p = _PARAM[dialect].format
    in_ids = _IN_IDS[dialect].format(ids=p("ids"))
    return (
        Statement(
            f"SELECT id FROM {table} WHERE tag = '' ORDER BY id LIMIT {p('limit')}", Kind.READS
        ),
        Statement(
            f"SELECT id, 'mark-x' AS tag FROM {table} WHERE {in_ids} ORDER BY id", Kind.READS
        ),
        Statement(f"UPDATE {table} SET tag = {p('tag')} WHERE {in_ids}", Kind.WRITES),
    )


async def _rows_of(conn: Connection, table: str, n: int) -> None:
    """The test's table, rows 1 to n, none tagged yet."""
    await conn.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, tag VARCHAR(20))")
    for i in range(1, n + 1):
        await conn.execute(f"INSERT INTO {table} (id, tag) VALUES ({i}, '')")


async def _tags(conn: Connection, table: str) -> list[str]:
    rows = await conn.fetchall(f"SELECT tag FROM {table} ORDER BY id")
    return [r["tag"] for r in rows]


def _with_table(engine: Engine, n: int, body: Callable[[Connection, str], Awaitable[None]]) -> None:
    """``body(conn, table)`` on a new connection and a table of rows 1 to n, dropped after."""
    table = unique_table("steps")

    async def scenario() -> None:
        conn = await connect(engine.url)
        try:
            await _rows_of(conn, table, n)
            await body(conn, table)
        finally:
            await conn.close()
            await drop_tables(engine.url, table)

    run(scenario())


Runner = Callable[[Connection, Step, dict[str, Any]], Awaitable[list[tuple[Any, ...]]]]


async def _by_rows(conn: Connection, step: Step, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    names, rows = await run_rows(conn, step, params)
    assert not rows or names == ("id", "tag")
    return rows


async def _by_step(conn: Connection, step: Step, params: dict[str, Any]) -> list[tuple[Any, ...]]:
    result = await run_step(conn, step, params)
    return [(row["id"], row["tag"]) for row in result.rows]


@pytest.mark.parametrize("runner", [_by_rows, _by_step], ids=["run_rows", "run_step"])
def test_a_step_hands_on_its_first_row_and_ids(engine: Engine, runner: Runner) -> None:
    table = unique_table("steps")

    async def scenario() -> None:
        conn = await connect(engine.url)
        try:
            await _rows_of(conn, table, 5)
            step = _step(engine.dialect_name, table)

            rows = await runner(conn, step, {"limit": 3})
            assert [(int(i), t) for i, t in rows] == [(1, "mark-x"), (2, "mark-x"), (3, "mark-x")]
            rows = await runner(conn, step, {"limit": 3})
            assert [(int(i), t) for i, t in rows] == [(4, "mark-x"), (5, "mark-x")]
            # nothing left: the first SELECT finds no row, and the step ends there
            assert await runner(conn, step, {"limit": 3}) == []

            tags = await conn.fetchall(f"SELECT id, tag FROM {table} ORDER BY id")
            assert [(int(r["id"]), r["tag"]) for r in tags] == [(i, "mark-x") for i in range(1, 6)]
            # the step ran in a transaction of its own, and that transaction is over
            assert not conn.in_transaction
        finally:
            await conn.close()
            await drop_tables(engine.url, table)

    run(scenario())


# a pause inside a step (the caller is cancelled while it runs): the server's own, or on
# SQLite a function of the test's, registered on the connection (``_with_pause``)
_PAUSE = {
    "postgres": "SELECT pg_sleep(0.4) AS paused",
    "mariadb": "SELECT SLEEP(0.4) AS paused",
    "mysql": "SELECT SLEEP(0.4) AS paused",
    "sqlite": "SELECT qgen_test_pause(0.4) AS paused",
}


async def _with_pause(conn: Connection) -> None:
    """SQLite has no sleep of its own: give the connection one, on its own thread."""
    if conn.dialect.name != "sqlite":
        return

    def pause(seconds: float) -> int:
        time.sleep(seconds)
        return 1

    raw = conn._raw  # type: ignore[attr-defined]
    await conn._on_thread(raw.create_function, "qgen_test_pause", 1, pause)  # type: ignore[attr-defined]


def test_a_step_is_one_transaction_whole_or_not_at_all(engine: Engine) -> None:
    # run_rows runs a step of several statements as one script (Connection.run_script; on
    # MySQL/MariaDB and SQLite in one trip to the connection's thread): a statement that
    # fails rolls the step back whole; inside the caller's transaction the step commits only
    # with it; a caller cancelled while the step runs leaves nothing of it behind
    table = unique_table("steps")

    async def scenario() -> None:
        conn = await connect(engine.url)
        try:
            await _rows_of(conn, table, 3)
            step = _step(engine.dialect_name, table)
            failing = (*step, Statement(f"SELECT no_such_column FROM {table}", Kind.READS))

            with pytest.raises(runtime.DatabaseError):
                await run_rows(conn, failing, {"limit": 2})
            assert not conn.in_transaction and await _tags(conn, table) == ["", "", ""]

            await conn.begin()
            await run_rows(conn, step, {"limit": 2})
            assert conn.in_transaction  # the caller's, still open
            await conn.rollback()
            assert await _tags(conn, table) == ["", "", ""]

            await _with_pause(conn)
            # the step has written its tags, then pauses: cancelled before its COMMIT
            paused = (*step, Statement(_PAUSE[engine.dialect_name], Kind.READS))
            task = asyncio.create_task(run_rows(conn, paused, {"limit": 2}))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.sleep(0.6)  # whatever still runs of the step has ended
            # the connection lives on, outside any transaction, and nothing stands
            assert not conn.closed and not conn.in_transaction
            assert await _tags(conn, table) == ["", "", ""]
            _, rows = await run_rows(conn, step, {"limit": 2})
            assert len(rows) == 2 and await _tags(conn, table) == ["mark-x", "mark-x", ""]
        finally:
            await conn.close()
            await drop_tables(engine.url, table)

    run(scenario())


def test_steps_together_are_one_transaction_with_the_rows_of_each(engine: Engine) -> None:
    # run_rows_together (a batch's settlements of several outcomes): every step's rows, in
    # order; one transaction of their own, rolled back whole when a later step fails; inside
    # the caller's transaction they commit only with it
    async def body(conn: Connection, table: str) -> None:
        step = _step(engine.dialect_name, table)
        p = _PARAM[engine.dialect_name].format
        one = (Statement(f"UPDATE {table} SET tag = 'one' WHERE id = {p('id')}", Kind.WRITES),)
        failing = (Statement(f"SELECT no_such_column FROM {table}", Kind.READS),)

        with pytest.raises(runtime.DatabaseError):
            await run_rows_together(conn, [(step, {"limit": 2}), (one, {"id": 5}), (failing, {})])
        assert not conn.in_transaction and await _tags(conn, table) == ["", "", "", "", ""]

        await conn.begin()
        await run_rows_together(conn, [(step, {"limit": 2}), (one, {"id": 5})])
        assert conn.in_transaction  # the caller's, still open
        await conn.rollback()
        assert await _tags(conn, table) == ["", "", "", "", ""]

        (names, rows), written, (_, more) = await run_rows_together(
            conn, [(step, {"limit": 2}), (one, {"id": 5}), (step, {"limit": 1})]
        )
        assert not conn.in_transaction
        assert names == ("id", "tag") and [(int(i), t) for i, t in rows] == [
            (1, "mark-x"),
            (2, "mark-x"),
        ]
        assert written == ((), []) and [int(i) for i, _ in more] == [3]
        assert await _tags(conn, table) == ["mark-x", "mark-x", "mark-x", "", "one"]
        assert await run_rows_together(conn, []) == []

    _with_table(engine, 5, body)
