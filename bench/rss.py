"""Peak resident memory of the process that drains a deep queue.

For each claim form on PostgreSQL (and PgQueuer on asyncpg), this process enqueues N messages
(100,000 by default), then a fresh Python process drains them with an ack handler and reports
its own peak RSS (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) and its counts. A process
that only imports and connects gives the baseline the drain adds to.

    python bench/rss.py                  # 100k messages, the three forms and PgQueuer
    python bench/rss.py -n 20000 --forms lease --no-pgqueuer
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench import pgq
from bench.counting import Tally
from bench.queues import (
    DEFAULT_URLS,
    FORMS,
    PAYLOAD,
    create_table,
    drop_table,
    render_queue,
    table_prefix,
)

#: rows per enqueue transaction while filling the queue
CHUNK = 10_000


def peak_kib() -> int:
    """This process's peak resident set, KiB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


async def ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.ack()


# ------------------------------------------------------------------ the child


async def child(kind: str, target: str, url: str, n: int, batch: int, concurrency: int) -> dict:
    """Drain in this (fresh) process; what it reports to the parent."""
    t0 = time.perf_counter()
    if kind == "idle":  # imports and one connection: the baseline
        async with await runtime.connect(url):
            pass
        counts: dict = {}
    elif kind == "runtime":
        queue = runtime.load(target)
        consumer = runtime.Consumer(url, queue, ack, concurrency=concurrency, batch=batch)
        counts = dict(await consumer.drain())
    else:  # pgqueuer:<driver>, target = its schema
        import psycopg

        b = pgq.PgQueuerBench(url, target, kind.split(":", 1)[1])
        b.admin = await psycopg.AsyncConnection.connect(b.conninfo, autocommit=True)
        try:
            counts, _ = await b.drain(n, False, concurrency, batch, Tally())
        finally:
            await b.admin.close()
    return {"counts": counts, "seconds": time.perf_counter() - t0, "peak_kib": peak_kib()}


def spawn(kind: str, target: str, url: str, n: int, batch: int, concurrency: int) -> dict:
    args = [sys.executable, __file__, "--child", kind, target, url, str(n), str(batch)]
    out = subprocess.run(
        [*args, str(concurrency)], capture_output=True, text=True, check=False, timeout=3600
    )
    if out.returncode:
        return {"error": (out.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(out.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------ the parent


async def fill_runtime(url: str, queue: runtime.Queue, n: int) -> None:
    async with await runtime.connect(url) as db:
        await create_table(db, queue)
        for start in range(0, n, CHUNK):
            await db.begin()
            await queue.enqueue_many(
                db, [{"n": i, **PAYLOAD} for i in range(start, min(start + CHUNK, n))]
            )
            await db.commit()


async def main(args: argparse.Namespace) -> int:
    url, n = args.postgres_url, args.messages
    prefix = table_prefix()
    rows: list[tuple[str, dict]] = [
        ("idle (imports, one connection)", spawn("idle", "", url, 0, 0, 0))
    ]
    with tempfile.TemporaryDirectory(prefix="qgen-rss-") as tmp:
        for form in [f.strip() for f in args.forms.split(",") if f.strip()]:
            queue = render_queue("postgres", form, f"{prefix}_{form}", Path(tmp))
            try:
                await fill_runtime(url, queue, n)
                path = str(next(Path(tmp, "sql", "postgres").glob(f"*_{form}.sql")))
                rows.append((f"runtime {form}", spawn("runtime", path, url, n, args.batch, 4)))
            finally:
                async with await runtime.connect(url) as db:
                    await drop_table(db, "postgres", queue.table)
    if not args.no_pgqueuer and pgq.available()[0]:
        b = pgq.PgQueuerBench(url, f"{prefix}_pgq")
        try:
            await b.setup()
            await b.enqueue(n)
            label = f"pgqueuer {pgq.VERSION} asyncpg"
            rows.append((label, spawn("pgqueuer:asyncpg", b.schema, url, n, args.batch, 4)))
        finally:
            await b.teardown()
    print(
        f"peak RSS of a process draining {n:,} messages on PostgreSQL (concurrency 4, batch "
        f"{args.batch}, ack handler); the machine's other load moves the seconds, not the RSS:"
    )
    for label, r in rows:
        if "error" in r:
            print(f"  {label:34} failed: {r['error']}")
            continue
        print(
            f"  {label:34} peak RSS {r['peak_kib'] / 1024:7.1f} MiB  {r['seconds']:7.1f} s  "
            f"{r['counts']}"
        )
    return 0


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/rss.py", description=__doc__.split("\n")[0])
    p.add_argument("-n", "--messages", type=int, default=100_000, help="default %(default)s")
    p.add_argument("--forms", default=",".join(FORMS), help="default %(default)s")
    p.add_argument("--batch", type=int, default=10, help="rows per claim (default 10)")
    p.add_argument("--no-pgqueuer", action="store_true", help="skip PgQueuer")
    p.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    return p.parse_args(argv)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, target, url, n, batch, conc = sys.argv[2:8]
        result = asyncio.run(child(kind, target, url, int(n), int(batch), int(conc)))
        print(json.dumps(result))
        sys.exit(0)
    sys.exit(asyncio.run(main(parse_args())))
