"""The operator console's server time over a 1,000,000-row table on PostgreSQL.

Ten queues share one table (a group column, a dead-letter group each, processed rows kept,
enqueued_at), filled with one set-based INSERT … SELECT FROM generate_series, in two mixes:

* ``history``: per 1,000 rows 980 processed (their processed_at spread over the last two
  days, so about 2% of them in the last hour), 10 ready (enqueued over the last hour),
  5 delayed, 2 in flight (a lease in the future), 3 dead: a table that keeps its history;
* ``backlog``: 900 processed, 80 ready, 10 delayed, 5 in flight, 5 dead: 100,000 unfinished
  rows, a deep backlog.

then VACUUM ANALYZE, as autovacuum would. It times, in this process through the ASGI app (no
network): ``GET /`` cold (the stats cache and the per-minute cache off: every request reads
every count) and steady (the per-minute counts kept for their 30 s, the stats read every
time), ``GET /api/queues``, ``GET /metrics`` and one queue's page (cold), and, apart, the
statements the overview runs for the ten queues (``groups`` once for the table, then
``stats``, ``finished_per_minute`` and ``enqueued_per_minute`` per queue), and what
PostgreSQL itself spends on them (EXPLAIN ANALYZE's execution time, timing off). The
overview reads its queues over four connections at once. The table is dropped at the end.

    python bench/console.py                      # 1M rows, 20 timed runs of each page
    python bench/console.py --rows 100000 --runs 5
"""

from __future__ import annotations

import argparse
import asyncio
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
from runtime.queue import Queue

TARGET_MS = 100.0
#: per 1,000 rows, where each state ends: processed < p <= ready < r <= delayed < d <=
#: in flight < f <= dead
MIXES = {
    "history": {"p": 980, "r": 990, "d": 995, "f": 997},
    "backlog": {"p": 900, "r": 980, "d": 990, "f": 995},
}


def declare(table: str, queues: int, out: Path) -> list[Queue]:
    """Ten (``queues``) lease queues on one table, rendered for PostgreSQL and loaded."""
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
    decl = parse_declaration({"dialects": ["postgres"], "out": "sql", "queues": spec}, path)
    loaded = []
    for name, q in decl.queues.items():
        file = out / f"{name}.sql"
        file.write_text(build_unit(q, "postgres", path), encoding="utf-8")
        loaded.append(runtime.load(file))
    return loaded


FILL = """
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


async def fill(url: str, queues: list[Queue], rows: int, mix: str = "backlog") -> float:
    started = time.perf_counter()
    async with await runtime.connect(url) as db:
        for sql in queues[0].rendered.require("schema"):
            await db.execute(sql, {})
        t = queues[0].rendered.header.table
        await db.execute(FILL.format(t=f'"{t}"', queues=len(queues), rows=rows, **MIXES[mix]), {})
    # VACUUM cannot run in a transaction block: its own autocommit connection
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'VACUUM ANALYZE "{queues[0].rendered.header.table}"')
    return time.perf_counter() - started


async def drop(url: str, table: str) -> None:
    async with await runtime.connect(url) as db:
        await db.execute(f'DROP TABLE IF EXISTS "{table}"', {})


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
    url: str, queues: list[Queue], runs: int
) -> list[tuple[str, list[float]]]:
    """Each statement the overview runs, summed over the ten queues, on one connection."""
    out: dict[str, list[float]] = {"groups (once)": [], "stats": [], "per_minute": []}
    async with await runtime.connect(url) as db:
        for i in range(runs + 2):
            t0 = time.perf_counter()
            await operate.groups(queues[0], db)
            t1 = time.perf_counter()
            for q in queues:
                await operate.stats(q, db)
            t2 = time.perf_counter()
            for q in queues:
                await operate.per_minute(q, db)
            t3 = time.perf_counter()
            if i >= 2:
                out["groups (once)"].append((t1 - t0) * 1000)
                out["stats"].append((t2 - t1) * 1000)
                out["per_minute"].append((t3 - t2) * 1000)
    return [
        (f"{k}, {len(queues)} queues" if k != "groups (once)" else k, v) for k, v in out.items()
    ]


def server_times(url: str, queues: list[Queue], runs: int) -> list[tuple[str, list[float]]]:
    """What PostgreSQL itself spends on the overview's statements for the ten queues (the
    Execution Time of EXPLAIN (ANALYZE, TIMING OFF), summed): the database's share of the
    overview, apart from round trips, Python and the machine's load on the client."""
    import psycopg

    names = ("stats", "finished_per_minute", "enqueued_per_minute")
    out: list[float] = []
    with psycopg.connect(url, autocommit=True) as conn:
        for i in range(runs + 2):
            total = 0.0
            for q in queues:
                params = {"group": q.default_group, "dead_group": q.dead_group, "window_s": 3600}
                for name in names:
                    sql = (
                        "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + q.rendered.require(name)[0]
                    )
                    plan = conn.execute(sql, params).fetchone()
                    assert plan is not None
                    total += float(plan[0][0]["Execution Time"])
            if i >= 2:
                out.append(total)
    return [(f"PostgreSQL's execution time of those, {len(queues)} queues", out)]


def line(name: str, samples: list[float]) -> str:
    s = sorted(samples)
    p95 = s[min(len(s) - 1, round(0.95 * (len(s) - 1)))]
    return f"| {name} | {statistics.median(s):.1f} | {p95:.1f} | {s[-1]:.1f} |"


def measure(url: str, queues: list[Queue], runs: int) -> list[tuple[str, list[float]]]:
    from starlette.testclient import TestClient

    from runtime.console import create_app

    app = create_app(queues, url, cache_s=0)
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
    results += asyncio.run(statement_times(url, queues, runs))
    results += server_times(url, queues, runs)
    return results


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--queues", type=int, default=10)
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--mix", choices=[*MIXES, "both"], default="both")
    args = ap.parse_args(argv)

    table = f"{table_prefix()}_console"
    verdict = 0
    for mix in MIXES if args.mix == "both" else [args.mix]:
        with tempfile.TemporaryDirectory() as tmp:
            queues = declare(table, args.queues, Path(tmp))
            try:
                fill_s = asyncio.run(fill(args.postgres_url, queues, args.rows, mix))
                results = measure(args.postgres_url, queues, args.runs)
            finally:
                asyncio.run(drop(args.postgres_url, table))
        print(
            f"\n{mix}: {args.rows:,} rows, {args.queues} queues on one table (filled in "
            f"{fill_s:.1f} s); {args.runs} runs each, milliseconds\n"
        )
        print("| request | median | p95 | max |\n|---|---|---|---|")
        for name, samples in results:
            print(line(name, samples))
        overview = statistics.median(results[1][1])
        ok = overview < TARGET_MS
        verdict |= not ok
        print(
            f"\n{mix}: overview (steady) {overview:.1f} ms: "
            f"{'within' if ok else 'over'} the {TARGET_MS:g} ms target"
        )
    return verdict


if __name__ == "__main__":
    raise SystemExit(main())
