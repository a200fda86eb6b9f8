"""The handler of the concurrency test, and a script that drains a queue with it in its own process.

Each delivery's outcome is a function of (seed, message number, attempt) only, so the test
knows every message's fate in advance whatever order the consumers take them in. The handler
logs every delivery it sees; in transactional mode it also writes ``(n, attempt)`` into the side
table through ``ctx.db``, a write that must commit with an ack and only with it.

As a script (the concurrency test starts two of them)::

    python tests/support/model/drain_worker.py URL RENDERED_FILE SEED LOG_FILE SIDE_TABLE|- TRANSACTIONAL

it connects, prints ``ready``, waits for a line on stdin (so that both processes start
draining together), drains, writes its deliveries to LOG_FILE (JSON lines) and prints its
counts per outcome as JSON.
"""

from __future__ import annotations

import asyncio
import json
import random
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import runtime

#: each delivery's outcome, by weight; "raise" is a handler error, taken as retry(); "none"
#: returns None, taken as ack()
WEIGHTS = {"ack": 30, "none": 10, "drop": 10, "retry": 20, "retry_after": 15, "raise": 15}


def outcome_for(seed: int, n: int, attempt: int) -> str:
    """The outcome of message ``n``'s delivery number ``attempt``, the same in every process."""
    rng = random.Random(f"{seed}:{n}:{attempt}")
    return rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]


def fifo_key_for(n: int) -> str | None:
    """Message ``n``'s fifo_key in the FIFO cases: seven keys, every fifth message none."""
    return None if n % 5 == 0 else f"k{n % 7}"


def make_handler(
    queue: runtime.Queue, seed: int, log: list[dict[str, Any]], side: str | None
) -> Callable[[runtime.Message, runtime.Ctx], Awaitable[runtime.Outcome | None]]:
    """A handler that logs each delivery (with when it started and ended, by the machine's
    monotonic clock, which every process shares) and returns its seeded outcome. On a queue
    with a fifo_key it pauses a little, so that two deliveries of a key in flight at once
    would overlap."""
    pause = 0.002 if "fifo_key" in queue.columns else 0
    p = queue.dialect.placeholder
    insert = (
        f"INSERT INTO {queue.dialect.quote_ident(side)} (n, attempt, msg_id) "
        f"VALUES ({p('n')}, {p('attempt')}, {p('id')})"
        if side
        else None
    )

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome | None:
        n = int(message.payload["n"])
        assert ctx.attempt is not None
        chosen = outcome_for(seed, n, ctx.attempt)
        entry = {"id": message.id, "n": n, "attempt": ctx.attempt, "outcome": chosen}
        entry["start"] = time.monotonic()
        log.append(entry)
        if insert is not None:
            await ctx.db.execute(insert, {"n": n, "attempt": ctx.attempt, "id": message.id})
        await asyncio.sleep(pause)  # let the other workers interleave
        entry["end"] = time.monotonic()
        if chosen == "raise":
            raise RuntimeError(f"message {n}: the handler fails on attempt {ctx.attempt}")
        if chosen == "retry_after":
            return runtime.retry_after(0)
        if chosen == "none":
            return None
        return getattr(runtime, chosen)()

    return handle


async def _main(argv: list[str]) -> None:
    url, rendered, seed, log_file, side, transactional = argv
    queue = runtime.load(rendered)
    log: list[dict[str, Any]] = []
    handle = make_handler(queue, int(seed), log, None if side == "-" else side)
    consumer = runtime.Consumer(
        url,
        queue,
        handle,
        transactional=transactional == "1",
        concurrency=4,
        batch=5,
        retry_policy=runtime.Immediate(),  # the model's retries come back at once
    )
    async with await runtime.connect(url):  # reachable before we say ready
        pass
    print("ready", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    counts = await consumer.drain()
    with open(log_file, "w", encoding="utf-8") as f:
        for entry in log:
            f.write(json.dumps(entry) + "\n")
    print(json.dumps(counts), flush=True)


if __name__ == "__main__":
    import logging

    class _NotTheExpectedRaises(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            return "raised: taken as retry()" not in record.getMessage()

    # errors only: the cap's warnings are expected; the handler's own raises are filtered out
    logging.basicConfig(level=logging.ERROR)
    for h in logging.getLogger().handlers:
        h.addFilter(_NotTheExpectedRaises())
    asyncio.run(_main(sys.argv[1:]))
