"""Consumer(retry_policy=…): retry() and a raising handler become retry_after(the policy's delay
by attempt), in the row, on every engine and form; the cap and the dead letter still apply.
Given no policy, a queue with retry_after backs off from 1 s; one without retries at once and
says so once; runtime.Immediate() retries at once on purpose."""

from __future__ import annotations

import asyncio
import logging
import random

import pytest
from support.engines import run
from support.queues import make_queue

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


@pytest.mark.parametrize("form", FORMS)
def test_without_a_policy_a_failure_backs_off_from_one_second_and_the_cap_still_applies(
    engine, form
):
    async def go():
        qt = await make_queue(engine, form, dead="table", max_attempts=3)
        seen = []

        async def handle(message, ctx):
            seen.append(ctx.attempt)
            raise RuntimeError("the partner is down")

        consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1)
        try:
            await qt.enqueue({"n": 1})
            # 1 s after delivery 1, 2 s after delivery 2, less up to 20 % jitter; the time
            # between the settlement and this read only shortens what is left
            for low, high in [(0.8, 1.0), (1.6, 2.0)]:
                counts = await consumer.drain()
                assert counts == {"retry_after": 1}, counts
                left = await _delay_left(qt)
                assert low - 0.5 <= left <= high + 0.05, (left, low, high)
                await qt.make_due()
            counts = await consumer.drain()  # delivery 3 of max_attempts 3
            assert counts == {"dead_letter": 1}, counts
            assert seen == [1, 2, 3]
            assert await qt.rows() == [] and len(await qt.dead_rows()) == 1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_immediate_retries_at_once_and_dead_letters_at_the_cap(engine, form, caplog):
    async def go():
        qt = await make_queue(engine, form, dead="group", max_attempts=2, columns=_WITH_GROUP)

        async def handle(message, ctx):
            return runtime.retry()

        consumer = runtime.Consumer(
            qt.url, qt.queue, handle, concurrency=1, retry_policy=runtime.Immediate()
        )
        try:
            await qt.enqueue({"n": 1})
            with caplog.at_level(logging.WARNING, logger="runtime"):
                counts = await consumer.drain()
            # delivery 1 comes back at once (drain claims it again), delivery 2 is the cap
            assert counts == {"retry": 1, "dead_letter": 1}, counts
            (row,) = await qt.dead_rows()
            assert row["retry_after"] is None
            assert not [r for r in caplog.records if "retry_after column" in r.getMessage()]
        finally:
            await qt.drop()

    run(go())


_WITH_GROUP = ("attempt", "retry_after", "processed_at", "group")


@pytest.mark.parametrize("form", FORMS)
def test_plain_retries_under_immediate_share_one_decision_yet_keep_reasons_and_the_cap(
    engine, form
):
    # every plain retry() below the cap settles by one Decision the consumer keeps; a retry
    # with a reason, one at the cap, and one under a policy set since are decided each time
    async def go():
        columns = ("attempt", "retry_after", "processed_at", "last_error")
        qt = await make_queue(engine, form, columns=columns, dead="table", max_attempts=3)

        async def handle(message, ctx):
            n = message.payload["n"]
            if ctx.attempt == 1 or n == 0:
                return runtime.retry()  # n 0: at every delivery, so at the cap too
            if n == 1:
                return runtime.retry("upstream 503") if ctx.attempt == 2 else runtime.ack()
            return runtime.ack()

        consumer = runtime.Consumer(
            qt.url, qt.queue, handle, concurrency=1, retry_policy=runtime.Immediate()
        )
        try:
            await qt.enqueue(*({"n": n} for n in range(4)))
            counts = await consumer.drain()
            # n 0: retry, retry, dead letter at attempt 3; n 1: retry, retry with a reason,
            # ack; n 2 and 3: retry, ack
            assert counts == {"retry": 6, "ack": 3, "dead_letter": 1}, counts
            (dead,) = await qt.dead_rows()
            assert dead["payload"] == {"n": 0}
            assert dead["last_error"] == "the handler returned retry() without a reason"
            live = {r["payload"]["n"]: r for r in await qt.rows()}
            assert live[1]["last_error"] == "upstream 503"
            assert live[2]["last_error"] == "the handler returned retry() without a reason"
            # the policy set on the consumer since: retry() waits as it says
            consumer.retry_policy = runtime.ExponentialBackoff(base=3600, cap=3600, jitter=0)
            await qt.enqueue({"n": 4})
            assert await consumer.drain() == {"retry_after": 1}
            (waiting,) = [r for r in await qt.rows() if r["payload"]["n"] == 4]
            assert waiting["retry_after_future"] == 1
        finally:
            await qt.drop()

    run(go())


def test_a_queue_without_retry_after_retries_at_once_and_warns_once_at_start(engine, caplog):
    async def go():
        qt = await make_queue(engine, "lease", columns=("attempt", "processed_at"))
        plan = {}

        async def handle(message, ctx):
            plan[message.id] = plan.get(message.id, 0) + 1
            return runtime.retry() if plan[message.id] == 1 else runtime.ack()

        try:
            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1)
            assert isinstance(consumer.retry_policy, runtime.Immediate)
            with caplog.at_level(logging.WARNING, logger="runtime"):
                for n in range(2):
                    await qt.enqueue({"n": n})
                    assert await consumer.drain() == {"retry": 1, "ack": 1}
            said = [
                r
                for r in caplog.records
                if r.name == "runtime" and "declare columns.retry_after" in r.getMessage()
            ]
            assert len(said) == 1 and said[0].levelno == logging.WARNING, said
            assert qt.queue.name in said[0].getMessage()
            # Immediate() is the explicit choice: accepted, and nothing to warn about
            caplog.clear()
            quiet = runtime.Consumer(
                qt.url, qt.queue, handle, concurrency=1, retry_policy=runtime.Immediate()
            )
            await qt.enqueue({"n": 3})
            with caplog.at_level(logging.WARNING, logger="runtime"):
                assert await quiet.drain() == {"retry": 1, "ack": 1}
            assert not [r for r in caplog.records if "retry_after" in r.getMessage()]
        finally:
            await qt.drop()

    run(go())


def test_the_default_policy_is_one_second_doubling_to_an_hour_with_20_percent_jitter():
    from runtime.outcomes import default_retry_policy

    policy = default_retry_policy()
    assert (policy.base, policy.factor, policy.cap, policy.jitter) == (1, 2, 3600, 0.2)
    for attempt, full in [(None, 1), (1, 1), (2, 2), (3, 4), (12, 2048), (13, 3600), (10**6, 3600)]:
        delays = [policy.delay(attempt) for _ in range(200)]
        assert all(0.8 * full - 0.001 <= d <= full for d in delays), (attempt, min(delays))
        assert max(delays) - min(delays) > 0.05 * full  # jittered
    assert runtime.Immediate().delay(5) is None
    assert "Immediate" in runtime.__all__
