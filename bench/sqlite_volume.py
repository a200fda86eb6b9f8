"""SQLite at volume: drain a large queue on one database file at concurrency 4, per form.

For each claim form it creates a fresh SQLite file, enqueues N messages in one
``enqueue_many`` transaction and drains them with ``runtime.Consumer(concurrency=4)`` and an
ack handler, then prints msgs/s and the consumer's counts. A run is good when every message
was acked and nothing else happened: no lease_lost, no failed batch, no error (the consumer's
connections take turns through the file's writer lock instead of SQLite's busy handler).

    python bench/sqlite_volume.py                 # 100,000 messages per form
    python bench/sqlite_volume.py -n 20000 --forms lease
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench.queues import FORMS, PAYLOAD, create_table, render_queue


async def ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.ack()


async def drain_one(
    form: str, n: int, concurrency: int, batch: int, workdir: Path
) -> tuple[float, dict[str, int]]:
    """Enqueue n messages on a fresh file and drain them; (seconds, counts)."""
    url = f"sqlite:///{workdir / f'volume_{form}.db'}"
    queue = render_queue("sqlite", form, f"volume_{form}", workdir)
    async with await runtime.connect(url) as db:
        await create_table(db, queue)
        await db.begin()
        await queue.enqueue_many(db, [PAYLOAD] * n)
        await db.commit()
    consumer = runtime.Consumer(url, queue, ack, concurrency=concurrency, batch=batch)
    started = time.perf_counter()
    counts = await consumer.drain()
    return time.perf_counter() - started, counts


def good(counts: dict[str, Any], n: int) -> bool:
    return counts.get("ack") == n and set(counts) <= {"ack", "extended"}


async def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--messages", type=int, default=100_000)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--forms", nargs="*", default=list(FORMS), choices=FORMS)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    ok = True
    with tempfile.TemporaryDirectory(prefix="qgen-volume-") as tmp:
        for form in args.forms:
            seconds, counts = await drain_one(
                form, args.messages, args.concurrency, args.batch, Path(tmp)
            )
            fine = good(counts, args.messages)
            ok &= fine
            print(
                f"sqlite {form:9} {args.messages} msgs, concurrency {args.concurrency}, batch "
                f"{args.batch}: {seconds:7.1f} s  {args.messages / seconds:8.0f} msgs/s  "
                f"{'ok' if fine else 'NOT OK'}  {dict(sorted(counts.items()))}",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
