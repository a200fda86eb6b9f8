"""The model on its own: SPEC.md's outcome table as worked examples, no database."""

from __future__ import annotations

import pytest
from support.model.outcome_model import DEAD_GROUP, FORMS, Delivery, OutcomeModel, Shape, lifecycle

pytestmark = pytest.mark.model


def deliver(m: OutcomeModel, worker: int = 0) -> Delivery:
    """The next delivery of the first ready row, by whatever the form claims with."""
    (d,) = m.claim(worker, 1)
    return d


@pytest.mark.parametrize("form", FORMS)
def test_every_form_counts_to_the_same_numbers(form: str) -> None:
    """ctx.attempt is 1, 2, …; the dead-letter row holds the number a next delivery would read."""
    m = OutcomeModel(
        Shape(form, attempt=True, retry_after=True, dead_letter="table", max_attempts=2)
    )
    m.enqueue({"n": 1})
    first = deliver(m)
    assert first.attempt == 1
    assert m.settle(first, "retry").label == "retry"
    if form == "row_lock":
        m.end_batch(0)
    second = deliver(m)
    assert second.attempt == 2
    settled = m.settle(second, "retry_after", "future")
    assert (settled.label, settled.warnings) == ("dead_letter", ("cap",))
    if form == "row_lock":
        m.end_batch(0)
    assert not m.rows
    assert m.dead[1].attempt == 3 and m.dead[1].payload == {"n": 1}
    assert m.dead[1].lease == ("none" if form == "lease" else None)


def test_max_attempts_1_moves_the_row_at_its_first_failure() -> None:
    m = OutcomeModel(Shape("lease", attempt=True, group=True, dead_letter="group", max_attempts=1))
    m.enqueue({})
    d = deliver(m)
    s = m.settle(d, "retry")
    assert (s.label, s.warnings) == ("dead_letter", ("cap",))
    assert m.rows[1].group == DEAD_GROUP and m.rows[1].lease == "none"
    assert m.claim(0, 1) == []  # the default group has nothing left


def test_retry_after_without_its_column_is_a_retry_with_a_warning() -> None:
    m = OutcomeModel(Shape("row_lock", attempt=True))
    m.enqueue({})
    s = m.settle(deliver(m), "retry_after", "future")
    assert (s.label, s.warnings) == ("retry", ("retry_after_without_column",))
    m.end_batch(0)
    assert m.rows[1].attempt == 2 and m.rows[1].retry_after is None


def test_ack_and_drop_keep_the_row_when_processed_at_exists() -> None:
    m = OutcomeModel(Shape("lease", processed_at=True))
    m.enqueue({})
    m.enqueue({})
    first, second = m.claim(0, 2)
    m.settle(first, "ack")
    m.settle(second, "drop")
    assert [(r.processed, r.lease) for r in m.rows.values()] == [(True, "none"), (True, "none")]
    assert m.claim(0, 2) == []


def test_a_stale_lease_settles_nothing() -> None:
    m = OutcomeModel(Shape("lease", attempt=True))
    m.enqueue({})
    stale = deliver(m)
    m.expire_lease(1)
    fresh = deliver(m)
    assert (stale.attempt, fresh.attempt) == (1, 2)
    assert m.settle(stale, "ack").lease_lost
    assert m.rows[1].holder == fresh.number
    assert not m.settle(fresh, "ack").lease_lost and not m.rows


def test_a_row_lock_rollback_undoes_the_whole_batch() -> None:
    m = OutcomeModel(Shape("row_lock", attempt=True, fifo_key=True))
    m.enqueue({})
    m.enqueue({})
    a, b = m.claim(0, 2)
    m.settle(a, "ack")
    m.settle(b, "retry", handler_wrote=True)
    assert m.committed()[0].keys() == {1, 2}
    m.abort_batch(0)
    assert [r.attempt for r in m.rows.values()] == [1, 1] and not m.writes


