"""Consumer(retry_policy=…): retry() and a raising handler become retry_after(the policy's delay
by attempt), in the row, on every engine and form; the cap and the dead letter still apply."""

from __future__ import annotations

import asyncio
import random

import pytest
from engines import run
from queues import make_queue

import runtime

FORMS = ["row_lock", "lease", "advisory"]

# seconds from the database's clock to the row's retry_after
UNTIL = {
    "postgres": "EXTRACT(EPOCH FROM ({c} - clock_timestamp()))",
    "mariadb": "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), {c}) / 1000000.0",
    "mysql": "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), {c}) / 1000000.0",
    "sqlite": "(julianday({c}) - julianday('now')) * 86400.0",
}


async def _delay_left(qt) -> float:
    expr = UNTIL[qt.engine.dialect_name].format(c=qt.col("retry_after"))
    (row,) = await qt.sql(f"SELECT {expr} AS s FROM {qt.q(qt.table)}")
    return float(row["s"])


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("failure", ["raises", "retry"])
def test_a_failed_delivery_waits_as_the_policy_says_and_dead_letters_at_the_cap(
    engine, form, failure
):
    async def go():
        qt = await make_queue(engine, form, dead="table", max_attempts=3)
        policy = runtime.ExponentialBackoff(
            base=100, factor=3, cap=250, jitter=0.5, rng=random.Random(7)
        )
        seen = []

        async def handle(message, ctx):
            seen.append(ctx.attempt)
            if failure == "raises":
                raise RuntimeError("boom")
            return runtime.retry()

        consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, retry_policy=policy)
        try:
            await qt.enqueue({"n": 1})
            bounds = [(50, 100), (125, 250)]  # 100 s, then 300 s capped at 250, less jitter
            for low, high in bounds:
                counts = await consumer.drain()
                assert counts["retry_after"] == 1 and counts.get("retry", 0) == 0
                left = await _delay_left(qt)
                assert low - 2 <= left <= high + 0.5, (left, low, high)
                await qt.make_due()
            counts = await consumer.drain()  # delivery 3 of max_attempts 3
            assert counts["dead_letter"] == 1
            assert seen == [1, 2, 3]
            assert await qt.rows() == [] and len(await qt.dead_rows()) == 1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_an_explicit_retry_after_keeps_its_own_delay(engine, form):
    async def go():
        qt = await make_queue(engine, form)

        async def handle(message, ctx):
            return runtime.retry_after(1000)

        policy = runtime.ExponentialBackoff(base=5, cap=10)
        consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, retry_policy=policy)
        try:
            await qt.enqueue({"n": 1})
            await consumer.drain()
            assert 990 <= await _delay_left(qt) <= 1000.5
        finally:
            await qt.drop()

    run(go())


def test_a_policy_on_a_table_without_retry_after_is_refused(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=("attempt",))
        try:
            with pytest.raises(runtime.ConfigurationError, match="no retry_after column"):
                runtime.Consumer(
                    qt.url,
                    qt.queue,
                    lambda m, c: runtime.ack(),
                    retry_policy=runtime.ExponentialBackoff(),
                )
        finally:
            await qt.drop()

    run(go())


def test_exponential_backoff_grows_by_attempt_within_cap_and_jitter():
    exact = runtime.ExponentialBackoff(base=2, factor=2, cap=60)
    assert [exact.delay(n) for n in (None, 1, 2, 3, 4, 5, 6, 10**9)] == [2, 2, 4, 8, 16, 32, 60, 60]
    jittered = runtime.ExponentialBackoff(base=10, factor=1, cap=10, jitter=0.3)
    delays = [jittered.delay(1) for _ in range(500)]
    assert all(7 <= d <= 10 for d in delays) and max(delays) - min(delays) > 2
    for bad in (
        {"base": 0},
        {"factor": 0.5},
        {"jitter": 1.5},
        {"base": 10, "cap": 5},
        {"cap": float("inf")},
    ):
        with pytest.raises(ValueError):
            runtime.ExponentialBackoff(**bad)


@pytest.mark.parametrize("form", FORMS)
def test_a_row_that_cannot_be_decoded_waits_as_the_policy_says_without_a_dead_letter(engine, form):
    """Undecodable with no dead letter is a failure like any other: the policy delays it."""

    def refuse(obj):
        raise ValueError("not ours")

    async def go():
        qt = await make_queue(engine, form)
        queue = runtime.Queue(qt.queue.rendered, decoder=refuse)
        policy = runtime.ExponentialBackoff(base=500, cap=500)
        consumer = runtime.Consumer(
            qt.url, queue, lambda m, c: runtime.ack(), concurrency=1, retry_policy=policy
        )
        try:
            await qt.enqueue({"n": 1})
            # an undelayed retry would be claimed again at once, and drain() would never end
            counts = await asyncio.wait_for(consumer.drain(), 30)
            assert counts["undecodable"] == 1 and counts["retry_after"] == 1
            assert 490 <= await _delay_left(qt) <= 500.5
        finally:
            await qt.drop()

    run(go())
