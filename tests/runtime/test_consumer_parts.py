"""The consumer's parts on their own: the handler invocation policy it shares with the outbox
relay (runtime.handler), and its settings, checked once (runtime.loop.ConsumerSettings).

Real handlers called through the policy; a real SQLite connection where ``ctx.db`` matters.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from support.engines import engine_for, run
from support.queues import make_queue

import runtime
from runtime.connect import connect
from runtime.contract.errors import ConnectionLost, InvalidArgument
from runtime.delivery import Ctx, Message
from runtime.handler import Invocation, check_timeout
from runtime.loop import ConsumerSettings
from runtime.outcomes import Outcome, OutcomeKind

MESSAGE: Message[Any] = Message(7, {"n": 1})


def call(handle: Any, ctx: Ctx | None = None, **policy: Any) -> Outcome:
    invocation = Invocation(handle, name="jobs", **policy)
    return run(invocation(MESSAGE, ctx or Ctx(attempt=1)))


# ------------------------------------------------------------------ returns


def test_an_outcome_decides_and_none_acks() -> None:
    async def drop(message: Message[Any], ctx: Ctx) -> Outcome:
        return runtime.drop()

    async def nothing(message: Message[Any], ctx: Ctx) -> None:
        return None

    assert call(drop).kind is OutcomeKind.DROP
    assert call(nothing) == runtime.ack()


def test_a_value_that_is_not_an_outcome_is_a_retry_naming_its_type(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def done(message: Message[Any], ctx: Ctx) -> Any:
        return "done"

    with caplog.at_level(logging.ERROR, logger="runtime"):
        outcome = call(done)
    assert outcome.kind is OutcomeKind.RETRY
    assert outcome.reason == "the handler returned str, not an outcome"
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("queue jobs: handler for message 7 returned str 'done'"), line


def test_a_plain_def_runs_in_a_worker_thread() -> None:
    loop_thread = threading.get_ident()
    ran_on: list[int] = []

    def handle(message: Message[Any], ctx: Ctx) -> Outcome:
        ran_on.append(threading.get_ident())
        time.sleep(0.01)  # blocking is allowed here
        return runtime.retry_after(5)

    invocation = Invocation(handle, name="jobs")
    assert invocation.sync
    outcome = run(invocation(MESSAGE, Ctx(attempt=1)))
    assert outcome.kind is OutcomeKind.RETRY_AFTER and outcome.delay_s == 5
    assert ran_on and ran_on[0] != loop_thread


def test_a_plain_def_that_returns_a_coroutine_has_it_awaited() -> None:
    async def later() -> Outcome:
        return runtime.drop()

    def handle(message: Message[Any], ctx: Ctx) -> Any:
        return later()

    assert Invocation(handle).sync
    assert call(handle).kind is OutcomeKind.DROP


# ------------------------------------------------------------------- raises


def test_an_exception_is_a_retry_with_its_type_and_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def boom(message: Message[Any], ctx: Ctx) -> Outcome:
        raise KeyError("user_id")

    with caplog.at_level(logging.ERROR, logger="runtime"):
        outcome = call(boom)
    assert outcome.kind is OutcomeKind.RETRY and outcome.reason == "KeyError: 'user_id'"
    (record,) = caplog.records
    assert record.getMessage() == "queue jobs: handler for message 7 raised: taken as retry()"
    assert record.exc_info is not None and record.__dict__["outcome"] == "retry"


def test_a_handler_past_its_timeout_is_a_retry_saying_so() -> None:
    async def slow(message: Message[Any], ctx: Ctx) -> Outcome:
        await asyncio.sleep(5)
        return runtime.ack()

    def blocking(message: Message[Any], ctx: Ctx) -> Outcome:
        time.sleep(0.3)
        return runtime.ack()

    for handle in (slow, blocking):
        began = time.monotonic()
        outcome = call(handle, timeout=0.1)
        assert outcome.kind is OutcomeKind.RETRY, handle
        assert outcome.reason == "handler timed out after 0.1 s"
        assert time.monotonic() - began < 2


@pytest.mark.parametrize("timeout", [10, None])
def test_a_timeout_error_the_handler_raises_itself_keeps_its_own_reason(
    timeout: float | None, caplog: pytest.LogCaptureFixture
) -> None:
    async def own(message: Message[Any], ctx: Ctx) -> Outcome:
        raise TimeoutError("upstream took too long")

    with caplog.at_level(logging.ERROR, logger="runtime"):
        outcome = call(own, timeout=timeout)
    assert outcome.reason == "TimeoutError: upstream took too long"
    # logged as the exception it is, with its traceback, not as a timeout of the call
    said = [r.getMessage() for r in caplog.records]
    assert said and not any("ran past" in m for m in said), said
    assert any(r.exc_info for r in caplog.records)


def test_a_cancelled_error_from_the_handler_is_a_retry_but_cancelling_the_caller_is_not() -> None:
    async def gives_up(message: Message[Any], ctx: Ctx) -> Outcome:
        raise asyncio.CancelledError()

    assert call(gives_up).reason == "CancelledError"

    started = asyncio.Event()

    async def hangs(message: Message[Any], ctx: Ctx) -> Outcome:
        started.set()
        await asyncio.sleep(30)
        return runtime.ack()

    async def go() -> None:
        task = asyncio.create_task(Invocation(hangs)(MESSAGE, Ctx(attempt=1)))
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    run(go())


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit])
def test_keyboard_interrupt_or_system_exit_is_handed_to_on_fatal(
    fatal: type[BaseException], caplog: pytest.LogCaptureFixture
) -> None:
    stopped: list[BaseException] = []

    async def quits(message: Message[Any], ctx: Ctx) -> Outcome:
        raise fatal()

    with caplog.at_level(logging.ERROR, logger="runtime"):
        outcome = call(quits, on_fatal=stopped.append, owner="relay", noun="record")
    assert outcome.kind is OutcomeKind.RETRY
    assert [type(e) for e in stopped] == [fatal]
    assert f"raised {fatal.__name__}: stopping the relay (the record is" in caplog.text


def test_connection_lost_propagates_only_when_ctx_db_is_closed(tmp_path: Path) -> None:
    async def lost(message: Message[Any], ctx: Ctx) -> Outcome:
        raise ConnectionLost("gone")

    async def go() -> None:
        conn = await connect(f"sqlite:///{tmp_path / 'x.db'}?mode=rwc")
        try:
            # the handler's own connection to something else was lost: a retry
            outcome = await Invocation(lost)(MESSAGE, Ctx(attempt=1, db=conn))
            assert outcome.reason == "ConnectionLost: gone"
        finally:
            await conn.close()
        # the caller's connection (ctx.db) is gone: the caller's connection loss
        with pytest.raises(ConnectionLost):
            await Invocation(lost)(MESSAGE, Ctx(attempt=1, db=conn))

    run(go())


def test_a_timeout_must_be_above_zero() -> None:
    assert check_timeout(None) is None and check_timeout(0.5) == 0.5
    for bad in (0, -1, float("nan"), "5", True):
        with pytest.raises(InvalidArgument, match="handler_timeout must be a number of seconds"):
            Invocation(lambda m, c: None, timeout=bad)


# ------------------------------------------------------------------ settings


def test_settings_are_checked_once_with_one_line_naming_each() -> None:
    bad: dict[str, Any] = {
        "concurrency": 0,
        "batch": 2.5,
        "poll_interval": 0,
        "max_poll_interval": float("nan"),
        "handler_timeout": -1,
        "stop_timeout": -0.1,
        "settle_window": "0.02",
        "outage_timeout": -1,
        "max_reconnect_interval": 0,
        "transactional": "yes",
        "schedules": 1,
        "group": 5,
        "retry_policy": 3,
    }
    for name, value in bad.items():
        with pytest.raises(InvalidArgument) as caught:
            ConsumerSettings(**{name: value})
        text = str(caught.value)
        assert name in text and "\n" not in text, text
    assert ConsumerSettings().batch == 10


def test_consumer_settings_after_handle_are_keyword_only() -> None:
    queue = runtime.Queue.__new__(runtime.Queue)

    async def ack(message: Message[Any], ctx: Ctx) -> None:
        return None

    with pytest.raises(TypeError):
        runtime.Consumer("sqlite://", queue, ack, "a-group")  # type: ignore[misc]
    with pytest.raises(InvalidArgument, match="concurrency"):
        runtime.Consumer("sqlite://", queue, ack, concurrency=0)


def test_a_setting_changed_on_the_consumer_is_checked_again(tmp_path: Path) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("sqlite", tmp_path), "lease")
        try:
            consumer = runtime.Consumer(qt.url, qt.queue, lambda m, c: None, batch=4)
            assert consumer.batch == 4 == consumer.settings.batch
            consumer.batch = 1
            assert consumer.settings.batch == 1
            with pytest.raises(InvalidArgument, match="batch"):
                consumer.batch = 0
            assert consumer.batch == 1
        finally:
            await qt.drop()

    run(go())
