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


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_writer_turn_whose_caller_was_cancelled_is_given_back(engine):
    """``writing()`` cancelled while it waits for the turn (another connection's transaction
    holds it): its take still runs on the connection's thread once the turn is free, and gives
    it straight back, so the other connections of the process go on writing."""

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                await a.begin()

                async def hold_turn() -> None:
                    async with b.writing():
                        await asyncio.sleep(60)

                waiting = asyncio.ensure_future(hold_turn())
                await asyncio.sleep(0.2)  # b's take waits on its thread
                waiting.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await waiting
                await qt.queue.enqueue(a, {"n": 1})
                await a.commit()  # the turn passes to b's waiting take, which gives it back
                await qt.queue.enqueue(b, {"n": 2})  # b's connection still works
                async with await runtime.connect(qt.url) as c:
                    await asyncio.wait_for(qt.queue.enqueue(c, {"n": 3}), 5)
            assert sorted(r["payload"]["n"] for r in await qt.rows()) == [1, 2, 3]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_closing_a_connection_that_waits_for_the_writer_turn_is_prompt(engine):
    """A connection whose write waits for the turn (another one's transaction is open) closes
    at once when asked: the write fails as a lost connection, and the turn is left to its
    holder."""

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as a:
                await a.begin()
                b = await runtime.connect(qt.url)  # opening one does not wait for the turn
                write = asyncio.ensure_future(qt.queue.enqueue(b, {"n": 1}))
                await asyncio.sleep(0.2)
                started = time.monotonic()
                await b.close()
                with pytest.raises(runtime.ConnectionLost):
                    await write
                assert time.monotonic() - started < 5  # not the 30 s busy timeout
                await qt.queue.enqueue(a, {"n": 2})
                await a.commit()
            assert [r["payload"] for r in await qt.rows()] == [{"n": 2}]
        finally:
            await qt.drop()

    run(go())
