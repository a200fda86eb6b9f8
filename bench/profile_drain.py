"""Where the runtime's client CPU goes in a drain: cProfile over ``Consumer.drain()``.

Renders the bench queue of one engine and form (``bench/queues.py``), enqueues N messages
(untimed, unprofiled), then drains them with the no-op ack handler under cProfile and prints
the drain's CPU µs per message, profiler overhead included (so larger than ``bench/run.py``'s
column), then a table of own time and calls per message by area (the runtime's code, the
bench's, the driver's, json, asyncio, built-ins), then the top functions by their own time
(``tottime``):

    python bench/profile_drain.py                         # postgres row_lock, batch 100
    python bench/profile_drain.py --form lease --batch 10 -n 20000 --top 25
    python bench/profile_drain.py --engine sqlite --sort cumulative
    python bench/profile_drain.py --form lease --batch 10 --raw   # the raw twin, to compare
    python bench/profile_drain.py --engine mariadb --ab 4   # no profiler: runtime/raw, A/B

``--ab N`` runs no profiler: N rounds of a runtime drain and a raw-twin drain, in turns (who
goes first alternates), after one round of warm-up, each with its messages enqueued anew; it
prints each side's msg/s, client CPU µs a message (every thread) and the part of it on the
event loop's thread, and the median of the rounds' runtime/raw ratios. A quick A/B of one
cell while changing the runtime; ``bench/run.py`` is the measurement of record.

``--holds`` (SQLite, with ``--ab``) also times, on the connections' threads, each side's
write transactions of one trip (``BEGIN IMMEDIATE``, the statements, ``COMMIT``: the
runtime's ``run_script``, the raw twin's ``steps``) and prints their spread: how long each
held the file's write lock, waits included. A transaction that found the lock taken waits in
SQLite's busy handler, which sleeps 1, 2, 5, 10 ms … between tries, so the share of holds
past 0.9 ms is the share that slept there at least once; ``inside`` is how many of the
workers were inside one on average (the holds' sum over the drains' wall time).

It answers "what is left" of the runtime's cost beside its raw twin (``bench/raw.py``): the
driver's own functions (psycopg, asyncio's loop) are what the raw loop pays too.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import io
import pstats
import statistics
import sys
import sysconfig
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # ROOT, below

import runtime
import runtime.drivers.sqlite as sqlite_driver
from bench.contenders import ack_handler, retry_once_handler
from bench.counting import Tally
from bench.queues import (
    DEFAULT_URLS,
    FORMS,
    PAYLOAD,
    clear_table,
    create_table,
    drop_table,
    render_queue,
    table_prefix,
)
from bench.raw import OneTripSteps, drain_async
from bench.results import cpu_seconds


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python bench/profile_drain.py", description=__doc__)
    p.add_argument("--engine", default="postgres", choices=("postgres", "mariadb", "sqlite"))
    p.add_argument("--form", default="row_lock", choices=FORMS)
    p.add_argument("-n", "--messages", type=int, default=20_000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--top", type=int, default=15, help="functions shown (default 15)")
    p.add_argument("--sort", default="tottime", help="pstats order (default tottime)")
    p.add_argument("--url", help="the server (default: the bench's URL for the engine)")
    p.add_argument(
        "--raw",
        action="store_true",
        help="profile the raw twin (bench/raw.py's asyncio loop) instead of the runtime",
    )
    p.add_argument(
        "--ab",
        type=int,
        metavar="N",
        help="no profiler: N rounds of a runtime drain and a raw-twin drain in turns",
    )
    p.add_argument(
        "--holds",
        action="store_true",
        help="with --ab on SQLite: how long each side's one-trip write transactions took",
    )
    p.add_argument(
        "--retry-once",
        action="store_true",
        help="every message fails once, then acks (the bench's retry-once drain)",
    )
    return p.parse_args(argv)


def _target(args: argparse.Namespace, out_dir: Path, tag: str) -> tuple[str, runtime.Queue]:
    """The server's URL (SQLite: a file in ``out_dir``) and the bench queue rendered for it."""
    if args.engine == "sqlite":
        url = f"sqlite:///{out_dir / f'{tag}.db'}"
    else:
        url = args.url or DEFAULT_URLS[args.engine]
    return url, render_queue(args.engine, args.form, f"{table_prefix()}_{tag}", out_dir)


