"""The operator console's server time over a 1,000,000-row table on PostgreSQL and MariaDB
(and SQLite, ``--engines sqlite``: a file in a temporary folder).

Ten queues share one table (a group column, a dead-letter group each, processed rows kept,
enqueued_at), filled with one set-based INSERT … SELECT (PostgreSQL's generate_series,
MariaDB's sequence engine, SQLite's recursive WITH), in two mixes:

* ``history``: per 1,000 rows 980 processed (their processed_at spread over the last two
  days, so about 2% of them in the last hour), 10 ready (enqueued over the last hour),
  5 delayed, 2 in flight (a lease in the future), 3 dead: a table that keeps its history;
* ``backlog``: 900 processed, 80 ready, 10 delayed, 5 in flight, 5 dead: 100,000 unfinished
  rows, a deep backlog.

then VACUUM ANALYZE (ANALYZE TABLE on MariaDB, ANALYZE on SQLite), as autovacuum would. It times, in this process through the ASGI app (no
network): ``GET /`` cold (the stats cache and the per-minute cache off: every request reads
every count) and steady (the per-minute counts kept for their 30 s, the stats read every
time), ``GET /api/queues``, ``GET /metrics`` and one queue's page (cold), and, apart, the
statements the overview runs for the ten queues (``group_names`` once for the table, then
``stats``, ``finished_per_minute`` and ``enqueued_per_minute`` per queue), and what the
server itself spends on them (PostgreSQL: EXPLAIN ANALYZE's execution time, timing off;
MariaDB: ANALYZE FORMAT=JSON's r_total_time_ms; SQLite runs in this process, so its
statements' times are its own). The overview reads its queues over four
connections at once. The table is dropped at the end.

    python bench/console.py                      # 1M rows, 20 timed runs, both engines
    python bench/console.py --rows 100000 --runs 5 --engines mariadb
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench.queues import DEFAULT_URLS, table_prefix
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime import operate
from runtime.console.core import COUNT_CAP
from runtime.queue import Queue

TARGET_MS = 100.0
#: per 1,000 rows, where each state ends: processed < p <= ready < r <= delayed < d <=
#: in flight < f <= dead
MIXES = {
    "history": {"p": 980, "r": 990, "d": 995, "f": 997},
    "backlog": {"p": 900, "r": 980, "d": 990, "f": 995},
}


def declare(table: str, queues: int, out: Path, engine: str = "postgres") -> list[Queue]:
    """Ten (``queues``) lease queues on one table, rendered for ``engine`` and loaded."""
    columns = {
        "id": "id",
        "payload": "payload",
        "group": "grp",
        "attempt": "attempt",
        "retry_after": "retry_after",
        "locked_until": "locked_until",
        "processed_at": "processed_at",
        "enqueued_at": "enqueued_at",
    }
    spec = {
        f"q{i}": {
            "table": table,
            "form": "lease",
            "max_attempts": 5,
            "dead_letter": {"group": f"q{i}_dead"},
            "columns": columns,
        }
        for i in range(queues)
    }
    path = out / "qgen.toml"
    decl = parse_declaration({"dialects": [engine], "out": "sql", "queues": spec}, path)
    loaded = []
    for name, q in decl.queues.items():
        file = out / f"{name}.sql"
        file.write_text(build_unit(q, engine, path), encoding="utf-8")
        loaded.append(runtime.load(file))
    return loaded


FILL_POSTGRES = """
INSERT INTO {t} (payload, grp, attempt, retry_after, locked_until, processed_at, enqueued_at)
SELECT
  '{{"order": 12345, "note": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}'::jsonb,
  'q' || (g %% {queues}) || CASE WHEN s >= {f} THEN '_dead' ELSE '' END,
  1,
  CASE WHEN s >= {r} AND s < {d} THEN now() + interval '10 minutes' END,
  CASE WHEN s >= {d} AND s < {f} THEN now() + interval '30 seconds' END,
  CASE WHEN s < {p} THEN now() - make_interval(secs => g %% 172800) END,
  CASE WHEN s < {p} THEN now() - make_interval(secs => g %% 172800 + 5)
       ELSE now() - make_interval(secs => g %% 3600) END
FROM generate_series(1, {rows}) AS g,
  LATERAL (SELECT (g / {queues}) %% 1000 AS s) AS state
"""

FILL_MARIADB = """
INSERT INTO {t} (payload, grp, attempt, retry_after, locked_until, processed_at, enqueued_at)
SELECT
  '{{"order": 12345, "note": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}',
  CONCAT('q', g %% {queues}, CASE WHEN s >= {f} THEN '_dead' ELSE '' END),
  1,
  CASE WHEN s >= {r} AND s < {d} THEN UTC_TIMESTAMP(6) + INTERVAL 10 MINUTE END,
  CASE WHEN s >= {d} AND s < {f} THEN UTC_TIMESTAMP(6) + INTERVAL 30 SECOND END,
  CASE WHEN s < {p} THEN UTC_TIMESTAMP(6) - INTERVAL (g %% 172800) SECOND END,
  CASE WHEN s < {p} THEN UTC_TIMESTAMP(6) - INTERVAL (g %% 172800 + 5) SECOND
       ELSE UTC_TIMESTAMP(6) - INTERVAL (g %% 3600) SECOND END
