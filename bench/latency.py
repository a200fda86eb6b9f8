"""Latency on an idle queue: from the enqueue call to the handler's start, per engine, form and
way of waking, with PgQueuer (asyncpg workers) on the same PostgreSQL.

    python bench/latency.py --quick
    python bench/latency.py --engines postgres --samples 500

Each sample: the consumer is running and idle (nothing to claim); a message carrying the
enqueuer's ``time.monotonic()`` is enqueued (autocommit); the handler reads the clock as it
starts (Linux's monotonic clock is one for every process on the machine). Then a random
pause, so the next message finds the consumer idle again at a random point of its sleep.

Ways of waking:

* ``notify`` (PostgreSQL): enqueued by another process; the enqueue's NOTIFY wakes the
  consumer's listening connection.
* ``in-process`` (MariaDB, SQLite): enqueued in the consumer's process on a connection of
  its own; the enqueue wakes the consumer directly (``runtime.wake``).
* ``poll`` (MariaDB, SQLite): enqueued by another process; the consumer finds it at its
  next poll (``poll_interval`` 0.05 s doubling to ``max_poll_interval`` 2 s while idle).

The consumer runs with its defaults (4 workers, batch 10). PgQueuer runs one QueueManager
(batch 10) on asyncpg, enqueued by another process through its own Queries.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench import pgq
from bench.queues import DEFAULT_URLS, ENGINES, FORMS, create_table, drop_table, table_prefix
from bench.queues import render_queue as render
from bench.raw import pg_conninfo
from bench.results import Progress

#: the targets the README states: PostgreSQL p99 within this many ms on an idle queue
PG_P99_TARGET_MS = 25.0
WAYS = {
    "postgres": ("notify",),
    "mariadb": ("in-process", "poll"),
    "sqlite": ("in-process", "poll"),
}


@dataclass
class Row:
    engine: str
    form: str
    way: str
    latencies_ms: list[float] = field(default_factory=list)
    note: str = ""

    def pct(self, q: int) -> float:
        """The q-th percentile (1..99) of the samples, in ms."""
        xs = sorted(self.latencies_ms)
        if len(xs) == 1:
            return xs[0]
        return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


# ------------------------------------------------------------ the other process


def _enqueuer(pipe: Any, env: dict[str, str]) -> None:
    """Another process: enqueue one message per command, stamped with the monotonic clock."""
    os.environ.update(env)
    asyncio.run(_enqueue_loop(pipe))


async def _enqueue_loop(pipe: Any) -> None:
    loop = asyncio.get_running_loop()
    kind, url, target = await loop.run_in_executor(None, pipe.recv)
    if kind == "pgqueuer":
        import psycopg
        from pgqueuer import PsycopgDriver, Queries

        conn = await psycopg.AsyncConnection.connect(pg_conninfo(url), autocommit=True)
        queries = Queries(PsycopgDriver(conn))

        async def put(payload: dict[str, Any]) -> None:
            await queries.enqueue(["latency"], [_json_bytes(payload)], [0])

    else:
        queue = runtime.load(target)
        conn = await runtime.connect(url)

        async def put(payload: dict[str, Any]) -> None:
            await queue.enqueue(conn, payload)

    pipe.send("ready")
    try:
        while (cmd := await loop.run_in_executor(None, pipe.recv)) is not None:
            await put({"n": cmd, "t": time.monotonic()})
            pipe.send(cmd)
    finally:
        await conn.close()


def _json_bytes(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload).encode()


class OtherProcess:
    """An enqueuer in a process of its own (spawned: nothing of this one is shared)."""

    def __init__(self, kind: str, url: str, target: str) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pipe, child = ctx.Pipe()
        env = {k: v for k, v in os.environ.items() if k.startswith("PGQUEUER_")}
        self.proc = ctx.Process(target=_enqueuer, args=(child, env), daemon=True)
        self.proc.start()
        self.pipe.send((kind, url, target))

    async def ready(self) -> None:
        got = await asyncio.get_running_loop().run_in_executor(None, self.pipe.recv)
        assert got == "ready", got

    async def enqueue(self, n: int) -> None:
        self.pipe.send(n)
        await asyncio.get_running_loop().run_in_executor(None, self.pipe.recv)

    def close(self) -> None:
        self.pipe.send(None)
        self.proc.join(10)


# ------------------------------------------------------------------ sampling


class Clock:
    """What the handler heard: sample n → latency in ms."""

    def __init__(self) -> None:
        self.seen: dict[int, float] = {}
        self.event = asyncio.Event()

    def heard(self, payload: dict[str, Any]) -> None:
        self.seen[payload["n"]] = (time.monotonic() - payload["t"]) * 1000
        self.event.set()

    async def wait(self, n: int, timeout: float = 10.0) -> float:
        deadline = time.monotonic() + timeout
        while n not in self.seen:
            self.event.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"sample {n} was not handled within {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), left)
        return self.seen[n]


async def _sample(
    row: Row, clock: Clock, enqueue: Any, samples: int, gap: tuple[float, float], progress: Any
) -> None:
    await asyncio.sleep(1.0)  # the consumer connected, found nothing and is idle
    for n in range(samples):
        await asyncio.sleep(random.uniform(*gap))
        await enqueue(n)
        row.latencies_ms.append(await clock.wait(n))
        if n % 10 == 9 or n == samples - 1:
            progress(f"{row.engine} {row.form} {row.way}: {n + 1}/{samples}", advance=False)
    progress(f"{row.engine} {row.form} {row.way}: done")


async def measure_qgen(
    engine: str, url: str, form: str, way: str, samples: int, tmp: Path, progress: Any
) -> Row:
    table = f"{table_prefix()}_lat_{form}"
    queue = render(engine, form, table, tmp)
    row = Row(engine, form, way)
    clock = Clock()

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        clock.heard(message.payload)
        return runtime.ack()

    async with await runtime.connect(url) as db:
        await create_table(db, queue)
        consumer = runtime.Consumer(url, queue, handle)
        task = asyncio.create_task(consumer.run())
        other = None
        try:
            if way == "in-process":

                async def enqueue(n: int) -> None:
                    await queue.enqueue(db, {"n": n, "t": time.monotonic()})

            else:
                other = OtherProcess("qgen", url, str(queue.rendered.path))
                await other.ready()
                enqueue = other.enqueue
            gap = (0.1, 1.0) if way == "poll" else (0.02, 0.2)
            await _sample(row, clock, enqueue, samples, gap, progress)
        finally:
            if other is not None:
                other.close()
            consumer.stop()
            await task
            await drop_table(db, engine, table)
    return row


async def measure_pgqueuer(url: str, samples: int, progress: Any) -> Row:
    row = Row("postgres", "pgqueuer", "notify")
    ok, why = pgq.available()
    if not ok:
        row.note = why
        return row
    row.note = why
    bench = pgq.PgQueuerBench(url, f"{table_prefix()}_pgq_lat")
    await bench.setup()
    clock = Clock()
    import asyncpg
    from pgqueuer import AsyncpgDriver, Queries, QueueManager

    conn = await asyncpg.connect(pg_conninfo(url))
    qm = QueueManager(Queries(AsyncpgDriver(conn)))

    @qm.entrypoint("latency")
    async def handle(job: Any) -> None:
        clock.heard(pgq._decode_bytes(job.payload))

    task = asyncio.create_task(qm.run(batch_size=10))
    other = OtherProcess("pgqueuer", url, "")
    try:
        await other.ready()
        await _sample(row, clock, other.enqueue, samples, (0.02, 0.2), progress)
    finally:
        other.close()
        qm.shutdown.set()
        await asyncio.wait_for(task, 30)
        await conn.close()
        await bench.teardown()
    return row


# ------------------------------------------------------------------ reporting


def table(rows: list[Row]) -> str:
    head = f"{'engine':9} {'form':9} {'wake':11} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'p99 ms':>8} {'max ms':>8}"
    out = [head, "-" * len(head)]
    for r in rows:
        if not r.latencies_ms:
            out.append(f"{r.engine:9} {r.form:9} {r.way:11} skipped: {r.note}")
            continue
        out.append(
            f"{r.engine:9} {r.form:9} {r.way:11} {len(r.latencies_ms):5d} "
            f"{r.pct(50):8.1f} {r.pct(95):8.1f} {r.pct(99):8.1f} {max(r.latencies_ms):8.1f}"
        )
    return "\n".join(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python bench/latency.py",
        description="Enqueue → handler start on an idle queue: p50/p95/p99 per engine and form.",
    )
    p.add_argument("--engines", default=",".join(ENGINES), help="default %(default)s")
    p.add_argument("--forms", default=",".join(FORMS), help="default %(default)s")
    p.add_argument("--samples", type=int, help="samples per row woken at once (200; 40 quick)")
    p.add_argument("--poll-samples", type=int, help="samples per polling row (40; 10 quick)")
    p.add_argument("--quick", action="store_true", help="fewer samples, for a first look")
    p.add_argument("--no-pgqueuer", action="store_true", help="skip PgQueuer")
    p.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    p.add_argument("--mariadb-url", default=DEFAULT_URLS["mariadb"])
    return p.parse_args(argv)


async def main(args: argparse.Namespace) -> int:
    engines = [e for e in args.engines.split(",") if e]
    forms = [f for f in args.forms.split(",") if f]
    samples = args.samples or (40 if args.quick else 200)
    poll_samples = args.poll_samples or (10 if args.quick else 40)
    plan = [(e, f, w) for e in engines for f in forms for w in WAYS[e]]
    pgqueuer = "postgres" in engines and not args.no_pgqueuer
    progress = Progress(len(plan) + pgqueuer)
    load_before = os.getloadavg()
    rows: list[Row] = []
    with tempfile.TemporaryDirectory(prefix="qgen-latency-") as tmp_name:
        tmp = Path(tmp_name)
        urls = {
            "postgres": args.postgres_url,
            "mariadb": args.mariadb_url,
            "sqlite": f"sqlite:///{tmp / 'latency.db'}",
        }
        for engine, form, way in plan:
            n = poll_samples if way == "poll" else samples
            rows.append(await measure_qgen(engine, urls[engine], form, way, n, tmp, progress))
        if pgqueuer:
            rows.append(await measure_pgqueuer(urls["postgres"], samples, progress))
    progress.finish()
    print(table(rows))
    load_after = os.getloadavg()
    print(
        f"\n1-minute load average: {load_before[0]:.2f} before, {load_after[0]:.2f} after "
        f"({os.cpu_count()} CPUs); PostgreSQL target: p99 <= {PG_P99_TARGET_MS:.0f} ms idle"
    )
    for r in rows:
        if r.note and r.latencies_ms:
            print(f"{r.engine} {r.form}: {r.note}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
