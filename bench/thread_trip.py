"""What one statement's trip to a MariaDB connection's thread costs, three ways.

PyMySQL blocks, so an asyncio program runs each statement on another thread: the runtime on
its connection's ``CallThread`` (a queue, the caller's future set by one
``call_soon_threadsafe``), the raw twin the usual way (``loop.run_in_executor`` on a
one-thread executor). ``direct`` runs the statement on the event loop's own thread, blocking
it: the floor, what the statement costs with no thread switch. Each round times ``-n``
``SELECT 1`` trips of each side, in turns (who goes first rotates); it prints each side's
median wall and client CPU (every thread) a trip, and the part of a trip the thread switch
adds (side − direct).

    python bench/thread_trip.py                 # 5 rounds of 5,000 trips
    python bench/thread_trip.py -n 2000 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.queues import DEFAULT_URLS
from bench.raw import _pymysql_connect
from runtime.drivers.thread import CallThread


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python bench/thread_trip.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("-n", "--trips", type=int, default=5000, help="trips a side a round")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--url", default=DEFAULT_URLS["mariadb"], help="the MariaDB server")
    return p.parse_args(argv)


async def measure(args: argparse.Namespace) -> str:
    conn = _pymysql_connect(args.url)
    cur = conn.cursor()

    def select_one() -> Any:
        cur.execute("SELECT 1")
        return cur.fetchall()

    async def direct() -> Any:
        return select_one()

    loop = asyncio.get_running_loop()
    executor = ThreadPoolExecutor(max_workers=1)
    thread = CallThread("qgen-trip")
    sides: dict[str, Callable[[], Awaitable[Any]]] = {
        "direct": direct,
        "executor": lambda: loop.run_in_executor(executor, select_one),
        "CallThread": lambda: thread.call(select_one),
    }
    got: dict[str, list[tuple[float, float]]] = {name: [] for name in sides}
    names = list(sides)
    try:
        for name in names:  # warm-up: each side's thread started, the statement cached
            for _ in range(50):
                await sides[name]()
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                trip = sides[name]
                wall, cpu = time.perf_counter(), time.process_time()
                for _ in range(args.trips):
                    await trip()
                got[name].append(
                    (
                        (time.perf_counter() - wall) / args.trips * 1e6,
                        (time.process_time() - cpu) / args.trips * 1e6,
                    )
                )
            print(f"round {r + 1}/{args.rounds}", file=sys.stderr, flush=True)
    finally:
        thread.shutdown()
        executor.shutdown(wait=True)
        conn.close()
    floor_wall = statistics.median(w for w, _ in got["direct"])
    floor_cpu = statistics.median(c for _, c in got["direct"])
    lines = [
        f"MariaDB SELECT 1, {args.trips:,} trips a side, median of {args.rounds} rounds in turns",
        f"{'side':<11} {'wall µs':>8} {'CPU µs':>8} {'switch wall':>12} {'switch CPU':>11}",
    ]
    for name, runs in got.items():
        wall = statistics.median(w for w, _ in runs)
        cpu = statistics.median(c for _, c in runs)
        lines.append(
            f"{name:<11} {wall:>8.1f} {cpu:>8.1f} {wall - floor_wall:>12.1f} "
            f"{cpu - floor_cpu:>11.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    print(asyncio.run(measure(parse_args(argv))))


if __name__ == "__main__":
    main()
