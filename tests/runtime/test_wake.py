"""Wake-ups: an idle consumer with a long poll interval claims at once when woken (PostgreSQL's
LISTEN/NOTIFY from the enqueue's own transaction; an enqueue in the same process elsewhere),
and a delayed message is claimed when it becomes due, not a poll interval later.

The time bounds are generous: they prove the consumer did not wait for its next poll
(5 or 10 s away), not how fast it was."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from typing import Any

import psycopg
import pytest
from support.engines import run
from support.queues import make_queue

import runtime
import runtime.wake

LONG_POLL = {"poll_interval": 5.0, "max_poll_interval": 5.0}


class Started:
    """A handler that acks and records when each message's handling started."""

    def __init__(self) -> None:
        self.at: dict[Any, float] = {}
        self.event = asyncio.Event()

    async def __call__(self, message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        self.at[message.payload["n"]] = time.monotonic()
        self.event.set()
        return runtime.ack()

    async def wait(self, n: Any, timeout: float) -> float:
        """When message n started (monotonic), waiting at most timeout seconds."""
        deadline = time.monotonic() + timeout
        while n not in self.at:
            self.event.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"message {n} not handled within {timeout} s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.event.wait(), left)
        return self.at[n]


async def _idle_consumer(qt: Any, handle: Started, **kw: Any) -> tuple[Any, asyncio.Task]:
    consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=2, **{**LONG_POLL, **kw})
    task = asyncio.create_task(consumer.run())
    await asyncio.sleep(1.0)  # connected, claimed nothing, listening, asleep
    return consumer, task


async def _stop(consumer: Any, task: asyncio.Task) -> None:
    consumer.stop()
    await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
def test_notified_consumer_claims_at_once(engine, form):
    async def go():
        qt = await make_queue(engine, form)
        try:
            handle = Started()
            consumer, task = await _idle_consumer(qt, handle)
            # another connection, the service's own (psycopg), in its own transaction
            async with await psycopg.AsyncConnection.connect(qt.url) as conn:
                await qt.queue.enqueue(conn, {"n": 1})
                await conn.commit()
                committed = time.monotonic()
            started = await handle.wait(1, timeout=4.0)
            assert started - committed < 1.0, "woken by the notification, not the 5 s poll"
            await _stop(consumer, task)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
def test_notification_is_sent_at_commit_once_per_transaction(engine):
    """A rolled-back enqueue notifies nobody; a committed batch notifies once."""

    async def go():
        qt = await make_queue(engine, "lease")
        channel = qt.queue.rendered.header.channel
        assert channel == f"qgen.{qt.table}"
        try:
            async with (
                await psycopg.AsyncConnection.connect(qt.url, autocommit=True) as listener,
                await psycopg.AsyncConnection.connect(qt.url) as conn,
            ):
                await listener.execute(qt.queue.rendered.require("listen")[0])

                async def heard() -> list[str]:
                    return [n.channel async for n in listener.notifies(timeout=0.5)]

                await qt.queue.enqueue(conn, {"n": 1})
                await conn.rollback()
                assert await heard() == []
                await qt.queue.enqueue_many(conn, [{"n": 2}, {"n": 3}, {"n": 4}])
                await qt.queue.enqueue(conn, {"n": 5})
                await conn.commit()
                assert await heard() == [channel]
            assert [r["payload"]["n"] for r in await qt.rows()] == [2, 3, 4, 5]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
def test_rolled_back_enqueue_wakes_no_consumer(engine):
    async def go():
        qt = await make_queue(engine, "row_lock")
        try:
            handle = Started()
            claims: list[int] = []

            class Claims(runtime.Metrics):
                def on_claim(self, n: int) -> None:
                    claims.append(n)

            consumer, task = await _idle_consumer(qt, handle, metrics=Claims())
            async with await psycopg.AsyncConnection.connect(qt.url) as conn:
                await qt.queue.enqueue(conn, {"n": 1})
                await conn.rollback()
            await asyncio.sleep(1.0)
            assert handle.at == {} and claims == []
            await _stop(consumer, task)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["postgres"], indirect=True)
