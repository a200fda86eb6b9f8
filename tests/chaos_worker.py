"""A consumer process for the chaos suite (tests/test_chaos.py), killed with SIGKILL at will.

    python tests/chaos_worker.py URL RENDERED_FILE SIDE_TABLE|- TRANSACTIONAL LOG_FILE SEED

It runs ``Consumer.run()`` until SIGTERM (then stops cleanly) or SIGKILL. The handler
appends each message's number to LOG_FILE as it starts (one line, flushed: the test counts
deliveries from it, a line cut short by a kill is skipped), sleeps a little, and acks; in
transactional mode it first writes ``(n, msg_id)`` into SIDE_TABLE through ``ctx.db``, a write
that must commit with the ack and only with it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import sys

import runtime


async def _main(argv: list[str]) -> None:
    url, rendered, side, transactional, log_file, seed = argv
    queue = runtime.load(rendered)
    rng = random.Random(seed)
    p = queue.dialect.placeholder
    insert = (
        f"INSERT INTO {queue.dialect.quote_ident(side)} (n, msg_id) VALUES ({p('n')}, {p('id')})"
        if side != "-"
        else None
    )
    log = open(log_file, "a", encoding="utf-8", buffering=1)  # noqa: SIM115 (lives as long as the process)

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        n = int(message.payload["n"])
        log.write(f"{n}\n")
        log.flush()
        if insert is not None:
            await ctx.db.execute(insert, {"n": n, "id": message.id})
        await asyncio.sleep(rng.uniform(0.05, 0.15))
        return runtime.ack()

    consumer = runtime.Consumer(
        url,
        queue,
        handle,
        transactional=transactional == "1",
        concurrency=3,
        batch=3,
        max_reconnect_interval=0.5,
        stop_timeout=5,
    )
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, consumer.stop)
    await consumer.run()


if __name__ == "__main__":
    # warnings and errors go to stderr, which the test shows when a scenario fails
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    asyncio.run(_main(sys.argv[1:]))
