"""Which lease files have ``ack_claim``, the claim that first finishes the last batch's acked
rows: PostgreSQL's, except where finishing in the claim's statement would not be what
``ack_many`` does or would step around what the claim must respect."""

from __future__ import annotations

from typing import Any

import pytest

from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.contract.rendered import parse_rendered

COLUMNS = {"id": "id", "payload": "payload", "attempt": "attempt", "locked_until": "locked_until"}


def statements(dialect: str, **queue: Any) -> list[str]:
    decl = {"table": "jobs", "form": "lease", "columns": dict(COLUMNS), **queue}
    parsed = parse_declaration({"dialects": [dialect], "queues": {"jobs": decl}})
    return list(parse_rendered(build_unit(parsed.queues["jobs"], dialect), "jobs.sql").statements)


@pytest.mark.parametrize("kept", [False, True], ids=["deleted", "processed_at"])
def test_a_postgres_lease_file_has_ack_claim_after_claim(kept: bool) -> None:
    columns = COLUMNS | ({"processed_at": "processed_at"} if kept else {})
    names = statements("postgres", columns=columns)
    assert names[names.index("claim") + 1] == "ack_claim"


@pytest.mark.parametrize("dialect", ["mysql", "mariadb", "sqlite"])
def test_other_dialects_have_none(dialect: str) -> None:
    assert "ack_claim" not in statements(dialect)


@pytest.mark.parametrize(
    "queue",
    [
        # the table's own ack: ack_claim would finish rows another way
        {"statements": {"ack": "DELETE FROM jobs WHERE id = :id AND locked_until = :token"}},
        # the limits run before the claim, which ack_claim would step around
        {"max_in_flight": 4},
        {"rate_limit": {"per_s": 10, "burst": 5}},
        # the rows it finishes still hold their key in its snapshot
        {"columns": COLUMNS | {"fifo_key": "fifo_key"}},
        # finishing moves a row to another partition
        {"columns": COLUMNS | {"processed_at": "processed_at"}, "layout": "partitioned"},
    ],
    ids=["ack_override", "max_in_flight", "rate_limit", "fifo_key", "partitioned"],
)
def test_no_ack_claim_where_it_would_differ(queue: dict[str, Any]) -> None:
    names = statements("postgres", **queue)
    assert "claim" in names and "ack_claim" not in names
