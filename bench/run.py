"""Benchmarks: throughput, cost per message, and claim latency against queue depth.

For each engine (postgres, mariadb, sqlite) and claim form (row_lock, lease, advisory) it
renders a bench queue, then per repeat: enqueues N messages (``queue.enqueue_many``, one
transaction) and drains them through ``runtime.Consumer(...).drain()`` with a no-op ack
handler; then again with a handler that retries every first delivery. Each runtime run has a
raw twin: the same rendered SQL, in a plain loop on the bare driver, with the same
concurrency and batch. The headline is the runtime/raw drain ratio. On PostgreSQL, PgQueuer
runs the same drains when it is installed. Then the claim's latency at 10k and at 1M rows
(pending, or processed and kept) and its plan. Ends with ``overall: runtime/raw drain ratio
<lowest>``.

    python bench/run.py --quick      # about two minutes
    python bench/run.py              # the full run (1M-row depth tables)
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import logging
import os
import platform
import resource
import signal
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench import depth as depth_mod
from bench import pgq, raw
from bench.counting import Tally, counting_opener
from bench.queues import (
    DEFAULT_URLS,
    ENGINES,
    FORMS,
    PAYLOAD,
    Engine,
    clear_table,
    count_rows,
    create_table,
    drop_table,
    render_queue,
    table_prefix,
)
from runtime.drivers.base import Connection
from runtime.queue import Queue

RATIO_TARGET = 0.8
#: after a failed drain, how long the consumer's other workers get to finish their batches
STRAGGLER_WAIT_S = 2.0
SQLITE_FACTOR = 4
DEPTH_TARGET = 1.2


# ----------------------------------------------------------------- progress


class Progress:
    """One stderr line, rewritten in place on a terminal (one line per step otherwise)."""

    def __init__(self, total: int) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        #: the 1-minute load average at every step: other work on the machine shows here
        self.loads: list[float] = []

    def __call__(self, label: str, advance: bool = True) -> None:
        self.loads.append(os.getloadavg()[0])
        if advance:
            self.done = min(self.done + 1, self.total)
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "." * (width - filled)
        line = f"[{bar}] {self.done:3d}/{self.total} {time.perf_counter() - self.t0:6.1f}s {label}"
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + line[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


# ------------------------------------------------------------------ results


@dataclass
class Side:
    """One contender's samples for one scenario: rates per repeat and what it sent."""

    #: drain rate per repeat (a repeat whose run failed has none)
    by_rep: dict[int, float] = field(default_factory=dict)
    enqueue_rates: list[float] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    messages: int = 0
    cpu_s: float = 0.0
    peak_bytes: int | None = None
    #: PgQueuer only: the rate by wall time, its drain-mode shutdown included
    wall_rates: list[float] = field(default_factory=list)

    def per_msg(self, what: str) -> float | None:
        if not self.messages:
            return None
        if what == "cpu_us":
            return self.cpu_s / self.messages * 1e6
        return float(getattr(self.tally, what)) / self.messages

    @property
    def rates(self) -> list[float]:
        return list(self.by_rep.values())

    def add(
        self,
        rep: int,
        messages: int,
        enqueue_s: float | None,
        drain_s: float,
        cpu_s: float,
        tally: Tally,
    ) -> None:
        if enqueue_s is not None:
            self.enqueue_rates.append(messages / enqueue_s)
        self.by_rep[rep] = messages / drain_s
        self.tally += tally
        self.messages += messages
        self.cpu_s += cpu_s


@dataclass
class FormResult:
    engine: str
    form: str
    rt_ack: Side = field(default_factory=Side)
    raw_ack: Side = field(default_factory=Side)
    sync_ack: Side = field(default_factory=Side)
    rt_retry: Side = field(default_factory=Side)
    raw_retry: Side = field(default_factory=Side)
    problems: list[str] = field(default_factory=list)
    skipped: str = ""
    has_raw: bool = True

    def ratios(self, retry: bool = False, sync: bool = False) -> list[float]:
        """runtime/raw per repeat (each repeat's runs ran back to back)."""
        if sync:
            rt, rw = self.rt_ack, self.sync_ack
        else:
            rt, rw = (self.rt_retry, self.raw_retry) if retry else (self.rt_ack, self.raw_ack)
        return [rt.by_rep[k] / rw.by_rep[k] for k in rt.by_rep if rw.by_rep.get(k)]