def test_row_lock_with_max_attempts_counts_at_the_claim_and_keeps_it() -> None:
    """The claim's count commits before the batch: a rollback keeps it and the row's mark
    (it returns when the mark runs out); a retry clears the mark and counts nothing more;
    the cap moves the row with the count the claims made."""
    shape = Shape("row_lock", attempt=True, retry_after=True, dead_letter="table", max_attempts=2)
    m = OutcomeModel(shape)
    m.enqueue({})
    (d,) = m.claim(0, 1)
    assert d.attempt == 1 and (m.rows[1].attempt, m.rows[1].retry_after) == (2, "future")
    assert m.committed()[0][1].attempt == 2  # another connection sees the count at once
    m.settle(d, "retry")
    m.abort_batch(0)  # the batch dies: the retry is undone, the count and the mark are not
    assert (m.rows[1].attempt, m.rows[1].retry_after) == (2, "future")
    assert m.claim(1, 1) == []
    m.make_due(1)
    (d,) = m.claim(1, 1)
    assert d.attempt == 2 and m.rows[1].attempt == 3
    assert m.settle(d, "retry").label == "dead_letter"
    m.end_batch(1)
    assert not m.rows and (m.dead[1].attempt, m.dead[1].retry_after) == (3, "future")
    group = OutcomeModel(
        Shape(
            "row_lock",
            attempt=True,
            retry_after=True,
            group=True,
            dead_letter="group",
            max_attempts=1,
        )
    )
    group.enqueue({})
    (d,) = group.claim(0, 1)
    assert group.settle(d, "retry_after", "future").label == "dead_letter"
    assert (group.rows[1].group, group.rows[1].retry_after) == (DEAD_GROUP, "none")
    group.enqueue({})
    group.end_batch(0)
    (d,) = group.claim(0, 1)
    group.return_unstarted(d)  # never started: the count undone, the mark cleared
    assert (group.rows[2].attempt, group.rows[2].retry_after) == (1, "none")


def test_the_handler_write_commits_with_an_ack_only() -> None:
    m = OutcomeModel(Shape("advisory", attempt=True))
    for _ in range(3):
        m.enqueue({})
    for outcome in ("ack", "drop", "retry"):
        d = deliver(m)
        m.settle(d, outcome, handler_wrote=True)
    assert m.writes == [1]


@pytest.mark.parametrize("form", FORMS)
def test_a_handler_returning_none_settles_as_an_ack(form: str) -> None:
    m = OutcomeModel(Shape(form, attempt=True, processed_at=True))
    m.enqueue({})
    m.enqueue({})
    d = deliver(m)
    assert m.settle(d, "none", handler_wrote=True).label == "ack"
    if form == "row_lock":
        m.end_batch(0)
    assert m.rows[d.id].processed and m.writes == [d.number]
    shape = Shape(form, attempt=True, retry_after=True, dead_letter="table", max_attempts=2)
    assert lifecycle(shape, ["retry", "none"]) == ("finished", 2)


def test_lifecycle_predicts_where_a_message_ends() -> None:
    for form in FORMS:
        shape = Shape(form, attempt=True, retry_after=True, dead_letter="table", max_attempts=3)
        assert lifecycle(shape, ["retry", "ack"]) == ("finished", 2)
        assert lifecycle(shape, ["retry", "retry_after", "retry"]) == ("dead_letter", 3)


def test_an_advisory_claim_keeps_the_first_free_keys_of_its_candidates() -> None:
    m = OutcomeModel(Shape("advisory", attempt=True))
    for n in range(5):
        m.enqueue({"n": n})
    first = m.claim(0, 2, scan=4)
    assert [d.id for d in first] == [1, 2] and not m.contended
    second = m.claim(1, 3, scan=3)  # rows 1-3 listed, 1 and 2 held by worker 0
    assert [d.id for d in second] == [3]
    m.settle(second[0], "ack")
    assert m.claim(1, 2, scan=2) == [] and m.contended  # ready rows, every key held
    assert m.rows[1].attempt == 2 and m.rows[4].attempt == 1  # counted at the take only


@pytest.mark.parametrize("form", FORMS)
def test_priority_orders_the_claim_then_id(form: str) -> None:
    m = OutcomeModel(Shape(form, priority=True))
    for p in (None, 5, 0, 5, -1):
        m.enqueue({}, priority=p)
    assert [d.id for d in m.claim(0, 3)] == [2, 4, 1]
    assert m.rows[1].priority == 0  # None stores the column's default


