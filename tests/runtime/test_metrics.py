"""Observability: the Consumer's metrics hooks are called at claims, outcomes, lease
extensions, lost leases and reconnects, and its log records carry structured fields."""

from __future__ import annotations

import asyncio
import logging

import pytest
from support.engines import run
from support.queues import PAST, make_queue

import runtime

FORMS = ["row_lock", "lease", "advisory"]


class Recorder(runtime.Metrics):
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def on_claim(self, n):
        self.calls.append(("claim", n))

    def on_outcome(self, label, duration_s):
        self.calls.append(("outcome", label, duration_s))

    def on_lease_extended(self):
        self.calls.append(("extended",))

    def on_lease_lost(self):
        self.calls.append(("lost",))

    def on_reconnect(self):
        self.calls.append(("reconnect",))


@pytest.mark.parametrize("form", FORMS)
def test_hooks_hear_every_claim_and_outcome_and_logs_carry_fields(engine, form, caplog):
    async def go():
        qt = await make_queue(
            engine, form, columns=("attempt", "retry_after"), dead="group", max_attempts=1
        )
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})

            async def handle(message, ctx):
                n = message.payload["n"]
                if n == 2:
                    raise RuntimeError("boom")
                await asyncio.sleep(0.05 if n == 1 else 0)
                return runtime.ack() if n == 1 else runtime.drop()

            hooks = Recorder()
            consumer = runtime.Consumer(qt.url, qt.queue, handle, batch=2, metrics=hooks)
            with caplog.at_level(logging.DEBUG, logger="runtime"):
                counts = await consumer.drain()
            assert counts.outcomes == {"ack": 1, "dead_letter": 1, "drop": 1}
            claims = [c[1] for c in hooks.calls if c[0] == "claim"]
            assert sum(claims) == 3 and all(1 <= n <= 2 for n in claims)
            outcomes = sorted(c[1:] for c in hooks.calls if c[0] == "outcome")
            assert [label for label, _ in outcomes] == ["ack", "dead_letter", "drop"]
            assert all(d is not None and d >= 0 for _, d in outcomes)
            assert dict(outcomes)["ack"] >= 0.05  # the handler's run time
            raised = [r for r in caplog.records if "raised" in r.getMessage()]
            assert raised and raised[0].message_id == 2 and raised[0].queue == "q"
            assert raised[0].attempt == 1 and raised[0].outcome == "retry"
            assert raised[0].duration_s >= 0
            settled = {r.outcome: r for r in caplog.records if "settled" in r.getMessage()}
            assert set(settled) == {"ack", "dead_letter", "drop"}
            assert settled["ack"].duration_s >= 0.05 and settled["ack"].message_id == 1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["sqlite", "postgres"], indirect=True)
def test_hooks_hear_lease_extension_and_loss(engine):
    async def go():
        qt = await make_queue(engine, "lease", lease_s=0.6)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            sabotaged = []

            async def handle(message, ctx):
                if message.payload["n"] == 1:
                    await asyncio.sleep(1.0)  # past the first expiry: the lease is extended
                    return runtime.ack()
                if not sabotaged:  # once: the lease moves under this delivery (a new token)
                    sabotaged.append(message.id)
                    await qt.sql(
                        f"UPDATE {qt.q(qt.table)} SET {qt.col('locked_until')} = "
                        f"{PAST[engine.dialect_name]} WHERE {qt.col('id')} = {message.id}"
                    )
                return runtime.ack()

            hooks = Recorder()
            await runtime.Consumer(
                qt.url, qt.queue, handle, concurrency=2, batch=1, metrics=hooks
            ).drain()
            names = [c[0] for c in hooks.calls]
            assert "extended" in names and names.count("lost") >= 1
        finally:
            await qt.drop()

    run(go())


def test_a_hook_that_raises_is_logged_and_ignored(engine, caplog):
    class Broken(runtime.Metrics):
        def on_outcome(self, label, duration_s):
            raise ValueError("metrics backend down")

    async def go():
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue({"n": 1})

            async def ok(message, ctx):
                return runtime.ack()

            counts = await runtime.Consumer(qt.url, qt.queue, ok, metrics=Broken()).drain()
            assert counts.outcomes == {"ack": 1}
            assert any("metrics hook on_outcome raised" in r.getMessage() for r in caplog.records)
        finally:
            await qt.drop()

    run(go())