FROM (SELECT seq AS g, (seq DIV {queues}) %% 1000 AS s FROM seq_1_to_{rows}) AS state
"""
#: SQLite binds no parameters here: its % is the modulo and strftime's, not escaped
FILL_SQLITE = """
WITH RECURSIVE seq(g) AS (SELECT 1 UNION ALL SELECT g + 1 FROM seq WHERE g < {rows}),
state AS (SELECT g, (g / {queues}) % 1000 AS s FROM seq)
INSERT INTO {t} (payload, grp, attempt, retry_after, locked_until, processed_at, enqueued_at)
SELECT
  '{{"order": 12345, "note": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}',
  'q' || (g % {queues}) || CASE WHEN s >= {f} THEN '_dead' ELSE '' END,
  1,
  CASE WHEN s >= {r} AND s < {d} THEN strftime('%Y-%m-%d %H:%M:%f', 'now', '+600 seconds') END,
  CASE WHEN s >= {d} AND s < {f} THEN strftime('%Y-%m-%d %H:%M:%f', 'now', '+30 seconds') END,
  CASE WHEN s < {p}
       THEN strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (g % 172800) || ' seconds') END,
  CASE WHEN s < {p}
       THEN strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (g % 172800 + 5) || ' seconds')
       ELSE strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (g % 3600) || ' seconds') END
FROM state
"""
FILL = {"postgres": FILL_POSTGRES, "mariadb": FILL_MARIADB, "sqlite": FILL_SQLITE}


def quoted(engine: str, name: str) -> str:
    return f"`{name}`" if engine == "mariadb" else f'"{name}"'


async def fill(
    url: str, queues: list[Queue], rows: int, mix: str = "backlog", engine: str = "postgres"
) -> float:
    started = time.perf_counter()
    t = quoted(engine, queues[0].rendered.header.table)
    async with await runtime.connect(url) as db:
        for sql in queues[0].rendered.require("schema"):
            await db.execute(sql, {})
        sql = FILL[engine].format(t=t, queues=len(queues), rows=rows, **MIXES[mix])
        await db.execute(sql, {})
        if engine == "mariadb":
            await db.execute(f"ANALYZE TABLE {t}", {})
        if engine == "sqlite":
            await db.execute(f"ANALYZE {t}", {})
    if engine == "postgres":
        # VACUUM cannot run in a transaction block: its own autocommit connection
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"VACUUM ANALYZE {t}")
    return time.perf_counter() - started


async def drop(url: str, table: str, engine: str = "postgres") -> None:
    async with await runtime.connect(url) as db:
        for name in (table, f"{table}_pause"):
            await db.execute(f"DROP TABLE IF EXISTS {quoted(engine, name)}", {})


def timed(fn: Callable[[], Any], runs: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def statement_times(
    url: str, queues: list[Queue], runs: int, cap: int = COUNT_CAP
) -> list[tuple[str, list[float]]]:
    """Each statement the overview runs, summed over the ten queues, on one connection."""
    out: dict[str, list[float]] = {"group_names (once)": [], "stats": [], "per_minute": []}
    async with await runtime.connect(url) as db:
        for i in range(runs + 2):
            t0 = time.perf_counter()
            await operate.group_names(queues[0], db)
            t1 = time.perf_counter()
            for q in queues:
                await operate.stats(q, db, processed_cap=cap, count_cap=cap)
            t2 = time.perf_counter()
            for q in queues:
                await operate.per_minute(q, db)
            t3 = time.perf_counter()
            if i >= 2:
                out["group_names (once)"].append((t1 - t0) * 1000)
                out["stats"].append((t2 - t1) * 1000)
                out["per_minute"].append((t3 - t2) * 1000)
    return [
        (f"{k}, {len(queues)} queues" if k != "group_names (once)" else k, v)
        for k, v in out.items()
    ]


#: how each engine reports the time it spent running one statement
EXPLAINS = {
    "postgres": "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) ",
    "mariadb": "ANALYZE FORMAT=JSON ",
}


def spent_ms(engine: str, plan: Any) -> float:
    """The server's own time from one EXPLAIN ANALYZE (PostgreSQL) or ANALYZE (MariaDB)."""
    if isinstance(plan, str):
        plan = json.loads(plan)
    if engine == "postgres":
        return float(plan[0]["Execution Time"])
    return float(plan.get("query_optimization", {}).get("r_total_time_ms", 0.0)) + _block_ms(
        plan["query_block"]
    )


def _block_ms(node: Any) -> float:
    """A MariaDB query block's r_total_time_ms, or (a block with no table of its own, as a
    SELECT of scalar subqueries) the sum of the blocks under it."""
    if isinstance(node, dict):
        if "r_total_time_ms" in node and "r_loops" in node:
            return float(node["r_total_time_ms"])
        return sum(_block_ms(v) for v in node.values())
    if isinstance(node, list):
        return sum(_block_ms(v) for v in node)
    return 0.0


