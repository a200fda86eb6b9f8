"""``queue.stats`` at a table of many kept (processed) rows on PostgreSQL: the count of
processed rows capped (the default, 10,000) against counted in full (``processed_cap=None``,
what every call did before the cap).

    python bench/stats_depth.py                 # 1,000,000 kept rows, 7 timed calls each
    python bench/stats_depth.py --rows 200000 --calls 11
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench.queues import DEFAULT_URLS, create_table, drop_table, quoted, table_prefix
from bench.queues import render_queue as render
from runtime.queue import Queue


async def timed(queue: Queue, db: runtime.Connection, calls: int, cap: int | None) -> list[float]:
    await queue.stats(db, processed_cap=cap)  # warm: the plan and the pages
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        await queue.stats(db, processed_cap=cap)
        out.append((time.perf_counter() - t) * 1000)
    return out


async def main(args: argparse.Namespace) -> int:
    if args.rows < 1 or args.calls < 1:
        print("--rows and --calls must be at least 1", file=sys.stderr)
        return 2
    table = f"{table_prefix()}_stats"
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="qgen-stats-") as tmp:
        queue = render("postgres", "lease", table, Path(tmp), processed_at=True)
        async with await runtime.connect(args.postgres_url) as db:
            await create_table(db, queue)
            t = quoted("postgres", table)
            try:
                print(f"filling {args.rows} kept rows and 100 pending …", file=sys.stderr)
                await db.execute(
                    f"INSERT INTO {t} (payload, processed_at) SELECT '{{}}'::jsonb, "
                    "now() - make_interval(secs => g) FROM generate_series(1, %(n)s) AS g",
                    {"n": args.rows},
                )
                await db.execute(
                    f"INSERT INTO {t} (payload) SELECT '{{}}'::jsonb FROM generate_series(1, 100)"
                )
                await db.execute(f"VACUUM ANALYZE {t}")
                for label, cap in (("counted in full", None), ("capped (default)", 10_000)):
                    ms = await timed(queue, db, args.calls, cap)
                    print(
                        f"{label:17} median {statistics.median(ms):7.1f} ms, "
                        f"min {min(ms):7.1f} ms ({args.calls} calls)"
                    )
            finally:
                await drop_table(db, "postgres", table)
    print(f"{args.rows} kept rows; 1-minute load {load:.2f} ({os.cpu_count()} CPUs)")
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python bench/stats_depth.py",
        description="queue.stats at many kept rows: processed capped against counted in full.",
    )
    p.add_argument("--rows", type=int, default=1_000_000, help="kept rows (%(default)s)")
    p.add_argument("--calls", type=int, default=7, help="timed calls each (%(default)s)")
    p.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