async def profile(args: argparse.Namespace, out_dir: Path) -> str:
    url, queue = _target(args, out_dir, "prof")
    db = await runtime.connect(url)
    try:
        await create_table(db, queue)
        payloads = [{"n": i, **PAYLOAD} for i in range(args.messages)]
        for warm in (True, False):  # a warm-up drain first: plans prepared, pages hot
            n = min(args.messages, 2_000) if warm else args.messages
            await clear_table(db, args.engine, queue.table)
            await db.begin()
            await queue.enqueue_many(db, payloads[:n])
            await db.commit()
            drain = _raw_drain(args, url, queue) if args.raw else _runtime_drain(args, url, queue)
            if warm:
                await drain()
                continue
            prof = cProfile.Profile()
            cpu0, t0 = cpu_seconds(), time.perf_counter()
            prof.enable()
            counts = await drain()
            prof.disable()
            wall, cpu = time.perf_counter() - t0, cpu_seconds() - cpu0
        await drop_table(db, args.engine, queue.table)
    finally:
        await db.close()
    out = io.StringIO()
    print(
        f"{'raw twin' if args.raw else 'runtime'}: {args.engine} {args.form} batch {args.batch} concurrency {args.concurrency}"
        f"{' retry-once' if args.retry_once else ''}: "
        f"{args.messages} messages in {wall:.2f} s, counts {dict(counts)}, "
        f"client CPU {cpu * 1e6 / args.messages:.1f} µs/msg under the profiler",
        file=out,
    )
    stats = pstats.Stats(prof, stream=out)
    print(by_area(stats, args.messages), file=out)
    stats.strip_dirs().sort_stats(args.sort).print_stats(args.top)
    return out.getvalue()


#: the repository's root: the runtime's and the bench's code lie under it
ROOT = Path(__file__).resolve().parent.parent
#: the project's own areas: a function whose file lies under ROOT / folder
OWN_AREAS = (("runtime", "runtime"), ("bench", "bench"))
#: the areas installed beside Python: a function whose file lies in one of ``LIBRARIES``
#: with this first path part (a package's folder, or a module of the standard library)
INSTALLED_AREAS = {
    "psycopg": "psycopg",
    "pymysql": "pymysql",
    "aiosqlite": "aiosqlite",
    "json": "json",
    "asyncio": "asyncio",
    "selectors.py": "selectors",
}
#: where installed code lies: the standard library and the site-packages folders
#: (the deepest first: a site-packages folder may lie inside the standard library's)
LIBRARIES = tuple(
    sorted(
        {
            Path(sysconfig.get_paths()[k]).resolve()
            for k in ("stdlib", "platstdlib", "purelib", "platlib")
        },
        key=lambda p: len(p.parts),
        reverse=True,
    )
)


def area_of(filename: str) -> str:
    """The area a profiled function's file belongs to: the project's by where the file lies
    under the repository (``OWN_AREAS``), a library's by its folder in the standard library or
    site-packages (``INSTALLED_AREAS``), so that neither depends on the folders above the
    checkout; built-ins are "builtins"."""
    if filename == "~":
        return "builtins"
    if not filename.startswith("/"):  # <string>, <frozen …>: made at run time
        return "other"
    path = Path(filename).resolve()
    for name, folder in OWN_AREAS:
        if path.is_relative_to(ROOT / folder):
            return name
    for library in LIBRARIES:
        if path.is_relative_to(library):
            first = path.relative_to(library).parts[0]
            return INSTALLED_AREAS.get(first, "other")
    return "other"


