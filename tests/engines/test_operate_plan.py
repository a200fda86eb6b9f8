"""Stats read indexes, not the whole table: the PostgreSQL plan of the stats statement at a
table of 200k processed rows kept beside a few live and dead ones (prune's plan too).

`pytest -s tests/engines/test_operate_plan.py` prints both plans."""

from __future__ import annotations

import json

import pytest
from support.engines import run
from support.queues import make_queue

import runtime

PROCESSED, READY, DEAD = 200_000, 1_000, 100


def _nodes(plan: dict) -> list[dict]:
    out = [plan]
    for child in plan.get("Plans", []):
        out.extend(_nodes(child))
    return out


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
def test_stats_and_prune_read_indexes_at_a_large_table(engine):
    async def go():
        cols = ("attempt", "retry_after", "processed_at", "enqueued_at")
        qt = await make_queue(engine, "lease", columns=cols, dead="group", max_attempts=3)
        t, g = qt.q(qt.table), qt.col("group")
        try:
            async with await runtime.connect(qt.url) as db:
                await db.execute(
                    f"INSERT INTO {t} (payload, {g}, processed_at, enqueued_at) "
                    f"SELECT '{{}}', CASE WHEN n <= {DEAD} THEN 'dead' ELSE 'q' END, "
                    f"CASE WHEN n > {DEAD + READY} THEN clock_timestamp() - interval '2 days' END, "
                    "clock_timestamp() - interval '3 days' "
                    f"FROM generate_series(1, {PROCESSED + READY + DEAD}) AS n",
                    {},
                )
                await db.execute(f"VACUUM ANALYZE {t}", {})
                params = {
                    "group": "q",
                    "dead_group": "dead",
                    "age_s": 86400.0,
                    "batch": 1000,
                    "processed_limit": 10_001,
                    "count_limit": 1_001,
                }
                plans, text = {}, {}
                for name in ("stats", "prune"):
                    (sql,) = qt.queue.rendered.require(name)
                    await db.begin()
                    try:
                        rows = await db.fetchall("EXPLAIN (FORMAT JSON) " + sql, params)
                        lines = await db.fetchall("EXPLAIN " + sql, params)
                    finally:
                        await db.rollback()
                    plan = rows[0]["QUERY PLAN"]
                    plan = json.loads(plan) if isinstance(plan, str) else plan
                    plans[name] = plan[0]["Plan"]
                    text[name] = "\n".join(r["QUERY PLAN"] for r in lines)
                stats = await qt.queue.stats(db, processed_cap=None)
                capped = await qt.queue.stats(db)
            for name, plan in plans.items():
                print(f"\n{name} plan:\n{text[name]}")
                scanned = [n for n in _nodes(plan) if n.get("Relation Name") == qt.table]
                # every count of live or dead rows, and prune, goes through an index; only the
                # count of kept processed rows may read the table (when they are most of it
                # PostgreSQL rightly prefers reading the table to reading its index), and it
                # stops at processed_limit rows
                whole = [
                    n
                    for n in scanned
                    if n["Node Type"] == "Seq Scan"
                    and not (name == "stats" and "IS NOT NULL" in n.get("Filter", ""))
                ]
                assert scanned and not whole, (name, whole)
            assert (stats["ready"], stats["dead"], stats["processed"]) == (READY, DEAD, PROCESSED)
            # by default the count of kept rows stops at 10,000 and says so
            assert (capped["processed"], capped["processed_capped"]) == (10_000, True)
            assert 3 * 86400 - 60 < stats["oldest_ready_s"] < 3 * 86400 + 60
        finally:
            await qt.drop()

    run(go())