async def server_times(
    url: str, queues: list[Queue], runs: int, engine: str = "postgres", cap: int = COUNT_CAP
) -> list[tuple[str, list[float]]]:
    """What the server itself spends on the overview's statements for the ten queues,
    summed, and per statement: the database's share of the overview, apart from round trips,
    Python and the machine's load on the client."""
    names = ("group_names", "stats", "finished_per_minute", "enqueued_per_minute")
    out: dict[str, list[float]] = {n: [] for n in names}
    totals: list[float] = []
    async with await runtime.connect(url) as db:
        for i in range(runs + 2):
            spent = dict.fromkeys(names, 0.0)
            for n, q in enumerate(queues):
                params = {
                    "group": q.default_group,
                    "dead_group": q.dead_group,
                    "window_s": 3600,
                    "processed_limit": cap + 1,
                    "count_limit": cap + 1,
                }
                for name in names:
                    if name == "group_names" and n:
                        continue  # once for the table
                    sql = EXPLAINS[engine] + q.rendered.require(name)[0]
                    row = await db.fetchone(sql, params)
                    assert row is not None
                    spent[name] += spent_ms(engine, next(iter(row.values())))
            if i >= 2:
                for name in names:
                    out[name].append(spent[name])
                totals.append(sum(spent.values()))
    who = "PostgreSQL" if engine == "postgres" else "MariaDB"
    return [
        (f"{who}'s time on those, {len(queues)} queues", totals),
        *((f"  of which {name}", v) for name, v in out.items()),
    ]


def line(name: str, samples: list[float]) -> str:
    s = sorted(samples)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return f"| {name} | {statistics.median(s):.1f} | {p95:.1f} | {s[-1]:.1f} |"


def measure(
    url: str, queues: list[Queue], runs: int, engine: str = "postgres", cap: int = COUNT_CAP
) -> list[tuple[str, list[float]]]:
    from starlette.testclient import TestClient

    from runtime.console import create_app

    app = create_app(queues, url, cache_s=0, count_cap=cap)
    console = app.state.console
    results = []
    with TestClient(app) as c:

        def getter(path: str) -> Callable[[], None]:
            def get() -> None:
                r = c.get(path)
                assert r.status_code == 200, (path, r.status_code, r.text[:200])

            return get

        console.minutes_s = 0
        for name, path in (
            ("GET / (overview), cold", "/"),
            ("GET /api/queues, cold", "/api/queues"),
            ("GET /metrics, cold", "/metrics"),
            ("GET /queues/q0, cold", "/queues/q0"),
        ):
            results.append((name, timed(getter(path), runs)))
        console.minutes_s = 3600  # the per-minute counts kept, as between their 30 s reads
        results.insert(1, ("GET / (overview), steady", timed(getter("/"), runs)))
    results += asyncio.run(statement_times(url, queues, runs, cap))
    if engine in EXPLAINS:  # SQLite runs in this process: its time is the statements'
        results += asyncio.run(server_times(url, queues, runs, engine, cap))
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    ap.add_argument("--mariadb-url", default=DEFAULT_URLS["mariadb"])
    ap.add_argument(
        "--engines",
        default="postgres,mariadb",
        help="comma-separated: postgres, mariadb, sqlite (a file in a temporary folder)",
    )
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queues", type=int, default=10)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--mix", choices=[*MIXES, "both"], default="both")
    ap.add_argument(
        "--count-cap",
        type=int,
        default=COUNT_CAP,
        help=f"the console's count_cap: rows of each kind a queue's counts read (default {COUNT_CAP:,})",
    )
    args = ap.parse_args(argv)

    table = f"{table_prefix()}_console"
    verdict = 0
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    for engine in engines:
        if engine not in FILL:
            ap.error(f"--engines: {engine!r} is not one of postgres, mariadb, sqlite")
    for engine, mix in ((e, m) for e in engines for m in MIXES if args.mix in ("both", m)):
        with tempfile.TemporaryDirectory() as tmp:
            urls = {"postgres": args.postgres_url, "mariadb": args.mariadb_url}
            url = urls.get(engine) or f"sqlite:///{Path(tmp) / 'console.db'}"
            queues = declare(table, args.queues, Path(tmp), engine)
            try:
                fill_s = asyncio.run(fill(url, queues, args.rows, mix, engine))
                results = measure(url, queues, args.runs, engine, args.count_cap)
            finally:
                asyncio.run(drop(url, table, engine))
        print(
            f"\n{engine}, {mix}: {args.rows:,} rows, {args.queues} queues on one table "
            f"(filled in {fill_s:.1f} s), count_cap {args.count_cap:,}; {args.runs} runs each, "
            "milliseconds\n"
        )
        print("| request | median | p95 | max |\n|---|---|---|---|")
        for name, samples in results:
            print(line(name, samples))
        overview = statistics.median(results[1][1])
        ok = overview < TARGET_MS
        verdict |= not ok
        print(
            f"\n{engine}, {mix}: overview (steady) {overview:.1f} ms: "
            f"{'within' if ok else 'over'} the {TARGET_MS:g} ms target"
        )
    return verdict


if __name__ == "__main__":
    raise SystemExit(main())