def by_area(stats: pstats.Stats, messages: int) -> str:
    """Own time (tottime) and calls per message, summed by area: how much of the drain's
    client time is the runtime's own code, and how much the driver's and the event loop's."""
    own: dict[str, float] = {}
    calls: dict[str, int] = {}
    raw_stats: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw_stats = stats.stats  # type: ignore[attr-defined]
    for (filename, _, _), (_, ncalls, tottime, _, _) in raw_stats.items():
        area = area_of(filename)
        own[area] = own.get(area, 0.0) + tottime
        calls[area] = calls.get(area, 0) + ncalls
    total = sum(own.values()) or 1.0
    lines = [f"{'area':<10} {'own µs/msg':>10} {'share':>6} {'calls/msg':>9}"]
    for area in sorted(own, key=own.__getitem__, reverse=True):
        lines.append(
            f"{area:<10} {own[area] * 1e6 / messages:>10.1f} {own[area] / total:>6.0%} "
            f"{calls[area] / messages:>9.1f}"
        )
    return "\n".join(lines) + "\n"


def _runtime_drain(
    args: argparse.Namespace, url: str, queue: runtime.Queue
) -> Callable[[], Awaitable[Mapping[str, int]]]:
    consumer = runtime.Consumer(
        url,
        queue,
        retry_once_handler if args.retry_once else ack_handler,
        concurrency=args.concurrency,
        batch=args.batch,
        retry_policy=runtime.Immediate(),
    )
    return consumer.drain


def _raw_drain(
    args: argparse.Namespace, url: str, queue: runtime.Queue
) -> Callable[[], Awaitable[Mapping[str, int]]]:
    async def drain() -> Mapping[str, int]:
        return await drain_async(
            url,
            args.engine,
            dict(queue.rendered.statements),
            args.form,
            args.retry_once,
            args.concurrency,
            args.batch,
            queue.lease_s,
            Tally(),
        )

    return drain


class Holds:
    """``--holds``: the seconds each one-trip write transaction took, by side. ``with Holds()
    as holds:`` wraps the functions each side runs such a transaction with (the runtime's
    SQLite driver's ``_script_in_transaction`` on the connection's thread and ``_script_now``
    on the event loop's, timed when it ran, the raw twin's ``_steps``) and puts them back
    after; ``holds.side`` names the side whose drain runs now (``warm-up``: not shown)."""

    def __init__(self) -> None:
        self.side = "runtime"
        self.took: dict[str, list[float]] = {"runtime": [], "raw": [], "warm-up": []}
        #: the kept drains' wall time, by side
        self.wall: dict[str, float] = {"runtime": 0.0, "raw": 0.0}
        self._put_back: list[tuple[object, str, object]] = []

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        #: the runtime's step on the event loop's thread answers None when it did not run
        may_not_run = fn is sqlite_driver._script_now

        def timed(*args: Any) -> Any:
            t0 = time.perf_counter()
            ran = None
            try:
                ran = fn(*args)
                return ran
            finally:
                if ran is not None or not may_not_run:
                    self.took[self.side].append(time.perf_counter() - t0)

        return timed

    def __enter__(self) -> Holds:
        for owner, name in (
            (sqlite_driver, "_script_in_transaction"),
            (sqlite_driver, "_script_now"),
            (OneTripSteps, "_steps"),
        ):
            fn = getattr(owner, name)
            self._put_back.append((owner, name, fn))
            setattr(owner, name, self._timed(fn))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, fn in self._put_back:
            setattr(owner, name, fn)

    def lines(self) -> list[str]:
        out = [
            "one-trip write transactions, µs each (waits included; the runtime's on the event "
            "loop's thread when nothing was in their way):",
            f"{'side':<8} {'count':>6} {'p50':>6} {'p90':>6} {'p99':>7} {'mean':>6}  past 0.9 ms"
            "  inside",
        ]
        for side in ("runtime", "raw"):
            took = self.took[side]
            if not took:
                continue
            p50, p90, p99 = (_at(sorted(took), q) * 1e6 for q in (0.5, 0.9, 0.99))
            out.append(
                f"{side:<8} {len(took):>6} {p50:>6.0f} {p90:>6.0f} {p99:>7.0f} "
                f"{statistics.mean(took) * 1e6:>6.0f}  "
                f"{sum(t > 0.0009 for t in took) / len(took):>11.0%}  "
                f"{sum(took) / self.wall[side]:>6.1f}"
            )
        return out


