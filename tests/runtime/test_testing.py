"""runtime.testing: the harness a service tests its handlers with, on the real rendered SQL.

The harness runs on every engine (a namespace of its own per test); the pytest plugin runs
in a pytest of its own over a user's test file, as a service would enable it.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, engine_params, run
from support.statements import create_namespace, drop_namespace

import runtime
from runtime.testing import Harness, SyncHarness

REPO = Path(__file__).resolve().parents[2]
SQL = REPO / "generated_examples" / "sql"


def harness(engine: Engine, queue: str) -> tuple[SyncHarness, str]:
    name, url = run(create_namespace(engine))
    return Harness(SQL / engine.dialect_name / f"{queue}.sql", url).sync, name


def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome | None:
    """A plain def: ok acks, boom raises, drop drops, park is the orders queue's custom event."""
    kind = message.payload["k"]
    if kind == "boom":
        raise RuntimeError("boom")
    if kind == "drop":
        return runtime.drop()
    if kind == "park":
        return runtime.custom("park")
    return None


@pytest.mark.parametrize("engine", engine_params(), indirect=True)
def test_drain_settles_every_outcome_and_retries_to_the_dead_letter_without_sleeping(
    engine: Engine,
) -> None:
    h, name = harness(engine, "orders")
    try:
        ids = {k: h.enqueue({"k": k}) for k in ("ok", "boom", "drop", "park")}
        later = h.enqueue({"k": "later"}, delay=3600)

        first = h.drain(handle)
        assert first.outcomes == {
            ids["ok"]: "ack",
            ids["boom"]: "retry_after",  # the default policy backs off
            ids["drop"]: "drop",
            ids["park"]: "custom.park",
        }
        assert [type(e) for e in first.raised] == [RuntimeError]
        # the retry and the delayed enqueue wait; nothing else is pending
        h.assert_counts(ready=0, delayed=2, processed=1, dead=0)
        h.assert_enqueued({"k": "later"}, 1, delayed=True)
        h.assert_enqueued({"k": "boom"}, 1)

        started = time.monotonic()
        rest = h.drain(handle, include_delayed=True)
        took = time.monotonic() - started
        # 1 + 2 + 4 + 8 s of backoff and an hour's delay, travelled in a moment
        assert took < 10, took
        boom = rest.of(ids["boom"])
        assert [(s.attempt, s.outcome) for s in boom] == [
            (2, "retry_after"),
            (3, "retry_after"),
            (4, "retry_after"),
            (5, "dead_letter"),  # max_attempts 5
        ]
        assert all(isinstance(s.raised, RuntimeError) for s in boom)
        assert rest.outcomes[later] == "ack"
        assert rest[-1].id == later  # due last: after the retries' backoff
        h.assert_counts(ready=0, delayed=0, in_flight=0, dead=1, processed=2)
        assert [(r["id"], r["payload"]) for r in h.dead()] == [(ids["boom"], {"k": "boom"})]
        assert h.pending() == []
    finally:
        run(drop_namespace(engine, name))


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres", "mariadb"), indirect=True)
def test_advance_brings_delayed_messages_nearer_by_the_given_time(engine: Engine) -> None:
    h, name = harness(engine, "invoices")  # row lock
    try:
        h.enqueue({"n": 1}, delay=100)
        h.enqueue({"n": 2}, delay=10)
        h.enqueue({"n": 3})
        assert h.advance(30) == 2  # the ready one is not delayed: untouched
        due = {r["payload"]["n"]: r["due_s"] for r in h.pending()}
        assert 65 < due[1] <= 70 and due[2] == 0 and due[3] in (0, None)
        assert h.drain(lambda m, ctx: None).counts == {"ack": 2}
        h.assert_enqueued({"n": 1}, 1, delayed=True)
    finally:
        run(drop_namespace(engine, name))


