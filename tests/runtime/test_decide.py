"""decide: which statement settles an outcome, on the examples' rendered files (no database).

The cap turns a retry into the dead letter, a custom event names its statement or fails in
one line, retry_after without its column is a retry, and only an ack commits the handler's
writes."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

import runtime
from qgen.build import render_declaration
from qgen.declaration import parse_declaration
from runtime import settle
from runtime.contract.errors import UnknownCustomEvent
from runtime.delivery import Delivery, Message
from runtime.settle import acked, dead_letter_now, decide, params_of

SQL = Path(__file__).resolve().parents[2] / "generated_examples" / "sql" / "sqlite"


def load(name: str) -> runtime.Queue:
    queue = runtime.load(SQL / f"{name}.sql")
    assert isinstance(queue, runtime.Queue)
    return queue


def delivery(attempt: int | None, group: str | None = None) -> Delivery:
    return Delivery(message=Message(id=7, payload="{}", group=group), attempt=attempt, token="t")


def test_an_ack_commits_the_handlers_writes_and_binds_the_row_and_its_token() -> None:
    emails = load("emails")
    decision = decide(emails, delivery(1, "g"), runtime.ack())
    assert (decision.label, decision.step, decision.commits_handler_writes) == ("ack", "ack", True)
    params = params_of(emails, delivery(1, "g"), decision)
    assert (params["id"], params["token"], params["group"], params["attempt"]) == (7, "t", "g", 1)
    assert params["delay_s"] is None and params["error"] is None and "result" not in params


@pytest.fixture
def emails(tmp_path: Path) -> runtime.Queue:
    """A queue with a last_error column, so that a retry's reason is what its Decision binds."""
    raw = {
        "queues": {
            "emails": {
                "table": "emails",
                "form": "row_lock",
                "columns": {
                    "id": "id",
                    "payload": "payload",
                    "attempt": "attempt",
                    "retry_after": "retry_after",
                    "last_error": "last_error",
                },
            }
        }
    }
    ((path, text),) = render_declaration(
        parse_declaration(raw, tmp_path / "qgen.toml"), ["sqlite"], tmp_path
    ).items()
    path.parent.mkdir(parents=True)
    path.write_text(text)
    queue = runtime.load(path)
    assert isinstance(queue, runtime.Queue)
    return queue


def test_deliveries_settled_alike_share_one_decision_and_bind_their_own_rows(
    emails: runtime.Queue,
) -> None:
    first = Delivery(message=Message(id=1, payload="{}"), attempt=1, token="a")
    second = Delivery(message=Message(id=2, payload="{}"), attempt=2, token="b")
    assert decide(emails, first, runtime.ack()) is decide(emails, second, runtime.ack())
    assert decide(emails, first, runtime.ack()) is acked(emails)
    retried = decide(emails, first, runtime.retry("smtp down"))
    assert retried is decide(emails, second, runtime.retry("smtp down"))
    assert retried is not decide(emails, second, runtime.retry("smtp timed out"))
    assert decide(emails, first, runtime.retry_after(5)) is not decide(
        emails, first, runtime.retry_after(6)
    )
    one, two = params_of(emails, first, retried), params_of(emails, second, retried)
    assert (one["id"], one["token"], one["attempt"]) == (1, "a", 1)
    assert (two["id"], two["token"], two["attempt"]) == (2, "b", 2)
    assert one["error"] == two["error"] == "smtp down"
    with pytest.raises(dataclasses.FrozenInstanceError):
        retried.error = "changed"  # type: ignore[misc]


def test_the_table_of_shared_decisions_is_bounded_and_starts_over_when_full(
    emails: runtime.Queue,
) -> None:
    for n in range(3 * settle._SHARED_MAX):  # errors that name their row
        decision = decide(emails, delivery(1), runtime.retry(f"row {n} failed"))
        assert decision.error == f"row {n} failed"
        assert len(settle._SHARED) <= settle._SHARED_MAX
    assert decide(emails, delivery(1), runtime.ack()) is acked(emails)


def test_an_ack_with_a_result_binds_it_encoded_and_is_the_deliverys_own() -> None:
    invoices = load("invoices")
    decision = decide(invoices, delivery(1), runtime.ack(result={"n": 1}))
    assert (decision.label, decision.step, decision.commits_handler_writes) == (
        "ack",
        "ack_result",
        True,
    )
    assert params_of(invoices, delivery(1), decision)["result"] == '{"n":1}'
    assert decide(invoices, delivery(1), runtime.ack(result={"n": 1})) is not decision


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
    emails = load("emails")
    for outcome, delay in ((runtime.retry_after(42.5), 42.5), (runtime.retry(), None)):
        decision = decide(emails, delivery(1), outcome)
        assert decision.delay_s == params_of(emails, delivery(1), decision)["delay_s"] == delay


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
