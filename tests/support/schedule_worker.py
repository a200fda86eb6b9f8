"""A scheduler process for tests/runtime/test_schedules.py: ``python schedule_worker.py FILE URL``.

It runs the rendered file's schedules until SIGTERM (the test SIGKILLs some of them)."""

from __future__ import annotations

import asyncio
import logging
import signal
import sys

import runtime
from runtime.schedules import Scheduler


async def main(path: str, url: str) -> None:
    logging.basicConfig(level=logging.WARNING, format="%(process)d %(levelname)s %(message)s")
    scheduler = Scheduler(url, [runtime.load(path)])
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, scheduler.stop)
    print("ready", flush=True)
    await scheduler.run()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