def test_lost_listener_polls_meanwhile_and_listens_again(engine, caplog):
    async def listeners(db: Any) -> list[int]:
        rows = await db.fetchall(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'LISTEN %%' AND pid <> pg_backend_pid()"
        )
        return [r["pid"] for r in rows]

    async def go():
        qt = await make_queue(engine, "lease")
        try:
            handle = Started()
            with caplog.at_level(logging.INFO, logger="runtime"):
                consumer, task = await _idle_consumer(qt, handle)
                async with await runtime.connect(qt.url) as admin:
                    (pid,) = await listeners(admin)
                    await admin.execute("SELECT pg_terminate_backend(%(pid)s)", {"pid": pid})
                    deadline = time.monotonic() + 5
                    while (await listeners(admin)) in ([], [pid]):
                        assert time.monotonic() < deadline, "the consumer did not listen again"
                        await asyncio.sleep(0.05)
                await asyncio.sleep(0.2)
                await qt.enqueue({"n": 1})
                enqueued = time.monotonic()
                started = await handle.wait(1, timeout=4.0)
                assert started - enqueued < 1.0, "the new listening connection woke it"
                await _stop(consumer, task)
            said = [r.getMessage() for r in caplog.records if r.name == "runtime"]
            assert any("not listening for enqueues" in m for m in said), said
            assert any("listening for enqueues again" in m for m in said), said
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["sqlite", "mariadb", "mysql"], indirect=True)
def test_enqueue_in_the_same_process_wakes_the_consumer(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            handle = Started()
            consumer, task = await _idle_consumer(qt, handle)
            await qt.enqueue({"n": 1})  # the runtime's own connection, autocommit
            enqueued = time.monotonic()
            started = await handle.wait(1, timeout=4.0)
            assert started - enqueued < 1.0, "woken by the enqueue, not the 5 s poll"
            await _stop(consumer, task)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_sync_enqueue_from_another_thread_wakes_the_consumer(engine):
    async def go():
        qt = await make_queue(engine, "row_lock")
        try:
            handle = Started()
            consumer, task = await _idle_consumer(qt, handle)

            def enqueue() -> float:
                db = sqlite3.connect(qt.url.removeprefix("sqlite:///"))
                try:
                    with db:
                        qt.queue.sync.enqueue(db, {"n": 1})
                    return time.monotonic()
                finally:
                    db.close()

            committed = await asyncio.to_thread(enqueue)
            started = await handle.wait(1, timeout=4.0)
            assert started - committed < 1.0
            await _stop(consumer, task)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["postgres", "mariadb", "mysql", "sqlite"], indirect=True)
def test_delayed_message_is_claimed_when_due(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue({"n": 1}, delay=1.0)
            enqueued = time.monotonic()
            handle = Started()
            consumer = runtime.Consumer(
                qt.url, qt.queue, handle, poll_interval=10.0, max_poll_interval=10.0
            )
            task = asyncio.create_task(consumer.run())
            started = await handle.wait(1, timeout=6.0)
            assert 0.8 <= started - enqueued < 2.5, "claimed when due, not at the 10 s poll"
            await _stop(consumer, task)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["postgres", "sqlite"], indirect=True)
def test_a_burst_wakes_every_worker(engine):
    """One wake-up for 40 messages: the woken worker claims a full batch and wakes the next,
    so four workers share them (one alone would take 40 x 0.1 s)."""

    async def go():
        qt = await make_queue(engine, "lease")
        try:
            done: list[float] = []

            async def handle(message, ctx):
                await asyncio.sleep(0.1)
                done.append(time.monotonic())
                return runtime.ack()

            consumer = runtime.Consumer(
                qt.url, qt.queue, handle, concurrency=4, batch=10, **LONG_POLL
            )
            task = asyncio.create_task(consumer.run())
            await asyncio.sleep(1.0)
            async with await runtime.connect(qt.url) as db:
                await db.begin()
                await qt.queue.enqueue_many(db, [{"n": i} for i in range(40)])
                await db.commit()
            enqueued = time.monotonic()
            while len(done) < 40 and time.monotonic() - enqueued < 8:
                await asyncio.sleep(0.05)
            await _stop(consumer, task)
            assert len(done) == 40
            assert max(done) - enqueued < 2.5, "the workers were not all woken"
        finally:
            await qt.drop()

    run(go())


def test_a_poke_wakes_one_waiter_and_none_is_lost():
    async def go():
        wakeup = runtime.wake.Wakeup()
        wakeup.bind()
        mark = wakeup.signal()
        waiters = [asyncio.create_task(wakeup.wait(mark, 5)) for _ in range(3)]
        await asyncio.sleep(0.05)
        wakeup.poke()
        await asyncio.sleep(0.05)
        assert sum(w.done() for w in waiters) == 1
        wakeup.poke(everyone=True)
        assert await asyncio.gather(*waiters) == [True, True, True]
        # a poke between taking the mark and waiting is not lost
        mark = wakeup.signal()
        wakeup.poke()
        started = time.monotonic()
        assert await wakeup.wait(mark, 5) is True
        assert time.monotonic() - started < 1
        assert await wakeup.wait(wakeup.signal(), 0.05) is False

    run(go())
