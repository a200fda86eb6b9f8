"""decide: which statement settles an outcome, on the examples' rendered files (no database).

The cap turns a retry into the dead letter, a custom event names its statement or fails in
one line, retry_after without its column is a retry, and only an ack commits the handler's
writes."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import runtime
from runtime.contract.errors import UnknownCustomEvent
from runtime.delivery import Delivery, Message
from runtime.settle import dead_letter_now, decide

SQL = Path(__file__).resolve().parents[2] / "generated_examples" / "sql" / "sqlite"


def load(name: str) -> runtime.Queue:
    queue = runtime.load(SQL / f"{name}.sql")
    assert isinstance(queue, runtime.Queue)
    return queue


def delivery(attempt: int | None, group: str | None = None) -> Delivery:
    return Delivery(message=Message(id=7, payload="{}", group=group), attempt=attempt, token="t")


def test_an_ack_commits_the_handlers_writes_and_binds_the_row_and_its_token() -> None:
    decision = decide(load("emails"), delivery(1, "g"), runtime.ack())
    assert (decision.label, decision.step, decision.commits_handler_writes) == ("ack", "ack", True)
    assert decision.params["id"] == 7 and decision.params["token"] == "t"
    assert decision.params["group"] == "g"


@pytest.mark.parametrize("outcome", [runtime.drop(), runtime.retry(), runtime.retry_after(5)])
def test_no_other_outcome_commits_the_handlers_writes(outcome: runtime.Outcome) -> None:
    decision = decide(load("emails"), delivery(1), outcome)
    assert decision.step == decision.label == outcome.kind.value
    assert not decision.commits_handler_writes


@pytest.mark.parametrize("outcome", [runtime.retry(), runtime.retry_after(60)])
def test_a_retry_at_the_cap_is_the_dead_letter_and_below_it_is_not(
    outcome: runtime.Outcome,
) -> None:
    emails = load("emails")  # max_attempts = 3
    assert emails.max_attempts == 3
    assert decide(emails, delivery(2), outcome).step == outcome.kind.value
    for attempt in (3, 4):
        decision = decide(emails, delivery(attempt), outcome)
        assert decision.label == decision.step == "dead_letter"
        assert not decision.commits_handler_writes


def test_a_retry_after_binds_its_delay() -> None:
    assert decide(load("emails"), delivery(1), runtime.retry_after(42.5)).params["delay_s"] == 42.5
    assert decide(load("emails"), delivery(1), runtime.retry()).params["delay_s"] is None


def test_a_table_without_attempt_never_reaches_a_cap() -> None:
    pings = load("pings")  # no attempt column, no max_attempts
    decision = decide(pings, delivery(None), runtime.retry())
    assert decision.step == "retry"


def test_retry_after_without_its_column_is_a_retry_and_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.WARNING, logger="runtime"):
        decision = decide(load("pings"), delivery(None), runtime.retry_after(30))
    assert decision.label == decision.step == "retry"
    assert "taken as retry()" in caplog.text and "message 7" in caplog.text


def test_a_custom_event_runs_its_statement_and_an_unknown_one_names_the_declared() -> None:
    orders = load("orders")
    decision = decide(orders, delivery(1), runtime.custom("park"))
    assert decision.label == decision.step == "custom.park"
    assert not decision.commits_handler_writes
    with pytest.raises(UnknownCustomEvent, match=r"no custom event 'nope' \(declared: park\)"):
        decide(orders, delivery(1), runtime.custom("nope"))
    with pytest.raises(UnknownCustomEvent, match=r"\(declared: none\)"):
        decide(load("emails"), delivery(1), runtime.custom("park"))


def test_a_row_lock_retry_without_attempt_has_no_statement() -> None:
    # the audit table has no attempt and no retry_after: a retry is the rollback of the claim
    decision = decide(load("audit"), delivery(None), runtime.retry())
    assert decision.label == "retry" and decision.step is None


def test_dead_letter_now_whatever_the_attempt_and_none_without_a_dead_letter() -> None:
    decision = dead_letter_now(load("emails"), delivery(1), "cannot be decoded")
    assert decision is not None
    assert decision.label == decision.step == "dead_letter"
    assert dead_letter_now(load("pings"), delivery(None), "cannot be decoded") is None
