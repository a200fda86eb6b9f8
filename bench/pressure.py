"""Steady at volume: a fixed-rate producer and runtime.Consumer for minutes, while another
session holds a transaction open, per engine and form.

    python bench/pressure.py --quick                    # about a minute
    python bench/pressure.py --engines postgres --phase-s 60
    python bench/pressure.py --engines postgres --keep  # processed rows kept (processed_at)

Each cell (engine, form, scenario) runs three phases back to back on one bench queue:
``before`` (nobody else), ``held`` (another session holds a transaction open) and ``after``
(that session ended). All the while a producer process enqueues ``--rate`` messages a second in
batches of ``--enqueue-batch`` (``queue.enqueue_many``, each payload carrying the enqueue's
``time.monotonic()``) and a ``runtime.Consumer`` (its defaults: 4 workers, batch 10) acks
them. Scenarios, the holder's statements:

* ``xid`` (PostgreSQL): ``BEGIN; SELECT txid_current();`` then idle in transaction.
* ``rr`` (PostgreSQL): ``BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) …`` (a
  long reader's snapshot).
* ``snapshot`` (MariaDB): ``START TRANSACTION WITH CONSISTENT SNAPSHOT`` at REPEATABLE READ
  and a read.

Every second it samples: handled/s, pickup latency p50/p99 (enqueue to handler start),
backlog (enqueued minus handled, counted in this process), and the garbage the holder keeps:
PostgreSQL ``n_dead_tup``/``n_live_tup`` and updates (HOT of them) from
``pg_stat_user_tables``, the table's and its indexes' size, and ``pgstattuple``'s dead
tuple count when the extension can be created; MariaDB the InnoDB history list length.
It prints a table per cell (one line per phase), and writes ``pressure.csv`` (every sample)
and one SVG chart per cell under ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import logging
import multiprocessing
import os
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
from bench.queues import DEFAULT_URLS, create_table, drop_table, quoted, table_prefix
from bench.queues import render_queue as render
from bench.results import Progress
from runtime.drivers.base import Connection
from runtime.queue import Queue

ENGINES = ("postgres", "mariadb")
FORMS = ("lease", "row_lock")
PHASES = ("before", "held", "after")
#: the holder's statements per scenario; ``{t}`` is the queue table
SCENARIOS: dict[str, dict[str, tuple[str, ...]]] = {
    "postgres": {
        "xid": ("BEGIN", "SELECT txid_current()"),
        "rr": ("BEGIN ISOLATION LEVEL REPEATABLE READ", "SELECT count(*) FROM {t}"),
    },
    "mariadb": {
        # the runtime's sessions run READ COMMITTED, where a snapshot lasts one statement
        "snapshot": (
            "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
            "START TRANSACTION WITH CONSISTENT SNAPSHOT",
            "SELECT count(*) FROM {t}",
        ),
    },
}
COLUMNS = (
    "engine",
    "form",
    "scenario",
    "phase",
    "t_s",
    "enqueued",
    "handled",
    "backlog",
    "p50_ms",
    "p99_ms",
    "dead",
    "live",
    "upd",
    "hot_upd",
    "table_kb",
    "index_kb",
    "pgst_dead",
    "history_len",
)


@dataclass
class Sample:
    phase: str
    t_s: float
    enqueued: int
    handled: int
    backlog: int
    p50_ms: float | None
    p99_ms: float | None
    gauges: dict[str, float | None]


@dataclass
class Cell:
    engine: str
    form: str
    scenario: str
    samples: list[Sample] = field(default_factory=list)
    #: every pickup latency per phase, for the phase table
    latencies: dict[str, list[float]] = field(default_factory=dict)
    handled: dict[str, int] = field(default_factory=dict)
    enqueued_total: int = 0
    handled_total: int = 0
    note: str = ""


def pct(xs: list[float], q: int) -> float | None:
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[q - 1]


# ------------------------------------------------------------------ gauges


class Gauges:
    """What the engine keeps for the holder: dead tuples, versions, history list length."""

    def __init__(self, db: Connection, engine: str, table: str) -> None:
        self.db, self.engine, self.table = db, engine, table
        self.pgstattuple = False

    async def setup(self) -> None:
        if self.engine != "postgres":
            return
        try:
            await self.db.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
            self.pgstattuple = True
        except Exception as exc:  # not installed, or no right to create it
            logging.getLogger("bench").info("pgstattuple unavailable: %s", exc)

    async def read(self) -> dict[str, float | None]:
        if self.engine == "postgres":
            return await self._postgres()
        return {"history_len": await self.history_length()}

    async def _postgres(self) -> dict[str, float | None]:
        # the table's own storage, or (a partitioned layout) the sum over its partitions
        row = await self.db.fetchone(
            "SELECT SUM(n_dead_tup) AS dead, SUM(n_live_tup) AS live, SUM(n_tup_upd) AS upd, "
            "SUM(n_tup_hot_upd) AS hot_upd, SUM(pg_table_size(relid)) / 1024 AS table_kb, "
            "SUM(pg_indexes_size(relid)) / 1024 AS index_kb "
            "FROM pg_stat_user_tables WHERE relid = %(t)s::regclass OR relid IN ("
            "SELECT relid FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf)",
            {"t": quoted("postgres", self.table)},
        )
        out: dict[str, float | None] = {
            k: float(v) if v is not None else None for k, v in (row or {}).items()
        }
        if self.pgstattuple:
            st = await self.db.fetchone(
                "SELECT SUM((pgstattuple(r)).dead_tuple_count) AS n FROM (SELECT relid AS r "
                "FROM pg_partition_tree(%(t)s::regclass) WHERE isleaf UNION "
                "SELECT c.oid FROM pg_class AS c WHERE c.oid = %(t)s::regclass "
                "AND c.relkind = 'r') AS leaves",
                {"t": quoted("postgres", self.table)},
            )
            out["pgst_dead"] = float(st["n"]) if st and st["n"] is not None else None
        return out

    async def history_length(self) -> float | None:
        row = await self.db.fetchone(
            "SELECT `COUNT` AS n FROM information_schema.INNODB_METRICS "
            "WHERE NAME = 'trx_rseg_history_len' AND `ENABLED` = 1"
        )
        if row is not None:
            return float(row["n"])
        status = await self.db.fetchone("SHOW ENGINE INNODB STATUS")
        for line in str((status or {}).get("Status", "")).splitlines():
            if line.startswith("History list length"):
                return float(line.split()[-1])
        return None


# ------------------------------------------------------------------ one cell


def _producer(
    path: str, url: str, rate: float, batch: int, counter: Any, ready: Any, stop: Any
) -> None:
    """Another process (so the consumer's CPU never slows the offered load): ``rate``
    messages a second in batches, on a fixed schedule (a late batch goes at once and the
    schedule is kept) from when it sets ``ready`` until ``stop`` is set."""
    asyncio.run(_produce(path, url, rate, batch, counter, ready, stop))


async def _produce(
    path: str, url: str, rate: float, batch: int, counter: Any, ready: Any, stop: Any
) -> None:
    queue = runtime.load(path)
    every = batch / rate
    n = 0
    async with await runtime.connect(url) as db:
        ready.set()
        due = time.monotonic()
        while not stop.is_set():
            now = time.monotonic()  # one clock for every process on Linux
            await queue.enqueue_many(db, [{"n": n + i, "t": now} for i in range(batch)])
            n += batch
            counter.value = n
            due += every
            await asyncio.sleep(max(due - time.monotonic(), 0))


class Run:
    """One cell: producer, consumer, sampler and holder on one bench queue."""

    def __init__(self, cell: Cell, url: str, queue: Queue, args: argparse.Namespace) -> None:
        self.cell, self.url, self.queue, self.args = cell, url, queue, args
        #: messages the producer process enqueued so far (it writes, this process reads)
        self.counter: Any = None
        self.handled = 0
        self.phase = PHASES[0]
        self.window: list[float] = []  # pickup latencies since the last sample

    async def handle(self, message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        ms = (time.monotonic() - message.payload["t"]) * 1000
        self.window.append(ms)
        self.cell.latencies.setdefault(self.phase, []).append(ms)
        self.handled += 1
        self.cell.handled[self.phase] = self.cell.handled.get(self.phase, 0) + 1
        return runtime.ack()

    @property
    def enqueued(self) -> int:
        return int(self.counter.value) if self.counter is not None else 0

    async def sample(self, gauges: Gauges, t0: float, stop: asyncio.Event) -> None:
        last_enq = last_handled = 0
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
            window, self.window = self.window, []
            try:
                g = await gauges.read()
            except Exception as exc:  # a gauge that fails is left empty, the run goes on
                logging.getLogger("bench").warning("gauge read failed: %s", exc)
                g = {}
            enq, handled = self.enqueued, self.handled
            self.cell.samples.append(
                Sample(
                    self.phase,
                    round(time.monotonic() - t0, 2),
                    enq - last_enq,
                    handled - last_handled,
                    enq - handled,
                    pct(window, 50),
                    pct(window, 99),
                    g,
                )
            )
            last_enq, last_handled = enq, handled

    async def go(self, progress: Progress) -> None:
        cell, phase_s = self.cell, self.args.phase_s
        holder_sql = [
            s.format(t=quoted(cell.engine, self.queue.table))
            for s in SCENARIOS[cell.engine][cell.scenario]
        ]
        async with (
            await runtime.connect(self.url) as db,
            await runtime.connect(self.url) as holder,
        ):
            await create_table(db, self.queue)
            gauges = Gauges(db, cell.engine, self.queue.table)
            await gauges.setup()
            consumer = runtime.Consumer(self.url, self.queue, self.handle)
            stop = asyncio.Event()
            ctx = multiprocessing.get_context("spawn")
            self.counter, ready, stop_producing = ctx.Value("q", 0), ctx.Event(), ctx.Event()
            producer = ctx.Process(
                target=_producer,
                args=(
                    str(self.queue.rendered.path),
                    self.url,
                    self.args.rate,
                    self.args.enqueue_batch,
                    self.counter,
                    ready,
                    stop_producing,
                ),
                daemon=True,
            )
            producer.start()
            loop = asyncio.get_running_loop()
            if not await loop.run_in_executor(None, ready.wait, 120):
                producer.terminate()
                raise RuntimeError("the producer process did not connect within 120 s")
            t0 = time.monotonic()
            tasks = [
                asyncio.create_task(consumer.run()),
                asyncio.create_task(self.sample(gauges, t0, stop)),
            ]
            label = f"{cell.engine} {cell.form} {cell.scenario}"
            try:
                for phase in PHASES:
                    self.phase = phase
                    if phase == "held":
                        for sql in holder_sql:
                            if sql.startswith("SELECT"):
                                await holder.fetchall(sql)
                            else:
                                await holder.execute(sql)
                    elif phase == "after":
                        await holder.execute("ROLLBACK")
                    end = time.monotonic() + phase_s
                    while (left := end - time.monotonic()) > 0:
                        await asyncio.sleep(min(left, 5.0))
                        progress(
                            f"{label} {phase} {phase_s - max(left - 5, 0):.0f}/{phase_s:.0f}s "
                            f"backlog {self.enqueued - self.handled}",
                            advance=False,
                        )
                    progress(f"{label} {phase} done")
            finally:
                stop.set()
                stop_producing.set()
                await loop.run_in_executor(None, producer.join, 30)
                await asyncio.gather(*tasks[1:], return_exceptions=True)
                # let the consumer catch up for a few seconds, then stop it
                deadline = time.monotonic() + 10
                while self.handled < self.enqueued and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                consumer.stop()
                await tasks[0]
                with contextlib.suppress(Exception):
                    await holder.execute("ROLLBACK")
                cell.enqueued_total, cell.handled_total = self.enqueued, self.handled
                await drop_table(db, cell.engine, self.queue.table)


# ------------------------------------------------------------------ reporting


def _mean(xs: list[float | None]) -> float | None:
    ys = [x for x in xs if x is not None]
    return sum(ys) / len(ys) if ys else None


def _fmt(x: float | None, spec: str = ".0f") -> str:
    return "-" if x is None else format(x, spec)


def phase_rows(cell: Cell) -> list[dict[str, Any]]:
    """Per phase: rate, pickup p50/p99, backlog at its end, and the gauges at its end (dead
    tuples per handled message: the growth of n_dead_tup in the phase over its handled)."""
    out = []
    for phase in PHASES:
        ss = [s for s in cell.samples if s.phase == phase]
        if not ss:
            continue
        secs = len(ss)
        lat = cell.latencies.get(phase, [])
        last = ss[-1].gauges
        row: dict[str, Any] = {
            "phase": phase,
            "offered": sum(s.enqueued for s in ss) / secs,
            "rate": sum(s.handled for s in ss) / secs,
            "p50": pct(lat, 50),
            "p99": pct(lat, 99),
            "max": max(lat) if lat else None,
            "backlog": ss[-1].backlog,
            "max_backlog": max(s.backlog for s in ss),
            "dead": last.get("dead"),
            "pgst_dead": last.get("pgst_dead"),
            "table_kb": last.get("table_kb"),
            "index_kb": last.get("index_kb"),
            "history_len": last.get("history_len"),
            "max_history": max(
                (s.gauges["history_len"] or 0 for s in ss if "history_len" in s.gauges),
                default=None,
            ),
        }
        # dead tuples each message left in the phase (pgstattuple's exact count, else
        # n_dead_tup): while a transaction is held nothing is reclaimed, so this is the
        # row versions a message costs
        key = "pgst_dead" if last.get("pgst_dead") is not None else "dead"
        i = cell.samples.index(ss[0])
        start = cell.samples[i - 1].gauges.get(key) if i else 0.0
        handled = sum(s.handled for s in ss)
        end = last.get(key)
        if end is not None and start is not None and handled:
            row["dead_per_msg"] = (end - start) / handled
        out.append(row)
    return out


def render_table(cell: Cell) -> str:
    head = (
        f"{'phase':7} {'enq/s':>6} {'msg/s':>6} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'backlog':>8} "
        + (
            f"{'n_dead':>8} {'pgst dead':>9} {'dead/msg':>8} {'table kB':>9} {'index kB':>9}"
            if cell.engine == "postgres"
            else f"{'history':>8} {'max hist':>9}"
        )
    )
    out = [f"{cell.engine} {cell.form} {cell.scenario}", head, "-" * len(head)]
    for r in phase_rows(cell):
        line = (
            f"{r['phase']:7} {r['offered']:6.0f} {r['rate']:6.0f} {_fmt(r['p50'], '.1f'):>8} "
            f"{_fmt(r['p99'], '.1f'):>8} {_fmt(r['max'], '.1f'):>8} {r['backlog']:8d} "
        )
        if cell.engine == "postgres":
            line += (
                f"{_fmt(r['dead']):>8} {_fmt(r['pgst_dead']):>9} "
                f"{_fmt(r.get('dead_per_msg'), '.2f'):>8} {_fmt(r['table_kb']):>9} "
                f"{_fmt(r['index_kb']):>9}"
            )
        else:
            line += f"{_fmt(r['history_len']):>8} {_fmt(r['max_history']):>9}"
        out.append(line)
    last = cell.samples[-1].gauges if cell.samples else {}
    if cell.engine == "postgres" and last.get("upd") is not None and cell.handled_total:
        upd, hot = last["upd"] or 0, last["hot_upd"] or 0
        out.append(
            f"updates per message {upd / cell.handled_total:.2f}, HOT {hot / upd:.0%} of them"
            if upd
            else "updates per message 0.00"
        )
    out.append(f"enqueued {cell.enqueued_total}, handled {cell.handled_total}")
    return "\n".join(out)


def write_csv(cells: list[Cell], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for c in cells:
            for s in c.samples:
                base = [c.engine, c.form, c.scenario, s.phase, s.t_s, s.enqueued, s.handled]
                base += [s.backlog, _fmt(s.p50_ms, ".2f"), _fmt(s.p99_ms, ".2f")]
                base += [_fmt(s.gauges.get(k)) for k in COLUMNS[10:]]
                w.writerow(base)


def _panel(
    title: str, xs: list[float], ys: list[float | None], top: int, width: int, height: int
) -> list[str]:
    """One chart panel: a frame, the series as a polyline, its max as a label."""
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    ymax = max((y for _, y in pts), default=0.0) or 1.0
    xmax = max(xs, default=1.0) or 1.0
    left = 60
    out = [
        f'<rect x="{left}" y="{top}" width="{width}" height="{height}" fill="none" stroke="#999"/>',
        f'<text x="{left + 4}" y="{top + 14}" font-size="12">{title}</text>',
        f'<text x="{left - 4}" y="{top + 10}" font-size="10" text-anchor="end">{ymax:.4g}</text>',
        f'<text x="{left - 4}" y="{top + height}" font-size="10" text-anchor="end">0</text>',
    ]
    line = " ".join(
        f"{left + x / xmax * width:.1f},{top + height - y / ymax * height:.1f}" for x, y in pts
    )
    out.append(f'<polyline points="{line}" fill="none" stroke="#1f5fbf" stroke-width="1.2"/>')
    return out


def write_svg(cell: Cell, path: Path) -> None:
    """Four panels over time (handled/s, pickup p99, backlog, dead tuples or history list
    length), the held phase shaded."""
    xs = [s.t_s for s in cell.samples]
    width, height, gap = 720, 110, 24
    if cell.engine == "postgres":
        garbage = ("n_dead_tup", [s.gauges.get("dead") for s in cell.samples])
    else:
        garbage = (
            "InnoDB history list length",
            [s.gauges.get("history_len") for s in cell.samples],
        )
    panels: list[tuple[str, list[float | None]]] = [
        ("handled / s", [float(s.handled) for s in cell.samples]),
        ("pickup p99 ms", [s.p99_ms for s in cell.samples]),
        ("backlog", [float(s.backlog) for s in cell.samples]),
        garbage,
    ]
    total_h = 30 + len(panels) * (height + gap)
    body = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 80}" height="{total_h}" '
        f'font-family="sans-serif">',
        f'<text x="60" y="18" font-size="14">{cell.engine} {cell.form} {cell.scenario}: '
        "before | held (shaded) | after</text>",
    ]
    held = [s.t_s for s in cell.samples if s.phase == "held"]
    xmax = max(xs, default=1.0) or 1.0
    for i, (title, ys) in enumerate(panels):
        top = 30 + i * (height + gap)
        if held:
            x0 = 60 + min(held) / xmax * width
            x1 = 60 + max(held) / xmax * width
            body.append(
                f'<rect x="{x0:.1f}" y="{top}" width="{x1 - x0:.1f}" height="{height}" '
                f'fill="#f3d9d9"/>'
            )
        body += _panel(title, xs, ys, top, width, height)
    body.append(
        f'<text x="{60 + width}" y="{total_h - 6}" font-size="10" text-anchor="end">'
        f"{xmax:.0f} s</text>"
    )
    body.append("</svg>")
    path.write_text("\n".join(body) + "\n", encoding="utf-8")


# ------------------------------------------------------------------ main


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python bench/pressure.py",
        description="A steady producer and consumers while another session holds a "
        "transaction open: throughput, pickup latency, backlog and dead tuples over time.",
    )
    p.add_argument("--engines", default=",".join(ENGINES), help="default %(default)s")
    p.add_argument("--forms", default=",".join(FORMS), help="default %(default)s")
    p.add_argument(
        "--scenarios",
        help="holder scenarios, comma-separated: xid,rr (PostgreSQL), snapshot (MariaDB); "
        "default all (with --quick: the first of each engine)",
    )
    p.add_argument("--rate", type=float, default=500.0, help="messages a second (%(default)s)")
    p.add_argument("--enqueue-batch", type=int, default=10, help="per enqueue (%(default)s)")
    p.add_argument("--phase-s", type=float, help="seconds per phase (default 40; 5 quick)")
    p.add_argument("--keep", action="store_true", help="keep processed rows (processed_at)")
    p.add_argument(
        "--layout",
        default="plain",
        choices=("plain", "partitioned"),
        help="PostgreSQL table layout with --keep: partitioned ranges rows by processed_at",
    )
    p.add_argument("--quick", action="store_true", help="about a minute: short phases")
    p.add_argument("--out", default="pressure-out", help="CSV and SVG folder (%(default)s)")
    p.add_argument("--postgres-url", default=DEFAULT_URLS["postgres"])
    p.add_argument("--mariadb-url", default=DEFAULT_URLS["mariadb"])
    return p.parse_args(argv)


def plan(args: argparse.Namespace) -> list[Cell] | str:
    engines = [e for e in args.engines.split(",") if e]
    forms = [f for f in args.forms.split(",") if f]
    chosen = [s for s in (args.scenarios or "").split(",") if s]
    known = {s for e in SCENARIOS.values() for s in e}
    bad = [e for e in engines if e not in ENGINES] + [f for f in forms if f not in FORMS]
    bad += [s for s in chosen if s not in known]
    if bad:
        return (
            f"unknown engine, form or scenario: {', '.join(bad)} (engines: "
            f"{', '.join(ENGINES)}; forms: {', '.join(FORMS)}; scenarios: "
            f"{', '.join(sorted(known))})"
        )
    if args.rate <= 0 or args.enqueue_batch < 1 or (args.phase_s is not None and args.phase_s <= 0):
        return "--rate and --phase-s must be more than 0, --enqueue-batch at least 1"
    cells = []
    for e in engines:
        names = [s for s in SCENARIOS[e] if not chosen or s in chosen]
        if args.quick and not chosen:
            names = names[:1]
        cells += [Cell(e, f, s) for f in forms for s in names]
    return cells


async def main(args: argparse.Namespace) -> int:
    cells = plan(args)
    if isinstance(cells, str):
        print(cells, file=sys.stderr)
        return 2
    args.phase_s = args.phase_s or (5.0 if args.quick else 40.0)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    urls = {"postgres": args.postgres_url, "mariadb": args.mariadb_url}
    progress = Progress(len(cells) * len(PHASES))
    load_before = os.getloadavg()
    done: list[Cell] = []
    with tempfile.TemporaryDirectory(prefix="qgen-pressure-") as tmp_name:
        tmp = Path(tmp_name)
        for cell in cells:
            table = f"{table_prefix()}_pr_{cell.form}"
            queue = render(
                cell.engine, cell.form, table, tmp, processed_at=args.keep, layout=args.layout
            )
            try:
                await Run(cell, urls[cell.engine], queue, args).go(progress)
            except Exception as exc:
                cell.note = f"failed: {type(exc).__name__}: {exc}"
            done.append(cell)
    progress.finish()
    load_after = os.getloadavg()
    for cell in done:
        print(render_table(cell) if cell.samples else f"{cell.engine} {cell.form}: {cell.note}")
        if cell.note and cell.samples:
            print(cell.note)
        print()
        if cell.samples:
            write_svg(cell, out / f"pressure_{cell.engine}_{cell.form}_{cell.scenario}.svg")
    write_csv(done, out / "pressure.csv")
    print(
        f"rate {args.rate:g}/s in batches of {args.enqueue_batch}, {args.phase_s:g} s per phase, "
        f"{'processed rows kept' if args.keep else 'rows deleted on ack'}"
        f"{', partitioned layout' if args.layout == 'partitioned' else ''}; 1-minute load "
        f"{load_before[0]:.2f} before, {load_after[0]:.2f} after ({os.cpu_count()} CPUs); "
        f"CSV and SVG in {out}/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
