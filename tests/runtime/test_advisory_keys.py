"""The advisory form's keys. On SQLite, the key registry (no server lock there: the keys
live in this process, one per database, table and row): a key is held once whatever the
number of consumers, another database or table has keys of its own, an unlock frees the key,
and a claim keeps at most ``limit`` of them. On PostgreSQL, the claim's statement: it tries
only as many keys as it keeps, besides those other workers hold, and holds no other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.engines import engine_params, run
from support.queues import make_queue

import runtime
from runtime.forms import AdvisoryForm, form_for
from runtime.process_keys import key_held, take_keys

SQL = Path(__file__).resolve().parents[2] / "generated_examples" / "sql" / "sqlite"


def form(name: str, keyspace: str) -> AdvisoryForm:
    queue = runtime.load(SQL / f"{name}.sql")
    assert isinstance(queue, runtime.Queue) and queue.form == "advisory"
    f = form_for(queue, keyspace=keyspace)
    assert isinstance(f, AdvisoryForm) and not queue.dialect.server_advisory
    return f


def hold(f: AdvisoryForm, ids: list[int], limit: int) -> list[int]:
    """The keys a claim of ``f`` that listed ``ids`` holds."""
    return take_keys(f.keyspace, f.queue.table, ids, limit)


def test_a_key_is_held_once_per_database_table_and_row(tmp_path: Path) -> None:
    db, other_db = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    one, two = form("webhooks", db), form("webhooks", db)  # two consumers of one queue
    elsewhere, other_table = form("webhooks", other_db), form("exports", db)
    try:
        assert hold(one, [1, 2, 3], limit=2) == [1, 2]
        assert hold(two, [1, 2, 3, 4], limit=10) == [3, 4]
        assert hold(two, [1, 2], limit=10) == []
        # another database, or another table in the same one: keys of their own
        assert hold(elsewhere, [1, 2], limit=10) == [1, 2]
        assert hold(other_table, [1, 2], limit=10) == [1, 2]
        run(one.unlock(None, [1]))
        assert hold(two, [1, 2], limit=10) == [1]
        assert hold(one, [1], limit=10) == []
    finally:
        for f in (one, two, elsewhere, other_table):
            run(f.unlock(None, range(1, 5)))
    tables = {f.queue.table for f in (one, other_table)}
    assert not any(key_held(table, i) for table in tables for i in range(1, 5))


def _try_lock_calls(node: dict[str, Any]) -> list[int]:
    """For each plan node that evaluates pg_try_advisory_lock (in its filter or its output
    list), the rows it evaluated it on: the number of keys it tried."""
    calls = []
    own = [node.get("Filter", ""), *node.get("Output", [])]
    # a parent passing the value through shows it in parentheses, evaluated below it
    if any(e.startswith("pg_try_advisory_lock") or "WHEN pg_try_advisory_lock" in e for e in own):
        rows = node["Actual Rows"] + node.get("Rows Removed by Filter", 0)
        calls.append(rows * node["Actual Loops"])
    for child in node.get("Plans", []):
        calls += _try_lock_calls(child)
    return calls


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
@pytest.mark.parametrize("priority", [False, True], ids=["fifo", "priority"])
def test_a_postgres_claim_tries_only_the_keys_it_keeps_and_those_others_hold(engine, priority):
    # 40 ready rows, limit 5, scan 20; another session holds the keys of the 2nd and 4th in
    # the claim order: the claim tries the first 7 keys in that order (5 free, kept; 2 held
    # elsewhere), never the 13 further candidates, so it has none to unlock; it still
    # releases the keys of release first, and holds exactly the keys it reports
    async def go():
        columns = ("attempt", "retry_after", "processed_at") + (("priority",) if priority else ())
        qt = await make_queue(engine, "advisory", columns=columns)
        (claim,) = qt.queue.steps.claim
        key = f"hashtextextended('qgen:{qt.table}:' || CAST(%(id)s AS TEXT), 0)"
        each = f"hashtextextended('qgen:{qt.table}:' || CAST(i AS TEXT), 0)"
        mine = "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
        try:
            ids = []
            for n in range(40):  # with priority: the odd ones first
                kw = {"priority": n % 2} if priority else {}
                ids += await qt.enqueue({"n": n}, **kw)
            order = sorted(ids, key=lambda i: (-(ids.index(i) % 2), i)) if priority else ids
            async with (
                await runtime.connect(qt.url) as a,
                await runtime.connect(qt.url) as b,
            ):
                for i in (order[1], order[3]):
                    await b.execute(f"SELECT pg_advisory_lock({key})", {"id": i})
                await a.execute(f"SELECT pg_advisory_lock({key})", {"id": order[39]})
                params = {"limit": 5, "scan": 20, "release": json.dumps([order[39]])}
                (explained,) = await a.fetchall(
                    "EXPLAIN (ANALYZE, VERBOSE, FORMAT JSON) " + claim, params
                )
                plan = explained["QUERY PLAN"]
                plan = json.loads(plan) if isinstance(plan, str) else plan
                calls = _try_lock_calls(plan[0]["Plan"])
                assert calls and max(calls) <= 5 + 2, calls
                # run for its rows: the kept keys are held twice now, so unlock them once
                rows = await a.fetchall(claim, params)
                assert sorted((r["id"], r["held"], r["taken"]) for r in rows) == [
                    (i, 1, 1) for i in sorted(order[n] for n in (0, 2, 4, 5, 6))
                ]
                assert all(r["attempt"] == 2 for r in rows)  # the EXPLAIN counted one
                await a.execute(
                    f"SELECT pg_advisory_unlock({each}) FROM unnest(CAST(%(ids)s AS BIGINT[])) AS i",
                    {"ids": [r["id"] for r in rows]},
                )
                # order[39] released, no surplus key left: the 5 reported ones alone
                assert (await a.fetchall(mine))[0]["n"] == 5
                # every ready row's key held elsewhere: one row, held = 0, and no key kept
                await a.execute("SELECT pg_advisory_unlock_all()")
                for i in ids:
                    await b.execute(f"SELECT pg_advisory_lock({key})", {"id": i})
                contended = await a.fetchall(claim, {**params, "release": "[]"})
                # (the least id of the candidates, as the claim always reported it)
                first = min(order[:20])
                assert [(r["id"], r["held"], r["taken"]) for r in contended] == [(first, 0, 0)]
                assert (await a.fetchall(mine))[0]["n"] == 0
                await b.execute("SELECT pg_advisory_unlock_all()")
                # nothing ready: no row at all
                await qt.sql(f"DELETE FROM {qt.q(qt.table)}")
                assert await a.fetchall(claim, {**params, "release": "[]"}) == []
                assert (await a.fetchall(mine))[0]["n"] == 0
        finally:
            await qt.drop()

    run(go())
