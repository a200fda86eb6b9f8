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
import logging
import signal
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import runtime
from bench import depth as depth_mod
from bench import pgq
from bench.contenders import FormBench, bench_pgqueuer
from bench.queues import (
    DEFAULT_URLS,
    ENGINES,
    FORMS,
    Engine,
    table_prefix,
)
from bench.report import engine_version, print_report
from bench.results import (
    FormResult,
    Progress,
    Settings,
    speed_probe,
)

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
    p.add_argument(
        "--batch",
        default="10,100",
        help="rows per claim, comma-separated: one pass of every drain per value "
        "(default %(default)s)",
    )
    p.add_argument(
        "--pgqueuer-drivers",
        default="asyncpg",
        help="PgQueuer's worker drivers, comma-separated: asyncpg (its default), psycopg "
        "(default %(default)s)",
    )
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


class _BadArgs(Exception):
    """A command-line value the bench cannot run with (its message is the line to print)."""


def _checked_args(
    args: argparse.Namespace,
) -> tuple[Settings, tuple[int, ...], tuple[str, ...], list[str], tuple[str, ...]]:
    """The settings, batches, PgQueuer drivers, engines and forms; _BadArgs for a bad value."""
    try:
        batches = tuple(int(b) for b in str(args.batch).split(",") if b.strip())
    except ValueError:
        raise _BadArgs(f"--batch {args.batch!r}: expected whole numbers, e.g. 10,100") from None
    drivers = tuple(d.strip() for d in args.pgqueuer_drivers.split(",") if d.strip())
    if not batches or min(batches) < 1 or any(d not in pgq.DRIVERS for d in drivers):
        raise _BadArgs(
            f"--batch must list numbers of at least 1 and --pgqueuer-drivers names from "
            f"{', '.join(pgq.DRIVERS)} (got {args.batch!r}, {args.pgqueuer_drivers!r})"
        )
    s = Settings(
        messages=args.messages or (150 if args.quick else 2000),
        repeats=args.repeats or (3 if args.quick else 5),
        concurrency=args.concurrency,
        batch=batches[0],
        batches=batches,
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
            "depth_big",
            "depth_small",
            "claim_repeats",
        )
        if getattr(args, k) is not None and getattr(args, k) < 1
    ]
    if small:
        raise _BadArgs(f"{', '.join(small)}: must be at least 1")
    names = [e.strip() for e in args.engines.split(",") if e.strip()]
    forms = tuple(f.strip() for f in args.forms.split(",") if f.strip())
    bad = [e for e in names if e not in ENGINES] + [f for f in forms if f not in FORMS]
    if bad:
        raise _BadArgs(
            f"unknown engine or form: {', '.join(bad)} (engines: {', '.join(ENGINES)}; "
            f"forms: {', '.join(FORMS)})"
        )
    return s, batches, drivers, names, forms


async def main(args: argparse.Namespace) -> int:
    try:
        s, batches, drivers, names, forms = _checked_args(args)
    except _BadArgs as exc:
        print(exc, file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # SIGTERM stops the run as Ctrl-C does: the main task is cancelled, and its cleanup drops
    # the tables and PgQueuer's schema on the way out
    main_task = asyncio.current_task()
    if main_task is not None:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, main_task.cancel)
    prefix = table_prefix()
    speed_before = speed_probe()
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="qgen-bench-") as tmpdir:
        tmp = Path(tmpdir)
        engines, results = await open_engines(names, args, tmp)
        pg_on = not args.no_pgqueuer and any(e.name == "postgres" for e in engines)
        kinds = {e.name: 2 if e.name == "postgres" else 3 for e in engines}
        total = sum(len(forms) * (k + s.repeats * (k + 2)) for k in kinds.values())
        total += (1 + 2 * s.repeats) * len(drivers) if pg_on else 0
        total *= len(batches)
        total += 0 if args.no_depth else len(engines) * (len(depth_mod.cases(0, 0)) + len(forms))
        progress = Progress(total)
        for batch in batches:
            sb = replace(s, batch=batch)
            for e in engines:
                for form in forms:
                    try:
                        fb = FormBench(e, form, sb, tmp, prefix)
                        results.append(await fb.run(progress))
                    except Exception as exc:
                        failed = FormResult(e.name, form, batch=batch)
                        failed.problems.append(f"failed: {type(exc).__name__}: {exc}")
                        results.append(failed)
                if e.name != "postgres":
                    continue
                if args.no_pgqueuer:
                    label = f"pgqueuer {pgq.VERSION}"
                    results.append(
                        FormResult(e.name, label, skipped="--no-pgqueuer", has_raw=False)
                    )
                    continue
                for driver in drivers:
                    results.append(await bench_pgqueuer(e, sb, prefix, progress, driver))
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
    speed = (speed_before, speed_probe())
    print_report(s, engines, results, timings, depth_problems, elapsed, progress.loads, speed)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(asyncio.run(main(parse_args())))
    except (KeyboardInterrupt, asyncio.CancelledError):
        print("interrupted: the bench's tables were dropped", file=sys.stderr)
        sys.exit(130)