# --------------------------------------------------------------- handlers


async def ack_handler(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.ack()


async def retry_once_handler(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.retry() if ctx.attempt == 1 else runtime.ack()


# ------------------------------------------------------------- one engine × form


@dataclass
class Settings:
    messages: int
    repeats: int
    concurrency: int
    batch: int
    depth_small: int
    depth_big: int
    claim_repeats: int
    claim_budget_s: float
    quick: bool

    def messages_for(self, engine: str) -> int:
        """SQLite drains a few thousand a second: it gets more messages, or noise wins."""
        return self.messages * SQLITE_FACTOR if engine == "sqlite" else self.messages


def cpu_seconds() -> float:
    """CPU time of this process, every thread included (the aiosqlite/PyMySQL threads too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


class FormBench:
    """Runs the runtime and its raw twins on one engine and form."""

    KINDS = ("runtime", "async", "sync")

    def __init__(self, engine: Engine, form: str, s: Settings, out_dir: Path, prefix: str) -> None:
        self.engine, self.form, self.s = engine, form, s
        self.queue: Queue = render_queue(engine.name, form, f"{prefix}_{form}", out_dir)
        self.st = dict(self.queue.rendered.statements)
        self.result = FormResult(engine.name, form)
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
    engine: Engine, s: Settings, prefix: str, progress: Callable[[str], None]
) -> FormResult:
    r = FormResult(engine.name, f"pgqueuer {pgq.VERSION}", has_raw=False)
    ok, why = pgq.available()
    if not ok:
        r.skipped = why
        return r
    b = pgq.PgQueuerBench(engine.url, f"{prefix}_pgq")
    try:
        await b.setup()
        runs: list[tuple[Side | None, bool]] = [(None, False)]
        for _ in range(s.repeats):
            runs += [(r.rt_ack, False), (r.rt_retry, True)]
        for i, (side, retry) in enumerate(runs):
            label = "warm-up" if side is None else f"{'retry-once' if retry else 'ack'}"
            progress(f"postgres pgqueuer: {label} ({i + 1}/{len(runs)})")
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


# ------------------------------------------------------------------ formatting


def fmt_rate(values: list[float]) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    return f"{med:,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def fmt_ratio(values: list[float], mark: bool = True) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    flag = " !" if mark and med < RATIO_TARGET else ""
    return f"{med:.2f} ({min(values):.2f}–{max(values):.2f}){flag}"


def fmt_per(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def fmt_kib(value: int | None) -> str:
    return "—" if value is None else f"{value / 1024:,.0f}"


def table(headers: list[str], rows: list[list[str]], left: int = 2) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            out.append(c.ljust(widths[i]) if i < left else c.rjust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def throughput_table(results: list[FormResult]) -> str:
    rows = []
    for r in results:
        if r.skipped:
            rows.append([r.engine, r.form, f"skipped: {r.skipped}"] + [""] * 7)
            continue
        sync = bool(r.sync_ack.rates)
        rows.append(
            [
                r.engine,
                r.form,
                fmt_rate(r.rt_ack.rates),
                fmt_rate(r.raw_ack.rates),
                fmt_ratio(r.ratios()) if r.has_raw else "—",
                fmt_rate(r.sync_ack.rates),
                fmt_ratio(r.ratios(sync=True), mark=False) if sync else "—",
                fmt_rate(r.rt_retry.rates),
                fmt_rate(r.raw_retry.rates),
                fmt_ratio(r.ratios(retry=True)) if r.has_raw else "—",
            ]
        )
    return table(
        [
            "engine",
            "form",
            "runtime ack",
            "raw ack",
            "runtime/raw",
            "sync ack",
            "runtime/sync",
            "runtime retry-once",
            "raw retry-once",
            "runtime/raw",
        ],
        rows,
    )


def cost_table(results: list[FormResult]) -> str:
    rows = []
    for r in results:
        if r.skipped:
            continue

        def pair(a: Side, b: Side, what: str, has_raw: bool = r.has_raw) -> str:
            return f"{fmt_per(a.per_msg(what))} / {fmt_per(b.per_msg(what)) if has_raw else '—'}"

        def cpu(a: Side, b: Side, c: Side) -> str:
            vals = [a.per_msg("cpu_us"), b.per_msg("cpu_us"), c.per_msg("cpu_us")]
            return " / ".join("—" if v is None else f"{v:,.0f}" for v in vals)

        rows.append(
            [
                r.engine,
                r.form,
                fmt_rate(r.rt_ack.enqueue_rates),
                fmt_rate(r.raw_ack.enqueue_rates) if r.has_raw else "—",
                pair(r.rt_ack, r.raw_ack, "statements"),
                pair(r.rt_ack, r.raw_ack, "commits"),
                pair(r.rt_retry, r.raw_retry, "statements"),
                pair(r.rt_retry, r.raw_retry, "commits"),
                cpu(r.rt_ack, r.raw_ack, r.sync_ack),
                f"{fmt_kib(r.rt_ack.peak_bytes)} / {fmt_kib(r.raw_ack.peak_bytes)}",
            ]
        )
    return table(
        [
            "engine",
            "form",
            "enqueue msg/s",
            "raw enqueue msg/s",
            "ack stmts/msg",
            "ack commits/msg",
            "retry stmts/msg",
            "retry commits/msg",
            "ack CPU µs/msg",
            "ack peak KiB",
        ],
        rows,
    )


def fmt_ms(t: depth_mod.ClaimTiming) -> str:
    return f"{t.median_ms:.3f} ({min(t.seconds) * 1e3:.3f}–{max(t.seconds) * 1e3:.3f})"


def depth_table(timings: list[depth_mod.ClaimTiming]) -> str:
    if not timings:
        return "(no depth results)"
    by_key = {(t.engine, t.form, t.case.name): t for t in timings}
    labels = {t.case.name: t.case.label for t in timings}
    rows = []
    for t in timings:
        if t.case.name != "small":
            continue
        cells = [t.engine, t.form]
        for name in ("small", "big", "kept", "history"):
            x = by_key.get((t.engine, t.form, name))
            base = by_key.get((t.engine, t.form, depth_mod.BASE.get(name, "")))
            if x is None:
                cells.append("—")
            elif base is None:
                cells.append(fmt_ms(x))
            else:
                ratio = x.median_ms / base.median_ms
                flag = " !" if ratio > DEPTH_TARGET else ""
                cells.append(f"{fmt_ms(x)} ×{ratio:.2f}{flag}")
        hist = by_key.get((t.engine, t.form, "history"))
        big = by_key.get((t.engine, t.form, "big"))
        cells.append(big.access if big else "")
        cells.append(hist.access if hist else "")
        rows.append(cells)
    return table(
        ["engine", "form"]
        + [f"{labels.get(n, n)}" for n in ("small", "big", "kept", "history")]
        + [f"reads ({labels.get('big')})", f"reads ({labels.get('history')})"],
        rows,
    )


def plans_text(timings: list[depth_mod.ClaimTiming]) -> str:
    out = []
    for t in timings:
        if t.case.name not in ("big", "history"):
            continue
        out.append(f"{t.engine} {t.form} claim, {t.case.label}:")
        out += [f"    {ln}" for ln in t.plan]
    return "\n".join(out)


# --------------------------------------------------------------------- machine


def machine_lines(engines: list[Engine], loads: list[float]) -> list[str]:
    mem = "?"
    try:
        for ln in Path("/proc/meminfo").read_text().splitlines():
            if ln.startswith("MemTotal:"):
                mem = f"{int(ln.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    versions = []
    for dist in ("psycopg", "PyMySQL", "aiosqlite"):
        try:  # the installed distribution's version (pymysql.__version__ is a MySQLdb shim's)
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} not installed")
    _, why = pgq.available()
    return [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs (nproc), {mem} RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}",
        "engines: " + "; ".join(f"{e.name} {e.version}" for e in engines),
        "drivers: " + ", ".join(versions) + f"; {why}",
        f"load: 1-minute load average during the run {fmt_load(loads)} on {os.cpu_count()} "
        "CPUs (the client, the servers and anything else running share them)",
    ]


def fmt_load(loads: list[float]) -> str:
    if not loads:
        return "?"
    return f"{statistics.median(loads):.1f} ({min(loads):.1f}–{max(loads):.1f})"


async def engine_version(db: Connection) -> str:
    """The server's version and the durability settings the numbers depend on."""
    if db.dialect.name == "postgres":
        row = await db.fetchone(
            "SELECT current_setting('server_version') AS v, "
            "current_setting('synchronous_commit') AS sc, current_setting('fsync') AS f"
        )
        if not row:
            return "?"
        return (
            f"PostgreSQL {row['v'].split()[0]} (synchronous_commit={row['sc']}, fsync={row['f']})"
        )
    if db.dialect.name in ("mysql", "mariadb"):
        row = await db.fetchone("SELECT VERSION() AS v, @@innodb_flush_log_at_trx_commit AS f")
        if not row:
            return "?"
        return f"{row['v']} (innodb_flush_log_at_trx_commit={row['f']}; sessions READ COMMITTED)"
    version = await db.server_version_text()
    return f"SQLite {version} (WAL, synchronous=NORMAL: the runtime's pragmas)"


# ------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python bench/run.py",
        description="Throughput, cost per message and claim latency against queue depth: "
        "the runtime against the bare drivers (and PgQueuer on PostgreSQL).",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="a short run (about two minutes): fewer messages and repeats, "
        "100k-row depth tables instead of 1M",
    )
    p.add_argument(
        "--engines",
        default=",".join(ENGINES),
        help="comma-separated engines (default: %(default)s)",
    )
    p.add_argument(
        "--forms",
        default=",".join(FORMS),
        help="comma-separated claim forms (default: %(default)s)",
    )
    p.add_argument(
        "-n",
        "--messages",
        type=int,
        help="messages per drain (default 2000; 150 with --quick; SQLite gets 4×)",
    )
    p.add_argument("--repeats", type=int, help="timed repeats per scenario (default 5; 3 quick)")
    p.add_argument("--concurrency", type=int, default=4, help="workers (default 4)")
    p.add_argument("--batch", type=int, default=10, help="rows per claim (default 10)")
    p.add_argument(
        "--depth-big",
        type=int,
        help="rows in the big depth tables (default 1000000; 100000 with --quick)",
    )
    p.add_argument(
        "--depth-small",
        type=int,
        default=10_000,
        help="pending rows in the small depth table (default 10000)",
    )
    p.add_argument(
        "--claim-repeats",
        type=int,
        help="timed claims per depth case (default 50; 20 with --quick); a form whose claims "
        "are slow stops after a time budget (30 s; 4 s with --quick), three claims at least",
    )
    p.add_argument("--no-depth", action="store_true", help="skip the depth section")
    p.add_argument("--no-pgqueuer", action="store_true", help="skip PgQueuer")
    p.add_argument(
        "--postgres-url",
        default=DEFAULT_URLS["postgres"],
        help="the PostgreSQL server (env QGEN_BENCH_POSTGRES_URL; default %(default)s)",
    )
    p.add_argument(
        "--mariadb-url",
        default=DEFAULT_URLS["mariadb"],
        help="the MariaDB server (env QGEN_BENCH_MARIADB_URL; default %(default)s)",
    )
    return p.parse_args(argv)


async def open_engines(
    names: list[str], args: argparse.Namespace, tmp: Path
) -> tuple[list[Engine], list[FormResult]]:
    engines, unreachable = [], []
    for name in names:
        url = {"postgres": args.postgres_url, "mariadb": args.mariadb_url}.get(
            name, f"sqlite:///{tmp / 'bench.db'}"
        )
        e = Engine(name, url)
        try:
            db = await runtime.connect(url)
            try:
                e.version = await engine_version(db)
            finally:
                await db.close()
            engines.append(e)
        except Exception as exc:
            why = f"cannot connect or read its version: {type(exc).__name__}: {exc}"
            unreachable.append(FormResult(name, "*", skipped=why))
    return engines, unreachable


async def main(args: argparse.Namespace) -> int:
    s = Settings(
        messages=args.messages or (150 if args.quick else 2000),
        repeats=args.repeats or (3 if args.quick else 5),
        concurrency=args.concurrency,
        batch=args.batch,
        depth_small=args.depth_small,
        depth_big=args.depth_big or (100_000 if args.quick else 1_000_000),
        claim_repeats=args.claim_repeats or (20 if args.quick else 50),
        claim_budget_s=4.0 if args.quick else 30.0,
        quick=args.quick,
    )
    small = [
        f"--{k.replace('_', '-')}"
        for k in (
            "messages",
            "repeats",
            "concurrency",
            "batch",
            "depth_big",
            "depth_small",
            "claim_repeats",
        )
        if getattr(args, k) is not None and getattr(args, k) < 1
    ]
    if small:
        print(f"{', '.join(small)}: must be at least 1", file=sys.stderr)
        return 2
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    forms = tuple(f.strip() for f in args.forms.split(",") if f.strip())
    bad = [e for e in names if e not in ENGINES] + [f for f in forms if f not in FORMS]
    if bad:
        print(
            f"unknown engine or form: {', '.join(bad)} (engines: {', '.join(ENGINES)}; "
            f"forms: {', '.join(FORMS)})",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM stops the run as Ctrl-C does: the main task is cancelled, and its cleanup drops
    # the tables and PgQueuer's schema on the way out
    main_task = asyncio.current_task()
    if main_task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    prefix = table_prefix()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qgen-bench-") as tmpdir:
        tmp = Path(tmpdir)
        engines, results = await open_engines(names, args, tmp)
        pg_on = not args.no_pgqueuer and any(e.name == "postgres" for e in engines)
        kinds = {e.name: 2 if e.name == "postgres" else 3 for e in engines}
        total = sum(len(forms) * (k + s.repeats * (k + 2)) for k in kinds.values())
        total += (1 + 2 * s.repeats) if pg_on else 0
        total += 0 if args.no_depth else len(engines) * (4 + len(forms))
        progress = Progress(total)
        for e in engines:
            for form in forms:
                try:
                    fb = FormBench(e, form, s, tmp, prefix)
                    results.append(await fb.run(progress))
                except Exception as exc:
                    failed = FormResult(e.name, form)
                    failed.problems.append(f"failed: {type(exc).__name__}: {exc}")
                    results.append(failed)
            if e.name == "postgres":
                if args.no_pgqueuer:
                    results.append(
                        FormResult(
                            e.name,
                            f"pgqueuer {pgq.VERSION}",
                            skipped="--no-pgqueuer",
                            has_raw=False,
                        )
                    )
                else:
                    results.append(await bench_pgqueuer(e, s, prefix, progress))
        timings: list[depth_mod.ClaimTiming] = []
        depth_problems: list[str] = []
        if not args.no_depth:
            for e in engines:
                try:
                    timings += await depth_mod.run_depth(
                        e,
                        lambda e=e: runtime.connect(e.url),
                        forms,
                        s.depth_small,
                        s.depth_big,
                        s.batch,
                        s.claim_repeats,
                        s.claim_budget_s,
                        tmp,
                        prefix,
                        progress,
                    )
                except Exception as exc:
                    depth_problems.append(f"{e.name} depth failed: {type(exc).__name__}: {exc}")
        progress.finish()

    elapsed = time.perf_counter() - t_start
    print_report(s, engines, results, timings, depth_problems, elapsed, progress.loads)
    return 0


def print_report(
    s: Settings,
    engines: list[Engine],
    results: list[FormResult],
    timings: list[depth_mod.ClaimTiming],
    depth_problems: list[str],
    elapsed: float,
    loads: list[float],
) -> None:
    mode = "--quick" if s.quick else "full"
    print(f"qgen bench ({mode} run, {elapsed:.0f} s)")
    for ln in machine_lines(engines, loads):
        print(ln)
    print(
        f"each drain: {s.messages} messages ({s.messages_for('sqlite')} on SQLite), "
        f"concurrency {s.concurrency}, batch {s.batch}; "
        f"median (min–max) of {s.repeats} repeats after one warm-up; no-op handler; "
        "payload ~100 bytes of JSON"
    )
    print()
    print(
        "Drain throughput, messages/s (connections opened inside the timing). raw: the same "
        "rendered SQL in a plain loop on the bare driver, asyncio like the runtime; sync: "
        "PyMySQL / sqlite3 on one thread per worker, no event loop; runtime/raw: median of "
        "the per-repeat ratios (! below 0.8):"
    )
    print(throughput_table(results))
    for r in results:
        if r.form.startswith("pgqueuer") and r.rt_ack.wall_rates:
            print(
                f"  {r.form}: from its start to its last settlement (newest log row); by wall "
                f"time, with its drain-mode shutdown (about 1 s per manager): ack "
                f"{fmt_rate(r.rt_ack.wall_rates)}, retry-once {fmt_rate(r.rt_retry.wall_rates)}"
            )
    print()
    print(
        "Enqueue (enqueue_many of N in one transaction) and cost per message "
        "(runtime / raw; retry = every message fails once, then acks):"
    )
    print(cost_table(results))
    problems = [f"{r.engine} {r.form}: {p}" for r in results for p in r.problems]
    if problems:
        print()
        print("problems:")
        for p in problems:
            print(f"  {p}")
    if timings or depth_problems:
        print()
        print(
            f"Claim latency against depth, ms (one claim of {s.batch} rows as the runtime sends "
            f"it, rolled back; median (min–max) of up to {s.claim_repeats}, cases claimed "
            f"round-robin; ×: the big table against its 10k twin of the same schema):"
        )
        if s.quick:
            print(f"  (--quick: the big tables hold {s.depth_big:,} rows, not 1,000,000)")
        print(depth_table(timings))
        for p in depth_problems:
            print(f"  {p}")
        print()
        print("Claim plans (EXPLAIN of every statement of the claim, on the big tables):")
        print(plans_text(timings))
    print()
    print_targets(results, timings)


def print_targets(results: list[FormResult], timings: list[depth_mod.ClaimTiming]) -> None:
    print("Targets:")
    ratios = []
    for r in results:
        if r.skipped or not r.has_raw:
            continue
        for retry in (False, True):
            rs = r.ratios(retry)
            if rs:
                ratios.append(
                    (
                        statistics.median(rs),
                        f"{r.engine} {r.form} {'retry-once' if retry else 'ack'}",
                    )
                )
    below = [f"{name} {v:.2f}" for v, name in ratios if v < RATIO_TARGET]
    print(
        f"  runtime/raw ≥ {RATIO_TARGET} in every row: "
        + (
            "met"
            if ratios and not below
            else "NOT met: " + ", ".join(below)
            if below
            else "no data"
        )
    )
    pgq_row = next((r for r in results if r.form.startswith("pgqueuer")), None)
    if pgq_row is None or pgq_row.skipped or not pgq_row.rt_ack.rates:
        why = pgq_row.skipped if pgq_row else "PostgreSQL not run"
        print(f"  PostgreSQL drain faster than PgQueuer: not measured ({why or 'no data'})")
    else:
        theirs = statistics.median(pgq_row.rt_ack.rates)
        theirs_retry = statistics.median(pgq_row.rt_retry.rates) if pgq_row.rt_retry.rates else 0
        parts = []
        for r in results:
            if r.engine == "postgres" and r.has_raw and r.rt_ack.rates:
                ours = statistics.median(r.rt_ack.rates)
                ours_retry = statistics.median(r.rt_retry.rates) if r.rt_retry.rates else 0
                verdict = "met" if ours > theirs else "NOT met"
                parts.append(
                    f"{r.form} {verdict} (ack {ours / theirs:.2f}×, retry-once "
                    f"{(ours_retry / theirs_retry) if theirs_retry else 0:.2f}×)"
                )
        print(
            f"  PostgreSQL drain faster than PgQueuer ({theirs:,.0f} msg/s ack): "
            + "; ".join(parts)
        )
    by_key = {(t.engine, t.form, t.case.name): t for t in timings}
    worse = []
    checked = 0
    for (engine, form, case), t in by_key.items():
        base = by_key.get((engine, form, depth_mod.BASE.get(case, "")))
        if base is None:
            continue
        checked += 1
        ratio = t.median_ms / base.median_ms
        if ratio > DEPTH_TARGET:
            worse.append(f"{engine} {form} {t.case.label} ×{ratio:.2f}")
    if checked:
        print(
            f"  claim at the big depth ≤ {DEPTH_TARGET}× its 10k claim ({checked} cases): "
            + ("met in every case" if not worse else "NOT met: " + ", ".join(worse))
        )
    else:
        print("  claim latency at depth: not measured")
    if ratios:
        low, name = min(ratios)
        print(f"overall: runtime/raw drain ratio {low:.2f} ({name})")
    else:
        print("overall: runtime/raw drain ratio n/a (nothing ran)")


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse_args())))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: the bench's tables were dropped", file=sys.stderr)
        sys.exit(130)
