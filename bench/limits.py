"""Cost of the claim's limits: claim-and-ack throughput of a lease queue with no limit, a
concurrency_limit, max_in_flight and a rate_limit (set high, so only its cost shows), over a
table of --rows pending rows, with 1, 4 and 16 consumers claiming side by side.

    python bench/limits.py --url postgresql://postgres@127.0.0.1:5432/test --rows 10000
"""

from __future__ import annotations

import argparse
import asyncio
import time
from typing import Any

import runtime
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.forms import form_for
from runtime.queue import Queue
from runtime.rendered import parse_rendered
from runtime.settle import decide

VARIANTS: dict[str, dict[str, Any]] = {
    "none": {},
    "concurrency_limit=5": {"concurrency_limit": 5},
    "max_in_flight=1000": {"max_in_flight": 1000},
    "rate_limit=1e6/s": {"rate_limit": {"per_s": 1_000_000, "burst": 1_000_000}},
}


def make(dialect: str, table: str, limits: dict[str, Any]) -> Queue:
    cols = {"id": "id", "payload": "payload", "attempt": "attempt"}
    cols |= {"locked_until": "locked_until", "processed_at": "processed_at"}
    cols |= {"concurrency_key": "customer"} if "concurrency_limit" in limits else {}
    decl = {"table": table, "form": "lease", "columns": cols, **limits}
    parsed = parse_declaration({"dialects": [dialect], "queues": {"q": decl}})
    return Queue(parse_rendered(build_unit(parsed.queues["q"], dialect), f"{table}.sql"))


async def drive(url: str, queue: Queue, consumers: int, seconds: float, batch: int) -> float:
    done = 0
    stop = time.monotonic() + seconds

    async def worker() -> None:
        nonlocal done
        form = form_for(queue, keyspace=url)
        async with await runtime.connect(url) as db:
            while time.monotonic() < stop:
                got = await form.claim_within_rate(db, batch, None)
                for d in got:
                    await form.settle(db, d, decide(queue, d, runtime.ack()))
                done += len(got)

    await asyncio.gather(*(worker() for _ in range(consumers)))
    return done / seconds


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--batch", type=int, default=10)
    ap.add_argument("--consumers", default="1,4,16")
    args = ap.parse_args()
    async with await runtime.connect(args.url) as db:
        dialect = db.dialect.name
    print(f"{dialect}, lease, {args.rows} pending rows, batch {args.batch}: messages/s")
    counts = [int(c) for c in args.consumers.split(",")]
    print(f"| limit | {' | '.join(f'{c} consumers' for c in counts)} |")
    print(f"|---|{'---|' * len(counts)}")
    for name, limits in VARIANTS.items():
        cells = []
        for c in counts:
            table = "bench_limits"
            queue = make(dialect, table, limits)
            async with await runtime.connect(args.url) as db:
                for t in (table, f"{table}_limits"):
                    await db.execute(f"DROP TABLE IF EXISTS {t}", {})
                for st in queue.rendered.require("schema"):
                    await db.execute(st, {})
                keyed = "concurrency_limit" in limits
                for start in range(0, args.rows, 1000):
                    n = min(1000, args.rows - start)
                    if keyed:  # keys of 5 rows each: the limit never bites, its cost shows
                        for k in range(n // 5):
                            await queue.enqueue_many(
                                db, [{"n": i} for i in range(5)], concurrency_key=f"c{start}-{k}"
                            )
                    else:
                        await queue.enqueue_many(db, [{"n": i} for i in range(n)])
            cells.append(f"{await drive(args.url, queue, c, args.seconds, args.batch):,.0f}")
        print(f"| {name} | {' | '.join(cells)} |")


if __name__ == "__main__":
    asyncio.run(main())
