"""What the per-minute chart's index costs the hot path: enqueue and claim+ack per row, on a
table of the console bench's shape (a group, a dead-letter group, processed rows kept,
enqueued_at), with the index and without it, alternating. The index: ``<table>_enqueued`` on
PostgreSQL and SQLite (without: dropped); on MariaDB enqueued_at last in the claim index
(without: the claim index as it was, ``(grp, processed_at, id)``).

Each round makes the table afresh, enqueues ``--batches`` batches of ``--batch`` rows
(``enqueue_many``, one transaction each), then claims ten at a time and acks each one
(its own transaction, as a worker settles) until half the rows are done; it reports the
median over ``--rounds`` rounds of microseconds per row. The table is dropped at the end.

    python bench/chart_index.py                          # postgres,mariadb,sqlite
    python bench/chart_index.py --engines postgres --rounds 6
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench.console import declare, drop
from bench.queues import DEFAULT_URLS, table_prefix
from runtime.queue import Queue
from runtime.steps import run_step

DROP_INDEX = {
    "postgres": 'DROP INDEX "{index}"',
    "sqlite": 'DROP INDEX "{index}"',
    "mariadb": "ALTER TABLE `{table}` DROP INDEX `{table}_claim`, "
    "ADD INDEX `{table}_claim` (`grp`, `processed_at`, `id`)",
}


async def one_round(
    url: str, engine: str, q: Queue, with_index: bool, batches: int, batch: int
) -> tuple[float, float]:
    """(enqueue, claim+ack) microseconds per row."""
    table = q.rendered.header.table
    await drop(url, table, engine)
    async with await runtime.connect(url) as db:
        for sql in q.rendered.require("schema"):
            await db.execute(sql, {})
        if not with_index:
            await db.execute(DROP_INDEX[engine].format(index=f"{table}_enqueued", table=table), {})
        started = time.perf_counter()
        for _ in range(batches):
            await q.enqueue_many(db, [{"n": i} for i in range(batch)], group="q0")
        enqueue_us = (time.perf_counter() - started) * 1e6 / (batches * batch)
        claim, ack = q.rendered.require("claim"), q.rendered.require("ack")
        # every parameter a claim of any dialect names (MariaDB's also takes scan, ids, token)
        params = {"group": "q0", "limit": 10, "lease_s": 30, "scan": 40, "token": None, "ids": None}
        started, done = time.perf_counter(), 0
        while done < batches * batch // 2:
            await db.begin()
            got = (await run_step(db, claim, params)).rows
            await db.commit()
            for row in got:
                await db.begin()
                await run_step(db, ack, {"id": row["id"], "token": row["token"]})
                await db.commit()
            done += len(got)
        settle_us = (time.perf_counter() - started) * 1e6 / done
    return enqueue_us, settle_us


async def measure(url: str, engine: str, rounds: int, batches: int, batch: int) -> None:
    table = f"{table_prefix()}_chart"
    with tempfile.TemporaryDirectory() as tmp:
        q = declare(table, 1, Path(tmp), engine)[0]
        got: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
        try:
            for _ in range(rounds):
                for with_index in (False, True):
                    got[with_index].append(
                        await one_round(url, engine, q, with_index, batches, batch)
                    )
        finally:
            await drop(url, table, engine)
    for with_index in (False, True):
        enq = statistics.median(r[0] for r in got[with_index])
        settle = statistics.median(r[1] for r in got[with_index])
        print(f"| {engine} | {'with' if with_index else 'without'} | {enq:.0f} | {settle:.0f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--engines", default="postgres,mariadb,sqlite")
    ap.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    ap.add_argument("--mariadb-url", default=DEFAULT_URLS["mariadb"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--batches", type=int, default=50)
    ap.add_argument("--batch", type=int, default=100)
    args = ap.parse_args(argv)
    print("| engine | enqueued index | enqueue, µs/row | claim+ack, µs/row |\n|---|---|---|---|")
    for engine in (e.strip() for e in args.engines.split(",") if e.strip()):
        with tempfile.TemporaryDirectory() as tmp:
            urls = {"postgres": args.postgres_url, "mariadb": args.mariadb_url}
            url = urls.get(engine) or f"sqlite:///{Path(tmp) / 'chart.db'}"
            asyncio.run(measure(url, engine, args.rounds, args.batches, args.batch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
