"""A consumer process whose handler kills its own process: a poison message in its worst form.

    python tests/support/poison_worker.py URL RENDERED_FILE LOG_FILE TRANSACTIONAL

It drains the queue once (``Consumer.drain()``) and exits. The handler appends the message's
id and ``ctx.attempt`` to LOG_FILE (one flushed line per delivery: the test counts
deliveries from it), then sends SIGKILL to its own process: no settlement, no rollback sent,
the server finds the connection gone. The test starts the worker again and again until the
message is in the dead letter.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import runtime
from runtime.forms import row_lock

# a row counted by a row-lock claim whose worker died returns after this mark (5 s by
# default): short here so that the test loops quickly
row_lock.COUNT_HOLD_S = 0.3


async def _main(argv: list[str]) -> None:
    url, rendered, log_file, transactional = argv
    queue = runtime.load(rendered)
    log = open(log_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (until the kill)

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        log.write(f"{message.id} {ctx.attempt}\n")
        log.flush()
        os.kill(os.getpid(), signal.SIGKILL)
        await asyncio.sleep(60)  # never reached
        return runtime.ack()

    consumer = runtime.Consumer(
        url, queue, handle, transactional=transactional == "1", concurrency=1, batch=1
    )
    await consumer.drain()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_main(sys.argv[1:]))
