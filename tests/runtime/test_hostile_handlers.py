"""Handlers that do what handlers should not, and the consumer's own edges: a handler's
CancelledError or GeneratorExit is a retry, KeyboardInterrupt stops the consumer gracefully,
delays are checked at the call, sync handlers run in a thread, a lost lease is not handled,
stop() before run() is honoured, a connection lost in ctx.db is a connection loss, and rows
given back unstarted keep their attempt.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from support.engines import run
from support.queues import make_queue

import runtime

FORMS = ["row_lock", "lease", "advisory"]

FUTURE = {
    "postgres": "clock_timestamp() + interval '1 hour'",
    "mariadb": "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
    "mysql": "UTC_TIMESTAMP(6) + INTERVAL 1 HOUR",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '+1 hour')",
}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("raised", [asyncio.CancelledError, GeneratorExit])
def test_a_handler_raising_cancelled_or_generator_exit_is_a_retry(engine, form, raised, caplog):
    async def go() -> None:
        qt = await make_queue(engine, form)
        try:
            await qt.enqueue(*[{"n": i} for i in range(4)])
            seen: list[tuple[int, int | None]] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append((message.payload["n"], ctx.attempt))
                if message.payload["n"] == 1 and ctx.attempt == 1:
                    raise raised()
                return runtime.ack()

            counts = await asyncio.wait_for(
                runtime.Consumer(
                    qt.url, qt.queue, handle, concurrency=2, retry_policy=runtime.Immediate()
                ).drain(),
                30,
            )
            assert counts.get("ack") == 4 and counts.get("retry") == 1, counts
            assert (1, 2) in seen
            assert all(r["processed_at"] is not None for r in await qt.rows())
            assert f"raised {raised.__name__}" in caplog.text or raised.__name__ in caplog.text
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_cancelling_the_consumer_from_outside_still_ends_it(engine, form):
    async def go() -> None:
        qt = await make_queue(engine, form)
        try:
            await qt.enqueue({"n": 1})
            started = asyncio.Event()

            async def hang(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                started.set()
                await asyncio.sleep(60)
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, hang, concurrency=1)
            task = asyncio.create_task(consumer.drain())
            await asyncio.wait_for(started.wait(), 10)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 10)
            (row,) = await qt.rows()
            assert row["processed_at"] is None and row.get("locked_until") is None
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("raised", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_in_a_handler_stops_the_consumer_then_propagates(engine, form, raised):
    async def go() -> None:
        qt = await make_queue(engine, form)
        try:
            ids = await qt.enqueue(*[{"n": i} for i in range(5)])

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                if message.payload["n"] == 1:
                    raise raised()
                return runtime.ack()

            consumer = runtime.Consumer(
                qt.url, qt.queue, handle, concurrency=1, batch=5, retry_policy=runtime.Immediate()
            )
            with pytest.raises(raised):
                # awaited in this task: a KeyboardInterrupt leaving a task of its own (as
                # wait_for would make) ends the event loop, as asyncio does for any task
                await consumer.drain()
            assert consumer.counts["ack"] == 1 and consumer.counts["retry"] == 1
            rows = {r["id"]: r for r in await qt.rows()}
            assert rows[ids[0]]["processed_at"] is not None
            for i in ids[1:]:  # the one that raised is a retry; the rest came back unstarted
                assert rows[i]["processed_at"] is None and rows[i].get("locked_until") is None
            for i in ids[2:]:
                assert rows[i]["attempt"] == 1, rows[i]  # given back unstarted: no attempt used
            # the consumer is usable again
            consumer.handle = _ack
            assert (await consumer.drain())["ack"] == 4  # this call's counts: the other four
        finally:
            await qt.drop()

    run(go())


async def _ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.ack()


@pytest.mark.parametrize(
    "delay",
    [
        float("nan"),
        float("inf"),
        float("-inf"),
        -1,
        10**12,
        runtime.MAX_DELAY_S + 1,
        timedelta(days=400),
        "soon",
    ],
)
def test_retry_after_refuses_a_delay_it_cannot_keep(delay):
    with pytest.raises(ValueError, match="delay"):
        runtime.retry_after(delay)


def test_retry_after_keeps_milliseconds_up_to_the_maximum():
    assert runtime.retry_after(timedelta(seconds=1.2345)).delay_s == 1.234
    assert runtime.retry_after(runtime.MAX_DELAY_S).delay_s == runtime.MAX_DELAY_S
    assert runtime.retry_after(0).delay_s == 0


def test_enqueue_refuses_a_delay_it_cannot_keep_on_every_engine(engine):
    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as db:
                for delay in (float("nan"), float("inf"), -5, 10**12):
                    with pytest.raises(ValueError, match="delay"):
                        await qt.queue.enqueue(db, {"n": 1}, delay=delay)
                    with pytest.raises(ValueError, match="delay"):
                        await qt.queue.enqueue_many(db, [{"n": 1}], delay=delay)
            assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_sync_handler_runs_in_a_worker_thread(engine, form):
    async def go() -> None:
        qt = await make_queue(engine, form)
        try:
            await qt.enqueue(*[{"n": i} for i in range(6)])
            threads: set[int] = set()
            seen: list[Any] = []

            def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                threads.add(threading.get_ident())
                assert ctx.db is None
                time.sleep(0.01)  # blocking is fine: this is not the event loop's thread
                seen.append(message.payload)
                return (
                    runtime.retry()
                    if message.payload["n"] == 0 and ctx.attempt == 1
                    else (runtime.ack())
                )

            consumer = runtime.Consumer(
                qt.url, qt.queue, handle, concurrency=2, retry_policy=runtime.Immediate()
            )
            counts = await asyncio.wait_for(consumer.drain(), 30)
            assert counts.get("ack") == 6 and counts.get("retry") == 1, counts
            assert threading.get_ident() not in threads
            assert sorted(p["n"] for p in seen) == [0, 0, 1, 2, 3, 4, 5]
        finally:
            await qt.drop()

    run(go())


def test_a_plain_def_returning_a_coroutine_is_awaited(engine):
    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            consumer = runtime.Consumer(qt.url, qt.queue, lambda m, c: _ack(m, c))
            assert await asyncio.wait_for(consumer.drain(), 30) == {"ack": 2}
        finally:
            await qt.drop()

    run(go())


def test_a_sync_handler_cannot_be_transactional():
    queue = runtime.Queue.__new__(runtime.Queue)
    with pytest.raises(runtime.ConfigurationError, match="async handler"):
        runtime.Consumer("sqlite:///x.db", queue, lambda m, c: runtime.ack(), transactional=True)


def test_a_handler_is_not_started_for_a_delivery_whose_lease_is_lost(engine, caplog):
    async def go() -> None:
        qt = await make_queue(engine, "lease", lease_s=1)
        try:
            first, second = await qt.enqueue({"n": 1}, {"n": 2})
            handled: list[int] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                handled.append(message.id)
                if message.id == first:
                    # another claim takes the second row (a new token) while this one runs
                    await qt.sql(
                        f"UPDATE {qt.q(qt.table)} SET {qt.col('locked_until')} = "
                        f"{FUTURE[engine.dialect_name]} WHERE {qt.col('id')} = {second}"
                    )
                    await asyncio.sleep(1.2)  # the extender meets the lost lease meanwhile
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=2)
            counts = await asyncio.wait_for(consumer.drain(), 30)
            assert handled == [first]
            assert counts.get("lease_lost") == 1 and counts.get("ack") == 1, counts
            assert f"message {second} lost its lease before its handler started" in caplog.text
        finally:
            await qt.drop()

    run(go())


def test_stop_before_run_makes_run_return_at_once(engine):
    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue({"n": 1})
            consumer = runtime.Consumer(qt.url, qt.queue, _ack)
            consumer.stop()
            assert await asyncio.wait_for(consumer.run(), 5) == {}
            (row,) = await qt.rows()
            assert row["processed_at"] is None
            # stop() was for that run: the next one consumes
            assert await asyncio.wait_for(consumer.drain(), 30) == {"ack": 1}
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_connection_lost_in_ctx_db_is_a_connection_loss_not_a_handler_error(engine, form, caplog):
    caplog.set_level(logging.WARNING, logger="runtime")

    async def go() -> None:
        qt = await make_queue(engine, form)
        try:
            ids = await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            seen: list[tuple[int, int | None]] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append((message.id, ctx.attempt))
                if len(seen) == 1:
                    await ctx.db.abort()  # the server killed the connection
                    await ctx.db.execute(f"SELECT 1 FROM {qt.q(qt.table)}")
                return runtime.ack()

            consumer = runtime.Consumer(
                qt.url, qt.queue, handle, transactional=True, concurrency=1, batch=3
            )
            counts = await asyncio.wait_for(consumer.drain(), 30)
            assert counts.get("connection_lost") == 1, counts
            assert "retry" not in counts and counts.get("ack") == 3, counts
            assert "handler for message" not in caplog.text
            attempts = dict(seen[1:])
            # the one in flight used its attempt (except row lock, which counts on retry);
            # the two never started kept theirs (advisory: the keys went with the connection)
            assert attempts[ids[0]] == (1 if form == "row_lock" else 2)
            if form != "advisory":
                assert attempts[ids[1]] == attempts[ids[2]] == 1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_rows_given_back_unstarted_at_stop_keep_their_attempt(engine, form):
    async def go() -> None:
        qt = await make_queue(engine, form)
        try:
            ids = await qt.enqueue(*[{"n": i} for i in range(4)])
            consumer: runtime.Consumer

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                consumer.stop()
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=4)
            counts = await asyncio.wait_for(consumer.run(), 20)
            assert counts["ack"] == 1
            rows = {r["id"]: r for r in await qt.rows()}
            for i in ids[1:]:
                assert rows[i]["processed_at"] is None and rows[i].get("locked_until") is None
                assert rows[i]["attempt"] == 1, rows[i]
            seen: list[int | None] = []

            async def ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append(ctx.attempt)
                return runtime.ack()

            assert await runtime.Consumer(qt.url, qt.queue, ack).drain() == {"ack": 3}
            assert seen == [1, 1, 1]
        finally:
            await qt.drop()

    run(go())
