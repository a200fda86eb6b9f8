"""The contenders of a drain: the runtime, its raw twins on the bare drivers (bench/raw.py), and
PgQueuer (bench/pgq.py); each run checks every message got its outcomes and left the table."""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import runtime
from bench import pgq, raw
from bench.counting import Tally, counting_opener
from bench.queues import (
    PAYLOAD,
    Engine,
    clear_table,
    count_rows,
    create_table,
    drop_table,
    render_queue,
)
from bench.results import (
    STRAGGLER_WAIT_S,
    FormResult,
    Settings,
    Side,
    cpu_seconds,
)
from runtime.drivers.base import Connection
from runtime.queue import Queue

# --------------------------------------------------------------- handlers


async def ack_handler(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.ack()


async def retry_once_handler(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.retry() if ctx.attempt == 1 else runtime.ack()


# ------------------------------------------------------------- one engine × form


class FormBench:
    """Runs the runtime and its raw twins on one engine and form."""

    KINDS = ("runtime", "async", "sync")

    def __init__(self, engine: Engine, form: str, s: Settings, out_dir: Path, prefix: str) -> None:
        self.engine, self.form, self.s = engine, form, s
        self.queue: Queue = render_queue(engine.name, form, f"{prefix}_{form}", out_dir)
        self.st = dict(self.queue.rendered.statements)
        self.result = FormResult(engine.name, form, batch=s.batch)
        self.db: Connection | None = None
        #: PyMySQL and sqlite3 are blocking drivers: they get a threads baseline too
        self.has_sync = engine.name != "postgres"
        self.n = s.messages_for(engine.name)

    def payloads(self, n: int) -> list[dict[str, Any]]:
        return [{"n": i, **PAYLOAD} for i in range(n)]

    async def setup(self) -> None:
        self.db = await runtime.connect(self.engine.url)
        await create_table(self.db, self.queue)

    async def teardown(self) -> None:
        if self.db is not None:
            try:
                await drop_table(self.db, self.engine.name, self.queue.table)
            finally:
                await self.db.close()

    async def _check(
        self, label: str, counts: Counter[str] | dict[str, int], retry: bool, n: int
    ) -> None:
        assert self.db is not None
        left = await count_rows(self.db, self.engine.name, self.queue.table)
        want = {"ack": n, "retry": n} if retry else {"ack": n}
        # "extended" counts lease extensions of a long drain, not outcomes
        got = {k: v for k, v in counts.items() if v and k != "extended"}
        if left or got != want:
            self.result.problems.append(f"{label}: outcomes {got}, {left} rows left (want {want})")

    async def _enqueue(self, kind: str, n: int) -> float:
        assert self.db is not None
        await clear_table(self.db, self.engine.name, self.queue.table)
        if kind == "runtime":
            payloads = self.payloads(n)
            t0 = time.perf_counter()
            await self.db.begin()
            await self.queue.enqueue_many(self.db, payloads)
            await self.db.commit()
            return time.perf_counter() - t0
        return await raw.enqueue(self.engine.url, self.engine.name, self.st, self.payloads(n))

    async def _drain(self, kind: str, retry: bool, tally: Tally) -> Counter[str] | dict[str, int]:
        s, e = self.s, self.engine
        if kind == "runtime":
            handler = retry_once_handler if retry else ack_handler
            consumer = runtime.Consumer(
                counting_opener(e.url, tally),
                self.queue,
                handler,
                concurrency=s.concurrency,
                batch=s.batch,
                # retry-once measures a retry that comes straight back, as the raw twin does
                retry_policy=runtime.Immediate(),
            )
            try:
                return await consumer.drain()
            except BaseException:
                # drain() raises with its first failing worker; the others would carry on
                # into the next run: stop them, and give their batches time to settle
                consumer.stop()
                await asyncio.sleep(STRAGGLER_WAIT_S)
                raise
        drain = raw.drain_async if kind == "async" else raw.drain_sync
        return await drain(
            e.url,
            e.name,
            self.st,
            self.form,
            retry,
            s.concurrency,
            s.batch,
            self.queue.lease_s,
            tally,
        )

    async def run_one(
        self, kind: str, side: Side, retry: bool, rep: int = -1, warmup: bool = False
    ) -> None:
        """One run, its failure reported under problems: and the bench going on without it."""
        scenario = "retry-once" if retry else "ack"
        try:
            await self._run_one(kind, side, retry, rep, warmup)
        except Exception as exc:
            if tracemalloc.is_tracing():
                tracemalloc.stop()
            when = "warm-up" if warmup else f"rep {rep + 1}"
            self.result.problems.append(
                f"{kind} {scenario} {when} failed, left out: {type(exc).__name__}: {exc}"
            )

    async def _run_one(self, kind: str, side: Side, retry: bool, rep: int, warmup: bool) -> None:
        """Enqueue N, drain them, check every message got its outcomes and left the table.

        A warm-up drains half as many, with tracemalloc on (its peak is the memory column).
        """
        n = max(self.n // 2, self.s.batch) if warmup else self.n
        enq = await self._enqueue(kind, n)
        tally = Tally()
        if warmup:
            tracemalloc.start()
        cpu0, t0 = cpu_seconds(), time.perf_counter()
        counts = await self._drain(kind, retry, tally)
        dt, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        if warmup:
            side.peak_bytes = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
        await self._check(f"{kind} {'retry-once' if retry else 'ack'}", counts, retry, n)
        if not tally.statements:
            self.result.problems.append(
                f"{kind}: no statement was counted (runtime.consumer.connect moved?); "
                "the cost columns are wrong"
            )
        if not warmup:
            side.add(rep, n, enq, dt, cpu, tally)

    async def run(self, progress: Callable[[str], None]) -> FormResult:
        r = self.result
        name = f"{self.engine.name} {self.form}"
        ack_sides = {"runtime": r.rt_ack, "async": r.raw_ack, "sync": r.sync_ack}
        kinds = [k for k in self.KINDS if k != "sync" or self.has_sync]
        await self.setup()
        try:
            # warm-up (not in the medians): plans cached, pages hot; peak memory measured here
            for kind in kinds:
                progress(f"{name}: warm-up, {kind} (tracemalloc)")
                await self.run_one(kind, ack_sides[kind], retry=False, warmup=True)
            retry_sides = {"runtime": r.rt_retry, "async": r.raw_retry}
            for rep in range(self.s.repeats):
                tag = f"rep {rep + 1}/{self.s.repeats}"
                # who goes first alternates, so a drift in the machine's load favours no one
                order = kinds if rep % 2 == 0 else kinds[::-1]
                for kind in order:
                    progress(f"{name}: {kind} ack, {tag}")
                    await self.run_one(kind, ack_sides[kind], retry=False, rep=rep)
                for kind in [k for k in order if k in retry_sides]:
                    progress(f"{name}: {kind} retry-once, {tag}")
                    await self.run_one(kind, retry_sides[kind], retry=True, rep=rep)
        finally:
            await self.teardown()
        return r


# ----------------------------------------------------------------- PgQueuer


async def bench_pgqueuer(
    engine: Engine,
    s: Settings,
    prefix: str,
    progress: Callable[[str], None],
    driver: str = "asyncpg",
) -> FormResult:
    r = FormResult(engine.name, f"pgqueuer {pgq.VERSION} {driver}", has_raw=False, batch=s.batch)
    ok, why = pgq.available()
    if not ok:
        r.skipped = why
        return r
    b = pgq.PgQueuerBench(engine.url, f"{prefix}_pgq", driver)
    try:
        await b.setup()
        runs: list[tuple[Side | None, bool]] = [(None, False)]
        for _ in range(s.repeats):
            runs += [(r.rt_ack, False), (r.rt_retry, True)]
        for i, (side, retry) in enumerate(runs):
            label = "warm-up" if side is None else f"{'retry-once' if retry else 'ack'}"
            progress(f"postgres pgqueuer {driver} batch {s.batch}: {label} ({i + 1}/{len(runs)})")
            try:
                await _pgqueuer_run(b, r, s, side, retry, i, label)
            except Exception as exc:
                if tracemalloc.is_tracing():
                    tracemalloc.stop()
                r.problems.append(f"{label} run {i} failed, left out: {type(exc).__name__}: {exc}")
    except Exception as exc:
        r.problems.append(f"pgqueuer failed: {type(exc).__name__}: {exc}")
    finally:
        try:
            await b.teardown()
        except Exception as exc:
            r.problems.append(f"pgqueuer cleanup failed: {exc}")
    return r


async def _pgqueuer_run(
    b: pgq.PgQueuerBench,
    r: FormResult,
    s: Settings,
    side: Side | None,
    retry: bool,
    i: int,
    label: str,
) -> None:
    await b.clear()
    enq = await b.enqueue(s.messages)
    tally = Tally()
    if side is None:
        tracemalloc.start()
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    counts, settled = await b.drain(s.messages, retry, s.concurrency, s.batch, tally)
    wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
    if side is None:
        r.rt_ack.peak_bytes = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    left = await b.remaining()
    want = {"ack": s.messages, "retry": s.messages if retry else 0}
    if left or counts != want:
        r.problems.append(f"{label}: outcomes {counts}, {left} jobs left")
    if side is not None:
        side.add(i, s.messages, enq, settled, cpu, tally)
        side.wall_rates.append(s.messages / wall)
