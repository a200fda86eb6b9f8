"""Cost of the claim's limits: claim-and-ack throughput of a lease queue with no limit, a
concurrency_limit, max_in_flight and a rate_limit (set high, so only its cost shows), over a
table of --rows pending rows, with 1, 4 and 16 consumers claiming side by side.

    python bench/limits.py --url postgresql://postgres@127.0.0.1:5432/test --rows 10000

The table is made afresh for each cell and filled with one set-based INSERT … SELECT
(generate_series on PostgreSQL, the SEQUENCE engine's seq_1_to_N on MariaDB), then analyzed;
with concurrency_limit the rows carry keys of 5 rows each (the limit of 5 never bites).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from typing import Any

import runtime
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.contract.rendered import parse_rendered
from runtime.drivers.base import Connection
from runtime.forms import form_for
from runtime.queue import Queue
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


async def setup(
    db: Connection, dialect: str, queue: Queue, table: str, rows: int, keyed: bool
) -> None:
    """The tables made afresh, ``rows`` pending rows in one statement, then analyzed."""
    q = db.dialect.quote_ident
    for t in (table, f"{table}_limits", f"{table}_pause"):
        await db.execute(f"DROP TABLE IF EXISTS {q(t)}", {})
    for st in queue.rendered.require("schema"):
        await db.execute(st, {})
    payload, p = json.dumps({"n": 1}), db.dialect.placeholder("p")
    cols = f"{q('payload')}, {q('customer')}" if keyed else q("payload")
    if dialect == "postgres":
        key = ", 'c' || (g / 5)" if keyed else ""
        source = f"SELECT CAST({p} AS JSONB){key} FROM generate_series(1, {rows:d}) AS g"
    elif dialect == "mariadb":
        key = ", CONCAT('c', seq DIV 5)" if keyed else ""
        source = f"SELECT {p}{key} FROM seq_1_to_{rows:d}"
    else:
        raise SystemExit(f"bench/limits.py runs on postgres and mariadb, not {dialect}")
    await db.execute(f"INSERT INTO {q(table)} ({cols}) {source}", {"p": payload})
    if dialect == "postgres":
        await db.execute(f"VACUUM ANALYZE {q(table)}", {})
    else:
        await db.fetchall(f"ANALYZE TABLE {q(table)}")


async def drive(url: str, queue: Queue, consumers: int, seconds: float, batch: int) -> float:
    """Messages claimed and acked per second by ``consumers`` consumers, each on its own
    connection (opened before the clock starts), for ``seconds``."""
    done = 0
    conns = [await runtime.connect(url) for _ in range(consumers)]
    stop = time.monotonic() + seconds

    async def worker(db: Connection) -> None:
        nonlocal done
        form = form_for(queue, keyspace=url)
        while time.monotonic() < stop:
            got = await form.claim_within_rate(db, batch, None)
            for d in got:
                await form.settle(db, d, decide(queue, d, runtime.ack()))
            done += len(got)

    began = time.monotonic()
    try:
        await asyncio.gather(*(worker(db) for db in conns))
    finally:
        for db in conns:
            await db.close()
    return done / (time.monotonic() - began)


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
    load = "/".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"{dialect}, lease, {args.rows} pending rows, batch {args.batch}: messages/s")
    print(f"load average at the start: {load}")
    counts = [int(c) for c in args.consumers.split(",")]
    print(f"| limit | {' | '.join(f'{c} consumers' for c in counts)} |")
    print(f"|---|{'---|' * len(counts)}")
    for name, limits in VARIANTS.items():
        cells = []
        for c in counts:
            table = "bench_limits"
            queue = make(dialect, table, limits)
            async with await runtime.connect(args.url) as db:
                await setup(db, dialect, queue, table, args.rows, "concurrency_limit" in limits)
            cells.append(f"{await drive(args.url, queue, c, args.seconds, args.batch):,.0f}")
        print(f"| {name} | {' | '.join(cells)} |", flush=True)
    print(f"load average at the end: {'/'.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    asyncio.run(main())
