"""The one place statements run: a named step of a rendered file, bound to its parameters."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.contract.rendered import Kind, Statement, Step
from runtime.drivers.base import Connection, Rows, Script, atomic


@dataclass
class StepResult:
    """Rows of the step's last row-returning statement; rowcount of its first statement that changes rows."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    rowcount: int | None = None


async def run_step(conn: Connection, statements: Step, params: Mapping[str, Any]) -> StepResult:
    """Run a step's statements in order, in one transaction when there are several.

    A statement that returns rows hands its first row's columns, and ``ids`` (a JSON array
    of every row's id), to the statements after it; a SELECT that finds nothing ends the
    step, since the statements after it act on what it found. Example::

        await run_step(conn, queue.steps.ack, {"id": 7, "token": token})
    """
    if len(statements) == 1:
        return await _run_one(conn, statements[0], dict(params), StepResult())
    async with atomic(conn):
        result, bound = StepResult(), dict(params)
        for sql in statements:
            result = await _run_one(conn, sql, bound, result)
            if sql.kind is Kind.READS:
                if not result.rows:
                    break
                _hand_on(bound, result.rows[0], [r["id"] for r in result.rows if "id" in r])
    return result


async def run_rows(
    conn: Connection,
    statements: Step,
    params: Mapping[str, Any],
    found: list[int] | None = None,
) -> Rows:
    """``run_step``'s rows as tuples with their column names (``Connection.fetchrows``): the
    rows of the step's last row-returning statement, read from the driver without a dict a
    row, whether the step has one statement or several (which run as ``run_step`` runs
    them: in one transaction, each SELECT handing its first row and ``ids`` on; the driver
    runs them as one script, ``Connection.run_script``).

    ``found``, when given, receives how many rows each row-returning statement of a step of
    several found, in order: a listing that found rows the statement after it could not
    take (others locked them since) reads ``[n, 0]``, an empty listing ``[0]``."""
    if len(statements) == 1 and statements[0].kind is not Kind.WRITES:
        return await conn.fetchrows(statements[0], dict(params))
    if len(statements) == 1:
        await conn.execute(statements[0], dict(params))
        return (), []
    return await conn.run_script(_rows_script(statements, params, found))


async def run_rows_together(
    conn: Connection, steps: Sequence[tuple[Step, Mapping[str, Any]]]
) -> list[Rows]:
    """Several steps, each as ``run_rows`` runs it, in one transaction when there are several
    (the caller's when one is open, else their own); the rows of each, in order. The driver
    runs them as one script (``Connection.run_script``): where it runs statements on a thread
    of its own, the BEGIN, every statement and the COMMIT are one trip there."""
    if len(steps) <= 1:
        return [await run_rows(conn, statements, params) for statements, params in steps]
    each: list[Rows] = []
    await conn.run_script(_steps_script(steps, each))
    return each


def _steps_script(steps: Sequence[tuple[Step, Mapping[str, Any]]], each: list[Rows]) -> Script:
    """``run_rows_together``'s steps, one after another in one script; ``each`` receives
    the rows of each."""
    rows: Rows = ((), [])
    for statements, params in steps:
        rows = yield from _rows_script(statements, params)
        each.append(rows)
    return rows


async def begin_rows(
    conn: Connection,
    statements: Step,
    params: Mapping[str, Any],
    found: list[int] | None = None,
) -> Rows:
    """``conn.begin(immediate=True)``, then ``run_rows`` in the transaction it opened, which
    stays open (a row-lock claim); a step of one row-returning statement goes with its BEGIN
    (``Connection.begin_fetchrows``: one trip where the driver runs on a thread)."""
    if len(statements) == 1 and statements[0].kind is not Kind.WRITES:
        return await conn.begin_fetchrows(statements[0], dict(params))
    await conn.begin(immediate=True)
    return await run_rows(conn, statements, params, found)


def _rows_script(
    statements: Step, params: Mapping[str, Any], found: list[int] | None = None
) -> Script:
    """``run_rows``' step of several statements, one statement at a time: each SELECT hands
    its first row and ``ids`` on; one that finds nothing ends the step."""
    names: tuple[str, ...] = ()
    rows: list[tuple[Any, ...]] = []
    bound = dict(params)
    for sql in statements:
        if sql.kind is Kind.WRITES:
            yield sql, bound, False
            continue
        got = yield sql, bound, True
        assert got is not None  # a row-returning statement is sent its rows
        names, rows = got
        if found is not None:
            found.append(len(rows))
        if sql.kind is Kind.READS:
            if not rows:
                break
            at = names.index("id") if "id" in names else None
            ids = [row[at] for row in rows] if at is not None else []
            _hand_on(bound, dict(zip(names, rows[0], strict=True)), ids)
    return names, rows


def _hand_on(bound: dict[str, Any], first: Mapping[str, Any], ids: list[Any]) -> None:
    """What a SELECT in a step of several statements gives the statements after it: its
    first row's columns as parameters, and ``ids``, a JSON array of every row's id."""
    bound.update(first)
    bound["ids"] = json.dumps(ids)


async def _run_one(
    conn: Connection, sql: Statement, params: dict[str, Any], result: StepResult
) -> StepResult:
    """Run one statement by its kind (written by the generator); keep the rows it returns,
    and the first count of changed rows."""
    kind = sql.kind
    if kind is Kind.READS:  # reads: rows, no change to count
        return StepResult(rows=await conn.fetchall(sql, params), rowcount=result.rowcount)
    if kind is Kind.WRITES_RETURNING:  # … RETURNING: the rows are the changed ones
        rows = await conn.fetchall(sql, params)
        changed = len(rows)
    else:
        rows, changed = result.rows, await conn.execute(sql, params)
    first = result.rowcount if result.rowcount is not None else changed
    return StepResult(rows=rows, rowcount=first)
