"""Which files have ``ack_claim``, the claim that first finishes the last batch's acked rows:
PostgreSQL's advisory and lease files, except where finishing in the claim's statement would not be
what ``ack_many`` does or would step around what the claim must respect."""

from __future__ import annotations

from typing import Any

import pytest

from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.contract.rendered import parse_rendered

COLUMNS = {"id": "id", "payload": "payload", "attempt": "attempt"}
FORMS = ["advisory", "lease"]


def statements(dialect: str, form: str, **queue: Any) -> list[str]:
    columns = queue.pop("columns", COLUMNS)
    if form == "lease":
        columns = columns | {"locked_until": "locked_until"}
    decl = {"table": "jobs", "form": form, "columns": columns, **queue}
    parsed = parse_declaration({"dialects": [dialect], "queues": {"jobs": decl}})
    return list(parse_rendered(build_unit(parsed.queues["jobs"], dialect), "jobs.sql").statements)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("kept", [False, True], ids=["deleted", "processed_at"])
def test_a_postgres_file_has_ack_claim_after_claim(form: str, kept: bool) -> None:
    columns = COLUMNS | ({"processed_at": "processed_at"} if kept else {})
    names = statements("postgres", form, columns=columns)
    assert names[names.index("claim") + 1] == "ack_claim"


@pytest.mark.parametrize("form", [*FORMS, "row_lock"])
@pytest.mark.parametrize("dialect", ["mysql", "mariadb", "sqlite"])
def test_other_dialects_and_forms_have_none(dialect: str, form: str) -> None:
    assert "ack_claim" not in statements(dialect, form)
    # row lock settles in the claim's own transaction, one commit already
    assert "ack_claim" not in statements("postgres", "row_lock")


#: what keeps ack_claim out of a file, per form
WITHOUT = {
    # the table's own ack: ack_claim would finish rows another way
    "ack_override": lambda form: {
        "statements": {
            "ack": "DELETE FROM jobs WHERE id = :id"
            + (" AND locked_until = :token" if form == "lease" else "")
        }
    },
    # the limits run before the claim, which ack_claim would step around
    "rate_limit": lambda form: {"rate_limit": {"per_s": 10, "burst": 5}},
    "concurrency_limit": lambda form: {
        "columns": COLUMNS | {"concurrency_key": "concurrency_key"},
        "concurrency_limit": 2,
    },
    # the rows it finishes still hold their key in its snapshot
    "fifo_key": lambda form: {"columns": COLUMNS | {"fifo_key": "fifo_key"}},
    # finishing moves a row to another partition
    "partitioned": lambda form: {
        "columns": COLUMNS | {"processed_at": "processed_at"},
        "layout": "partitioned",
    },
}
CASES = [
    pytest.param(form, WITHOUT[why](form), id=f"{form}-{why}")
    for form in FORMS
    for why in WITHOUT
    if WITHOUT[why](form) is not None
]


@pytest.mark.parametrize(("form", "queue"), CASES)
def test_no_ack_claim_where_it_would_differ(form: str, queue: dict[str, Any]) -> None:
    names = statements("postgres", form, **dict(queue))
    assert "claim" in names and "ack_claim" not in names
