"""What the pause clause costs a claim when nothing is paused, on PostgreSQL and MariaDB.

Two twin lease queues, each on its own table of the same shape and rows (a group column and
a default_group, ``--rows`` ready messages): ``paused`` renders the claim with its pause
clause (the default), ``plain`` with ``pause_table = false``. Each round claims one message
from each, in a random order (A/B interleaved, so the machine's load falls on both alike),
timing the claim alone; the claimed rows are then deleted, untimed, so both tables stay the
same size. It prints each side's median, the spread (p10–p90), and the median of the paired
differences (paused − plain) with a bootstrap 95% interval.

    python bench/pause_cost.py                       # 2,000 rounds on each engine
    python bench/pause_cost.py --rounds 500 --engines postgres
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench.queues import DEFAULT_URLS, table_prefix
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.contract.dialects import DIALECTS
from runtime.forms import form_for
from runtime.queue import Queue

COLUMNS = {
    "id": "id",
    "payload": "payload",
    "group": "grp",
    "attempt": "attempt",
    "retry_after": "retry_after",
    "locked_until": "locked_until",
}


def declare(engine: str, prefix: str, out: Path) -> dict[str, Queue]:
    spec: dict[str, Any] = {
        side: {
            "table": f"{prefix}_{side}",
            "form": "lease",
            "default_group": "work",
            "columns": COLUMNS,
            **({} if side == "paused" else {"pause_table": False}),
        }
        for side in ("paused", "plain")
    }
    path = out / "qgen.toml"
    decl = parse_declaration({"dialects": [engine], "out": "sql", "queues": spec}, path)
    loaded = {}
    for side, q in decl.queues.items():
        file = out / f"{side}.sql"
        file.write_text(build_unit(q, engine, path), encoding="utf-8")
        loaded[side] = runtime.load(file)
    assert "pause" in loaded["paused"].rendered.require("claim")[0]
    assert "pause" not in loaded["plain"].rendered.require("claim")[0]
    return loaded


async def fill(db: Any, queue: Queue, rows: int) -> None:
    for sql in queue.rendered.require("schema"):
        await db.execute(sql, {})
    await queue.enqueue_many(db, [{"n": i} for i in range(rows)])


async def drop(url: str, engine: str, queues: dict[str, Queue]) -> None:
    quote = DIALECTS[engine].quote_ident
    async with await runtime.connect(url) as db:
        for q in queues.values():
            for t in (q.table, f"{q.table}_pause"):
                await db.execute(f"DROP TABLE IF EXISTS {quote(t)}", {})


async def rounds(url: str, engine: str, queues: dict[str, Queue], n: int) -> dict[str, list[float]]:
    quote = DIALECTS[engine].quote_ident
    forms = {side: form_for(q) for side, q in queues.items()}
    out: dict[str, list[float]] = {side: [] for side in queues}
    rng = random.Random(22)
    async with await runtime.connect(url) as db:
        for i in range(n + 20):
            order = list(queues)
            rng.shuffle(order)
            for side in order:
                t0 = time.perf_counter()
                batch = await forms[side].claim(db, 1, None)
                spent = (time.perf_counter() - t0) * 1000
                assert len(batch) == 1, f"{side}: the table ran dry: raise --rows"
                t = quote(queues[side].table)
                await db.execute(
                    f"DELETE FROM {t} WHERE {quote('id')} = {int(batch[0].message.id)}", {}
                )
                if i >= 20:  # the first rounds warm the caches and plans
                    out[side].append(spent)
    return out


def spread(s: list[float]) -> str:
    q = statistics.quantiles(s, n=10)
    return f"{statistics.median(s):.3f} ms (p10 {q[0]:.3f}, p90 {q[-1]:.3f})"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    ap.add_argument("--mariadb-url", default=DEFAULT_URLS["mariadb"])
    ap.add_argument("--engines", default="postgres,mariadb", help="comma-separated")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--rows", type=int, default=0, help="ready rows per table (rounds + 1000)")
    args = ap.parse_args(argv)
    rows = args.rows or args.rounds + 1000
    for engine in [e.strip() for e in args.engines.split(",") if e.strip()]:
        if engine not in ("postgres", "mariadb"):
            ap.error(f"--engines: {engine!r} is not one of postgres, mariadb")
        url = args.postgres_url if engine == "postgres" else args.mariadb_url
        with tempfile.TemporaryDirectory() as tmp:
            queues = declare(engine, f"{table_prefix()}_pc", Path(tmp))
            try:

                async def setup(qs: dict[str, Queue] = queues, u: str = url) -> None:
                    async with await runtime.connect(u) as db:
                        for q in qs.values():
                            await fill(db, q, rows)

                asyncio.run(setup())
                got = asyncio.run(rounds(url, engine, queues, args.rounds))
            finally:
                asyncio.run(drop(url, engine, queues))
        diffs = [a - b for a, b in zip(got["paused"], got["plain"], strict=True)]
        rng = random.Random(7)
        boots = sorted(statistics.median(rng.choices(diffs, k=len(diffs))) for _ in range(1000))
        print(f"\n{engine}: {args.rounds} interleaved rounds, claim of 1 from {rows:,} ready rows")
        print(f"  with the pause clause:    {spread(got['paused'])}")
        print(f"  without (pause_table off): {spread(got['plain'])}")
        print(
            f"  paired difference, median: {statistics.median(diffs):+.3f} ms "
            f"(95% interval {boots[25]:+.3f} to {boots[974]:+.3f})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
