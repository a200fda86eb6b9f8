"""Lease: the rows a lost connection held are settled or given back on the worker's next one.

A worker whose connection dies still knows the rows it claimed (ids and tokens). On its next
connection it runs, guarded by each token, the settlement a finished handler decided (not
transactional: nothing of it was in the lost transaction), and gives back every other row
at once (unclaim for a row whose handler never started). None waits out its lease, and a
handled message is not handled again. The leases here are 60 s: a row left to its lease
would stall the drain for a minute. (tests/system/test_failover.py does the same through a
PostgreSQL failover.)
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.engines import Engine, run
from support.queues import make_queue

import runtime

LEASE_S = 60


@pytest.mark.parametrize("window", [0, 0.02], ids=["inline", "windowed"])
def test_a_finished_handler_still_acks_after_its_connection_is_lost(
    engine: Engine, window: float
) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease", lease_s=LEASE_S)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(4)))
            opened: list[runtime.Connection] = []

            async def open_conn() -> runtime.Connection:
                conn = await runtime.connect(qt.url)
                opened.append(conn)
                return conn

            seen: list[tuple[int, int | None]] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append((message.id, ctx.attempt))
                if len(seen) == 1:  # the database drops the worker's connection meanwhile
                    for conn in opened:
                        await conn.abort()
                return runtime.ack()

            consumer = runtime.Consumer(
                open_conn, qt.queue, handle, concurrency=1, batch=4, settle_window=window
            )
            started = time.monotonic()
            counts = await asyncio.wait_for(consumer.drain(), 30)
            took = time.monotonic() - started
            assert took < 10, f"{took:.1f} s: a row waited out its {LEASE_S} s lease"
            # each handled once: the first acked on the next connection, the unstarted ones
            # given back (their claim's count undone) and delivered again as attempt 1
            assert sorted(seen) == [(i, 1) for i in ids], seen
            assert counts["ack"] == 4 and counts["resettled"] >= 1, counts
            assert counts["connection_lost"] == 1, counts
            rows = await qt.rows()
            assert [r["processed_at"] is not None for r in rows] == [True] * 4
            assert [r["locked_until"] for r in rows] == [None] * 4
        finally:
            await qt.drop()

    run(go())


def test_a_transactional_handler_whose_connection_is_lost_is_given_back_at_once(
    engine: Engine,
) -> None:
    """Its writes went with the lost transaction: the row is released, not acked, and
    delivered again at once (not at its lease's expiry); the writes commit once."""

    async def go() -> None:
        qt = await make_queue(engine, "lease", lease_s=LEASE_S)
        side = qt.q(qt.table + "_side")
        await qt.sql(f"CREATE TABLE {side} (msg_id BIGINT NOT NULL)")
        try:
            (msg_id,) = await qt.enqueue({"n": 1})
            seen: list[int | None] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append(ctx.attempt)
                await ctx.db.execute(
                    f"INSERT INTO {side} (msg_id) VALUES ({qt.p('id')})", {"id": message.id}
                )
                if len(seen) == 1:
                    await ctx.db.abort()  # lost before the ack commits the write
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, transactional=True)
            started = time.monotonic()
            counts = await asyncio.wait_for(consumer.drain(), 30)
            assert time.monotonic() - started < 10
            assert seen == [1, 2]
            assert counts["ack"] == 1 and counts["released"] == 1, counts
            assert "resettled" not in counts
            assert await qt.sql(f"SELECT msg_id FROM {side}") == [{"msg_id": msg_id}]
        finally:
            await qt.sql(f"DROP TABLE {side}")
            await qt.drop()

    run(go())
