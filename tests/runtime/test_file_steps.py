"""A loaded file's steps (``queue.steps``, runtime.contract.file_steps): built once at load,
and a file without a statement its header's form, columns or settings need is refused there,
naming the file, the statement and `qgen render`, never at the first claim that needs it."""

from __future__ import annotations

from pathlib import Path

import pytest

import runtime
from runtime.contract.errors import RenderedFileError
from runtime.contract.file_steps import QueueSteps
from runtime.contract.rendered import Block, read_rendered, write_file

EXAMPLES = Path(__file__).resolve().parents[2] / "generated_examples" / "sql"


def without(tmp_path: Path, example: str, name: str) -> Path:
    """The example's file, sealed as `qgen render` writes it, without statement ``name``."""
    rendered = read_rendered(EXAMPLES / example)
    assert name in rendered.statements
    blocks = [
        Block(n, f"the {n} statement", step) for n, step in rendered.statements.items() if n != name
    ]
    path = tmp_path / Path(example).name
    path.write_text(write_file(rendered.header, blocks), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("example", "name", "why"),
    [
        # every queue
        ("sqlite/audit.sql", "claim", "every queue"),
        # row lock with a dead letter, attempt and retry_after: the counted claim's take
        ("sqlite/invoices.sql", "take", "row_lock form"),
        ("postgres/reports.sql", "unclaim", "row_lock form"),
        # lease
        ("sqlite/pings.sql", "extend", "lease form"),
        ("mariadb/emails.sql", "release", "lease form"),
        # advisory: take everywhere, unlock where a server holds the keys
        ("sqlite/exports.sql", "take", "advisory form"),
        ("postgres/webhooks.sql", "unlock", "advisory form on postgres"),
        # what declared columns need
        ("sqlite/emails.sql", "retry_after", "retry_after column"),
        ("sqlite/emails.sql", "next_due", "retry_after column"),
        ("postgres/invoices.sql", "ack_result", "result column"),
        ("sqlite/webhooks.sql", "progress", "progress column"),
        ("mysql/orders.sql", "enqueue_existing", "dedupe_key column"),
        # what the header's settings need
        ("sqlite/orders.sql", "dead_letter", "dead letter (group orders_dead)"),
        ("postgres/audit.sql", "listen", "channel"),
        ("sqlite/reports.sql", "schedule_fire", "schedules"),
        ("sqlite/audit.sql", "pause", "pause table"),
        # an outbox
        ("sqlite/outbox.sql", "mark", "every outbox"),
    ],
)
def test_a_file_missing_a_needed_statement_is_refused_at_load(
    tmp_path: Path, example: str, name: str, why: str
) -> None:
    path = without(tmp_path, example, name)
    with pytest.raises(RenderedFileError) as caught:
        runtime.load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: has no '{name}' statement")
    assert why in message
    assert "render it again with `qgen render`" in message


def test_a_statement_only_some_files_hold_may_be_missing(tmp_path: Path) -> None:
    """A row-lock queue without a dead letter claims in one step: no take, no unclaim; an
    operation absent from the file is None, refused when used."""
    queue = runtime.load(EXAMPLES / "sqlite" / "audit.sql")
    assert isinstance(queue, runtime.Queue)
    assert queue.steps.take is None and queue.steps.unclaim is None
    # the console's chart, which only a table with processed_at has: loads without it
    queue = runtime.load(without(tmp_path, "sqlite/invoices.sql", "finished_per_minute"))
    assert isinstance(queue, runtime.Queue) and queue.steps.finished_per_minute is None


@pytest.mark.parametrize(
    "path", sorted(EXAMPLES.rglob("*.sql")), ids=lambda p: f"{p.parent.name}/{p.stem}"
)
def test_every_complete_file_loads_with_its_statements_as_steps(path: Path) -> None:
    loaded = runtime.load(path)
    statements = loaded.rendered.statements
    steps = loaded.steps
    assert steps.schema == statements["schema"]
    assert steps.columns == statements["columns"]
    assert dict(steps.custom) == {
        n.removeprefix("custom."): s for n, s in statements.items() if n.startswith("custom.")
    }
    if not isinstance(steps, QueueSteps):
        assert loaded.rendered.header.kind == "outbox"
        return
    assert steps.claim == statements["claim"]
    assert steps.extend == statements.get("extend")
    assert steps.take == statements.get("take")
    assert steps.retry_after == statements.get("retry_after")
    # a settlement's step by the name its decision carries; an outcome's _many by the outcome
    for name, step in steps.settle.items():
        assert step == statements[name]
    assert set(steps.settle) >= {"ack", "drop"}
    assert {f"{n}_many" for n in steps.many} == {n for n in statements if n.endswith("_many")}
    for name, step in steps.many.items():
        assert step == statements[f"{name}_many"]