def test_failures_say_what_is_there_instead(tmp_path: Path) -> None:
    h = Harness(SQL / "sqlite" / "orders.sql", f"sqlite:///{tmp_path}/q.db?mode=rwc").sync
    h.enqueue({"order": 1})
    h.enqueue({"order": 2}, delay=60)
    with pytest.raises(AssertionError) as err:
        h.assert_enqueued({"order": 3})
    assert str(err.value) == (
        "queue 'orders': expected at least 1 pending message(s) with payload {'order': 3}, "
        "found 0; pending: [id 1: {'order': 1}, attempt 1] [id 2: {'order': 2}, attempt 1, "
        "due in 60 s]"
    )
    with pytest.raises(AssertionError, match=r"expected 2 pending .* found 1"):
        h.assert_enqueued({"order": 1}, 2)
    assert [r["id"] for r in h.assert_enqueued(count=1, delayed=False)] == [1]
    with pytest.raises(AssertionError, match=r"expected 2 claimable .* payload any, found 1"):
        h.assert_enqueued(count=2, delayed=False)
    with pytest.raises(AssertionError) as err:
        h.assert_counts(ready=2)
    assert "expected ready=2, have ready=1 (all: ready=1, delayed=1, in_flight=0" in str(err.value)
    with pytest.raises(TypeError, match="no state 'done'"):
        h.assert_counts(done=1)


def test_a_table_with_rows_is_refused_at_setup(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/q.db?mode=rwc"
    Harness(SQL / "sqlite" / "orders.sql", url).sync.enqueue({"order": 1})
    with pytest.raises(AssertionError, match=r"already holds rows \(ready=1\): give each test"):
        Harness(SQL / "sqlite" / "orders.sql", url).sync.setup()


def test_a_handler_that_never_finishes_is_stopped(tmp_path: Path) -> None:
    # audit: no attempt column, no cap, no retry_after: a retry is delivered again at once
    h = Harness(SQL / "sqlite" / "audit.sql", f"sqlite:///{tmp_path}/q.db?mode=rwc").sync
    h.enqueue({"n": 1})

    def always_fails(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        return runtime.retry()

    with pytest.raises(AssertionError, match=r"the handler ran 20 times .*max_deliveries=20"):
        h.drain(always_fails, max_deliveries=20)


def test_async_handlers_transactional_mode_and_raise_errors(tmp_path: Path) -> None:
    h = Harness(SQL / "sqlite" / "reports.sql", f"sqlite:///{tmp_path}/q.db?mode=rwc")

    async def scenario() -> None:
        seen: list[Any] = []

        async def record(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
            assert ctx.db is not None  # transactional: the settlement's connection
            seen.append(message.payload)
            return runtime.ack()

        await h.enqueue({"n": 1})
        drained = await h.drain(record, transactional=True)
        assert (drained.outcomes, seen) == ({1: "ack"}, [{"n": 1}])

        async def broken(message: runtime.Message, ctx: runtime.Ctx) -> None:
            raise KeyError("missing")

        await h.enqueue({"n": 2})
        with pytest.raises(KeyError, match="missing"):
            await h.drain(broken, raise_errors=True)
        # a sync harness inside an event loop says what to use instead
        with pytest.raises(RuntimeError, match="use the async harness"):
            h.sync.stats()

    asyncio.run(scenario())


USER_TESTS = """
import runtime

pytest_plugins = ["runtime.testing"]
ORDERS = {orders!r}


def ship(message, ctx):
    if message.payload["item"] == "broken":
        raise ValueError("no such item")


def test_shipped(qgen_harness):
    orders = qgen_harness(ORDERS)
    orders.enqueue({{"item": "tea"}})
    orders.enqueue({{"item": "broken"}})
    drained = orders.drain(ship, include_delayed=True)
    assert drained.outcomes == {{1: "ack", 2: "dead_letter"}}
    orders.assert_counts(processed=1, dead=1)


def test_enqueued_wrong(qgen_harness):
    orders = qgen_harness(ORDERS)
    orders.enqueue({{"item": "tea"}})
    orders.assert_enqueued({{"item": "cups"}})


async def scenario(h):
    await h.enqueue({{"item": "pot"}})
    assert (await h.drain(ship)).counts == {{"ack": 1}}


def test_async(qgen_async_harness):
    import asyncio

    asyncio.run(scenario(qgen_async_harness(ORDERS)))
"""


def test_the_pytest_plugin_in_a_users_test_run(tmp_path: Path) -> None:
    (tmp_path / "test_user.py").write_text(
        USER_TESTS.format(orders=str(SQL / "sqlite" / "orders.sql"))
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"},
    )
    out = done.stdout
    assert "1 failed, 2 passed" in out, out
    assert (
        "AssertionError: queue 'orders': expected at least 1 pending message(s) with payload "
        "{'item': 'cups'}, found 0; pending: [id 1: {'item': 'tea'}, attempt 1]"
    ) in out, out
