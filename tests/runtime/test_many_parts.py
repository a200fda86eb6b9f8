"""The grouping of settlements (``Form.many_parts``): a group of decided deliveries cut into
what one statement settles, on the examples' rendered files (no database).

One ``<outcome>_many`` statement per outcome, delay and error where the file has it; alone
what has none (a declared override, a custom event, a move into a dead-letter table); every
delivery alone when a row appears twice; each keeps its index in the group."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import runtime
from runtime.delivery import Delivery, Message
from runtime.forms import form_for
from runtime.settle import Decision, dead_letter_now, decide

SQL = Path(__file__).resolve().parents[2] / "generated_examples" / "sql" / "sqlite"


def group(queue_name: str, *outcomes: Any, ids: list[int] | None = None) -> tuple[Any, list]:
    queue = runtime.load(SQL / f"{queue_name}.sql")
    assert isinstance(queue, runtime.Queue)
    form = form_for(queue)
    items: list[tuple[Delivery, Decision]] = []
    for n, outcome in enumerate(outcomes):
        d = Delivery(message=Message(id=ids[n] if ids else n + 1, payload="{}"), attempt=1)
        if outcome == "dead_letter":
            decision = dead_letter_now(queue, d, "cannot be decoded")
            assert decision is not None
        else:
            decision = decide(queue, d, outcome)
        items.append((d, decision))
    return form, items


def shape(form: Any, parts: list) -> list[tuple[str | None, list[int]]]:
    """Each part as the name of the statement it runs (None: each delivery its own)."""
    # by identity: two statements may read the same (ack_many and drop_many delete alike)
    names = {id(step): name for name, step in form.queue.rendered.statements.items()}
    return [
        (None if step is None else names[id(step)], [i for i, _, _ in part]) for step, part in parts
    ]


def test_one_statement_per_outcome_and_alone_what_has_no_many_statement() -> None:
    # orders: drop is a declared override and park a custom event, neither has a _many
    form, items = group(
        "orders",
        runtime.ack(),
        runtime.drop(),
        runtime.retry(),
        runtime.ack(),
        runtime.custom("park"),
        runtime.retry(),
    )
    parts = form.many_parts(items)
    assert shape(form, parts) == [
        ("ack_many", [0, 3]),
        ("retry_many", [2, 5]),
        (None, [1]),
        (None, [4]),
    ]
    assert form.needs_transaction(parts)


def test_each_delay_is_a_statement_of_its_own() -> None:
    form, items = group(
        "orders", runtime.retry_after(5), runtime.retry_after(60), runtime.retry_after(5)
    )
    parts = form.many_parts(items)
    assert shape(form, parts) == [("retry_after_many", [0, 2]), ("retry_after_many", [1])]
    assert [form.many_params(part)["delay_s"] for _, part in parts] == [5, 60]


def test_a_dead_letter_table_moves_rows_one_by_one_a_dead_group_together() -> None:
    form, items = group("emails", "dead_letter", "dead_letter", runtime.ack())
    assert shape(form, form.many_parts(items)) == [("ack_many", [2]), (None, [0]), (None, [1])]
    form, items = group("orders", "dead_letter", "dead_letter")
    parts = form.many_parts(items)
    assert shape(form, parts) == [("dead_letter_many", [0, 1])]
    assert form.many_params(parts[0][1])["dead_group"] == "orders_dead"


def test_a_row_twice_in_a_group_settles_every_delivery_alone() -> None:
    # one statement cannot tell two tokens of one row apart
    form, items = group("orders", runtime.ack(), runtime.ack(), runtime.ack(), ids=[4, 5, 4])
    assert shape(form, form.many_parts(items)) == [(None, [0]), (None, [1]), (None, [2])]


def test_one_statement_needs_no_transaction_of_its_own() -> None:
    form, items = group("orders", runtime.ack(), runtime.ack())
    assert not form.needs_transaction(form.many_parts(items))
    form, items = group("orders", runtime.drop())
    assert not form.needs_transaction(form.many_parts(items))
    form, items = group("orders", runtime.ack(), runtime.drop())
    assert form.needs_transaction(form.many_parts(items))


def test_copies_of_a_decision_group_as_the_shared_one_does() -> None:
    # a group of one shared Decision is one part without a key per item; Decisions equal in
    # all but identity take the general path, and must come out the same
    form, items = group("orders", *[runtime.retry_after(5)] * 4)
    assert all(decision is items[0][1] for _, decision in items)
    shared = form.many_parts(items)
    copies = [(d, dataclasses.replace(decision)) for d, decision in items]
    assert shape(form, form.many_parts(copies)) == shape(form, shared)
    assert shape(form, shared) == [("retry_after_many", [0, 1, 2, 3])]
    assert form.many_params(shared[0][1])["delay_s"] == 5


def test_a_group_that_starts_shared_and_then_differs_is_cut_by_outcome() -> None:
    form, items = group("orders", runtime.ack(), runtime.ack(), runtime.retry(), runtime.ack())
    assert shape(form, form.many_parts(items)) == [("ack_many", [0, 1, 3]), ("retry_many", [2])]
    # orders' drop is a declared override: no drop_many, so a group of drops is each alone
    form, items = group("orders", runtime.drop(), runtime.drop())
    assert shape(form, form.many_parts(items)) == [(None, [0]), (None, [1])]