@pytest.mark.parametrize("form", FORMS)
def test_fifo_key_only_a_keys_head_is_claimable_until_it_finishes(form: str) -> None:
    m = OutcomeModel(
        Shape(
            form,
            attempt=True,
            retry_after=True,
            group=True,
            dead_letter="group",
            max_attempts=1,
            fifo_key=True,
        )
    )
    for key in ("a", "a", None, "b", "a"):
        m.enqueue({}, fifo_key=key)
    got = m.claim(0, 5)
    assert [d.id for d in got] == [1, 3, 4]
    # the head of "a" dies at the cap: the dead row (another group) no longer blocks
    for d in got:
        m.settle(d, "retry")
    if form == "row_lock":
        m.end_batch(0)
    assert m.rows[1].group == DEAD_GROUP
    assert [d.id for d in m.claim(1, 5)] == [2]


def test_fifo_key_another_batch_blocks_with_what_it_has_not_committed() -> None:
    """Row lock: a head acked in an open batch still blocks its key for other workers."""
    m = OutcomeModel(Shape("row_lock", fifo_key=True))
    m.enqueue({}, fifo_key="a")
    m.enqueue({}, fifo_key="a")
    (d,) = m.claim(0, 1)
    m.settle(d, "ack")
    assert m.claim(1, 5) == []
    m.end_batch(0)
    assert [x.id for x in m.claim(1, 5)] == [2]


def test_priority_and_fifo_key_within_a_key_id_order_wins() -> None:
    m = OutcomeModel(Shape("lease", priority=True, fifo_key=True))
    m.enqueue({}, priority=0, fifo_key="a")
    m.enqueue({}, priority=9, fifo_key="a")
    m.enqueue({}, priority=5, fifo_key="b")
    assert [d.id for d in m.claim(0, 5)] == [3, 1]


@pytest.mark.parametrize("form", FORMS)
def test_a_pending_key_returns_its_row_until_the_row_finishes_or_dies(form: str) -> None:
    m = OutcomeModel(
        Shape(form, attempt=True, group=True, dead_letter="group", max_attempts=1, dedupe_key=True)
    )
    first = m.enqueue({"n": 1}, key="k")
    assert m.enqueue({"n": 2}, key="k") == first and m.duplicate
    other_group = m.enqueue({"n": 3}, group="other", key="k")
    assert other_group != first and not m.duplicate
    d = deliver(m)
    assert m.settle(d, "retry").label == "dead_letter"  # at the cap: the key is free
    if form == "row_lock":
        m.end_batch(0)
    again = m.enqueue({"n": 4}, key="k")
    assert again not in (first, other_group) and not m.duplicate
    assert again == first + 3  # ids 1, (2 refused), 3, then 4: a refused insert takes an id


@pytest.mark.parametrize("form", FORMS)
def test_cancel_finishes_what_no_delivery_holds(form: str) -> None:
    m = OutcomeModel(Shape(form, processed_at=True))
    held_id, free_id = m.enqueue({"n": 1}), m.enqueue({"n": 2})
    d = m.claim(0, 1)[0]
    assert d.id == held_id
    assert m.cancel(held_id) is False and m.rows[held_id].processed is False
    assert m.cancel(free_id) is True and m.rows[free_id].processed is True
    assert m.cancel(free_id) is False and m.cancel(99) is False
    m.settle(d, "retry")
    if form == "row_lock":
        m.end_batch(0)
    assert m.cancel(held_id) is True


def test_an_ack_with_a_result_keeps_it_on_the_processed_row():
    m = OutcomeModel(Shape(form="lease", processed_at=True, result=True))
    m.enqueue({"n": 1})
    (d,) = m.claim(worker=0, limit=1)
    assert m.settle(d, "ack", result={"rows": 3}).warnings == ()
    row = m.rows[d.id]
    assert row.processed and row.result == {"rows": 3}
    # without the column the ack is a plain ack, with a warning
    plain = OutcomeModel(Shape(form="lease", processed_at=True))
    plain.enqueue({"n": 1})
    (d,) = plain.claim(worker=0, limit=1)
    assert plain.settle(d, "ack", result=1).warnings == ("result_without_column",)
    assert plain.rows[d.id].processed and plain.rows[d.id].result is None
