"""A consumer process of tests/system/test_limits_processes.py: drains a queue for a few seconds.

    python tests/support/limits_worker.py URL RENDERED_FILE MARKERS|- SECONDS

Its handler marks the message it runs in the table MARKERS, on a connection of its own
that commits at once (insert at the start, delete at the end), so a sampler in another
process can count the handlers running per key from the database. It prints ``ready``,
waits for a line on stdin, then runs a Consumer (4 workers, batches of 3) for SECONDS,
and prints how many messages it handled.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

import runtime


async def _main(url: str, rendered: str, markers: str, seconds: float) -> None:
    queue = runtime.load(rendered)
    q, p = queue.dialect.quote_ident, queue.dialect.placeholder
    mark = await runtime.connect(url) if markers != "-" else None
    lock = asyncio.Lock()  # one marker connection, shared by the workers in turn
    handled = 0

    async def marker(sql: str, params: dict[str, Any]) -> None:
        if mark is not None:
            async with lock:
                await mark.execute(sql, params)

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> None:
        nonlocal handled
        key = message.payload["key"]
        await marker(
            f"INSERT INTO {q(markers)} (id, ckey) VALUES ({p('id')}, {p('k')})",
            {"id": message.id, "k": key},
        )
        await asyncio.sleep(0.02)
        await marker(f"DELETE FROM {q(markers)} WHERE id = {p('id')}", {"id": message.id})
        handled += 1

    consumer = runtime.Consumer(url, queue, handle, concurrency=4, batch=3)
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    asyncio.get_running_loop().call_later(seconds, consumer.stop)
    await consumer.run()
    if mark is not None:
        await mark.close()
    print(handled, flush=True)


if __name__ == "__main__":
    import logging

    logging.basicConfig(level=logging.ERROR)
    url, rendered, markers, seconds = sys.argv[1:]
    asyncio.run(_main(url, rendered, markers, float(seconds)))
