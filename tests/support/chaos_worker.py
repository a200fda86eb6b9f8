"""A consumer process for the chaos suite (tests/system/test_chaos.py), killed with SIGKILL at will.

    python tests/support/chaos_worker.py URL RENDERED_FILE SIDE_TABLE|- TRANSACTIONAL LOG_FILE SEED

It runs ``Consumer.run()`` until SIGTERM (then stops cleanly) or SIGKILL. The handler
appends each message's number to LOG_FILE as it starts (one line, flushed: the test counts
deliveries from it, a line cut short by a kill is skipped), sleeps a little, and acks; in
transactional mode it first writes ``(n, msg_id)`` into SIDE_TABLE through ``ctx.db``, a write
that must commit with the ack and only with it. Each settlement the consumer counted (once
committed) adds ``s <message id> <outcome>`` to LOG_FILE: the test sees a message settled twice.

A poison message (payload ``"poison"``) kills its handler's process (``"process"``: SIGKILL
to itself) or its worker's server session (``"backend"``: ``pg_terminate_backend`` /
``KILL`` from a connection of its own), every time it is delivered.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import os
import random
import signal
import sys
from typing import Any

import runtime
from runtime.forms import row_lock

# a row a row-lock claim counted (max_attempts) whose worker died returns after this mark
# (5 s by default): short here, so that poison messages loop quickly
row_lock.COUNT_HOLD_S = 0.3
#: the server session of the worker's connection (set by its opener, in the worker's task)
SESSION: contextvars.ContextVar[int] = contextvars.ContextVar("session")
_SESSION_ID = {"postgres": "SELECT pg_backend_pid() AS id", "mysql": "SELECT CONNECTION_ID() AS id"}


class SettledLog(logging.Handler):
    """Writes ``s <id>`` for each settlement the consumer counts (its DEBUG record)."""

    def __init__(self, out: Any) -> None:
        super().__init__(logging.DEBUG)
        self.out = out

    def emit(self, record: logging.LogRecord) -> None:
        if getattr(record, "outcome", None) and " settled: " in record.getMessage():
            self.out.write(f"s {record.__dict__['message_id']} {record.__dict__['outcome']}\n")
            self.out.flush()


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
    settled = logging.getLogger("runtime")
    settled.setLevel(logging.DEBUG)
    settled.addHandler(SettledLog(log))
    dialect = queue.dialect.name if queue.dialect.name == "postgres" else "mysql"

    async def open_worker_connection() -> runtime.Connection:
        conn = await runtime.connect(url)
        row = await conn.fetchone(_SESSION_ID[dialect])
        assert row is not None
        SESSION.set(int(row["id"]))
        return conn

    async def kill_backend() -> None:
        sid = SESSION.get()
        async with await runtime.connect(url) as admin:
            if dialect == "postgres":
                await admin.fetchone("SELECT pg_terminate_backend(%(id)s) AS ok", {"id": sid})
            else:
                await admin.execute(f"KILL {sid}")

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        n = int(message.payload["n"])
        log.write(f"{n}\n")
        log.flush()
        poison = message.payload.get("poison")
        if poison == "process":
            os.kill(os.getpid(), signal.SIGKILL)
        elif poison == "backend":  # the handler's database is gone: it raises
            await kill_backend()
            raise RuntimeError("poison: the worker's session was terminated")
        if insert is not None:
            await ctx.db.execute(insert, {"n": n, "id": message.id})
        await asyncio.sleep(rng.uniform(0.05, 0.15))
        return runtime.ack()

    consumer = runtime.Consumer(
        open_worker_connection,
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
    logging.getLogger().handlers[0].setLevel(logging.WARNING)  # the settlements' DEBUG: LOG_FILE
    asyncio.run(_main(sys.argv[1:]))
