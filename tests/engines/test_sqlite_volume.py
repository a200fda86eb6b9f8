"""SQLite at volume: one consumer's connections take turns through the file's writer lock, so
a large drain at concurrency 4 ends with every message acked and nothing else: no busy
timeout, no lease lost, no failed batch (bench/sqlite_volume.py runs the same at 100,000)."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from support.engines import engine_params, run
from support.queues import make_queue

import runtime

#: enough to make four workers and the lease extender contend for the file all along
MESSAGES = int(os.environ.get("QGEN_VOLUME_MESSAGES", "20000"))


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
def test_a_large_sqlite_drain_at_concurrency_4_meets_no_contention(engine, form, caplog):
    async def go() -> None:
        # a short lease: the extender writes all along, beside the four workers
        qt = await make_queue(engine, form, lease_s=2)
        try:
            async with await runtime.connect(qt.url) as db:
                await db.begin()
                await qt.queue.enqueue_many(db, [{"n": i} for i in range(MESSAGES)])
                await db.commit()

            async def ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                await asyncio.sleep(0)
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, ack, concurrency=4, batch=10)
            counts = await consumer.drain()
            assert counts.pop("ack") == MESSAGES
            counts.pop("extended", None)
            assert counts == {}  # no lease_lost, failed_batches, released, connection_lost
            assert "database is locked" not in caplog.text
            assert "failed" not in caplog.text
        finally:
            await qt.drop()

    run(go())


def test_writers_of_one_process_take_turns(engine):
    """Many connections writing one table (on SQLite: one file) at once all succeed."""

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:

            async def writer(k: int) -> None:
                async with await runtime.connect(qt.url) as db:
                    for i in range(50):
                        await db.begin()
                        await qt.queue.enqueue(db, {"k": k, "i": i})
                        await db.commit()
                        await qt.queue.enqueue(db, {"k": k, "i": -i})  # autocommit write

            await asyncio.gather(*(writer(k) for k in range(12)))
            assert len(await qt.rows()) == 12 * 100
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_writer_kept_waiting_past_the_busy_timeout_gets_a_clear_error(engine, monkeypatch):
    """A connection waiting for the file's writer lock longer than the busy timeout (another
    connection of the process left its transaction open) raises DatabaseError saying so, and
    does not hold the lock afterwards."""
    from runtime.drivers import sqlite as sqlite_driver

    monkeypatch.setattr(sqlite_driver, "BUSY_TIMEOUT_MS", 200)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                await a.begin()  # holds the writer lock until it ends
                started = time.monotonic()
                with pytest.raises(runtime.DatabaseError, match="kept the database's write lock"):
                    await qt.queue.enqueue(b, {"n": 1})
                assert 0.2 <= time.monotonic() - started < 1.5  # given up at the busy timeout
                await a.rollback()
                await qt.queue.enqueue(b, {"n": 2})  # the lock is free again: b takes it
            assert [r["payload"] for r in await qt.rows()] == [{"n": 2}]
        finally:
            await qt.drop()

    run(go())