def _at(ordered: list[float], q: float) -> float:
    """The value a fraction ``q`` of the way through ``ordered`` (its ``q`` quantile)."""
    return ordered[int(q * (len(ordered) - 1))]


async def ab(args: argparse.Namespace, out_dir: Path) -> str:
    """``--ab``: rounds of a runtime drain and a raw-twin drain, no profiler."""
    if args.holds and args.engine != "sqlite":
        raise SystemExit("--holds times SQLite's write transactions: use it with --engine sqlite")
    with Holds() if args.holds else contextlib.nullcontext() as holds:
        return await _ab(args, out_dir, holds)


async def _ab(args: argparse.Namespace, out_dir: Path, holds: Holds | None) -> str:
    url, queue = _target(args, out_dir, "ab")
    payloads = [{"n": i, **PAYLOAD} for i in range(args.messages)]
    sides: dict[str, list[tuple[float, float, float]]] = {"runtime": [], "raw": []}
    db = await runtime.connect(url)
    try:
        await create_table(db, queue)
        for rnd in range(args.ab + 1):  # round 0: the warm-up
            for side in ("runtime", "raw") if rnd % 2 else ("raw", "runtime"):
                await clear_table(db, args.engine, queue.table)
                await db.begin()
                await queue.enqueue_many(db, payloads)
                await db.commit()
                drain = (_raw_drain if side == "raw" else _runtime_drain)(args, url, queue)
                if holds is not None:
                    holds.side = side if rnd else "warm-up"
                cpu0, loop0, t0 = cpu_seconds(), time.thread_time(), time.perf_counter()
                await drain()
                wall = time.perf_counter() - t0
                cpu, on_loop = cpu_seconds() - cpu0, time.thread_time() - loop0
                if rnd:
                    if holds is not None:
                        holds.wall[side] += wall
                    n = args.messages
                    sides[side].append((n / wall, cpu * 1e6 / n, on_loop * 1e6 / n))
        await drop_table(db, args.engine, queue.table)
    finally:
        await db.close()
    lines = [
        f"A/B: {args.engine} {args.form} batch {args.batch} concurrency {args.concurrency}"
        f"{' retry-once' if args.retry_once else ''}, {args.messages} messages, "
        f"{args.ab} rounds (no profiler)",
        f"{'side':<8} {'msg/s':>8} {'CPU µs/msg':>11} {'on the loop':>12}   per round (msg/s)",
    ]
    for side, got in sides.items():
        rates = [r for r, _, _ in got]
        lines.append(
            f"{side:<8} {statistics.median(rates):>8,.0f} "
            f"{statistics.median(c for _, c, _ in got):>11.1f} "
            f"{statistics.median(o for _, _, o in got):>12.1f}   "
            + ", ".join(f"{r:,.0f}" for r in rates)
        )
    ratios = [a[0] / b[0] for a, b in zip(sides["runtime"], sides["raw"], strict=True)]
    lines.append(
        f"runtime/raw {statistics.median(ratios):.2f} "
        f"({min(ratios):.2f}–{max(ratios):.2f}), the median of the rounds' ratios"
    )
    if holds is not None:
        lines += holds.lines()
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.holds and not args.ab:
        raise SystemExit("--holds goes with --ab N: it times the A/B's drains")
    with tempfile.TemporaryDirectory(prefix="qgen-profile-") as tmp:
        if args.ab:
            print(asyncio.run(ab(args, Path(tmp))))
            return
        print(asyncio.run(profile(args, Path(tmp))))


if __name__ == "__main__":
    main()
