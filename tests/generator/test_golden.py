"""Golden files: each tests/golden/<case>/qgen.toml renders byte for byte to the files under
tests/golden/<case>/expected/<dialect>/<queue>.sql, small enough for a reviewer to read.

After a deliberate change to the templates, rewrite them with

    QGEN_UPDATE_GOLDEN=1 python -m pytest tests/generator/test_golden.py

and review the diff of tests/golden/ like any other change.
"""

from __future__ import annotations

import difflib
import os
import shutil
from pathlib import Path

import pytest

from qgen.build import render_declaration
from qgen.declaration import load_declaration
from runtime.contract.rendered import read_rendered

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
CASES = sorted(p.parent.name for p in GOLDEN.glob("*/qgen.toml"))
UPDATE = os.environ.get("QGEN_UPDATE_GOLDEN", "") == "1"


def rendered(case: str) -> dict[str, str]:
    """What render writes for a case: path relative to the case folder → text."""
    decl = load_declaration(GOLDEN / case / "qgen.toml")
    assert decl.out == "expected", f'{case}/qgen.toml must say out = "expected"'
    return {p.as_posix(): text for p, text in render_declaration(decl).items()}


def on_disk(case: str) -> dict[str, bytes]:
    root = GOLDEN / case
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted((root / "expected").rglob("*"))
        if p.is_file()
    }


def test_there_are_golden_cases() -> None:
    assert set(CASES) >= {
        "lease_group_deadletter",
        "row_lock_table_deadletter",
        "advisory_minimal",
        "no_attempt_no_retry_after",
        "override_and_custom",
    }


@pytest.mark.parametrize("case", CASES)
def test_golden(case: str) -> None:
    want = rendered(case)
    if UPDATE:
        shutil.rmtree(GOLDEN / case / "expected", ignore_errors=True)
        for rel, text in want.items():
            path = GOLDEN / case / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(text.encode("utf-8"))
    have = on_disk(case)
    problems = []
    for rel in sorted(set(want) - set(have)):
        problems.append(f"missing: tests/golden/{case}/{rel}")
    for rel in sorted(set(have) - set(want)):
        problems.append(f"not rendered any more: tests/golden/{case}/{rel}")
    for rel in sorted(set(want) & set(have)):
        if have[rel] != want[rel].encode("utf-8"):
            diff = difflib.unified_diff(
                have[rel].decode("utf-8", "replace").splitlines(keepends=True),
                want[rel].splitlines(keepends=True),
                fromfile=f"tests/golden/{case}/{rel} (golden)",
                tofile=f"tests/golden/{case}/{rel} (rendered now)",
            )
            problems.append("".join(diff))
    if problems:
        pytest.fail(
            "\n".join(problems)
            + "\nIf the change is intended: QGEN_UPDATE_GOLDEN=1 python -m pytest "
            "tests/generator/test_golden.py, then review git diff tests/golden/",
            pytrace=False,
        )


# Which steps each queue's file has, per SPEC.md ("each where the form has one"); the golden
# bytes pin the SQL, this pins the shape in words a reviewer can check against the outcome table.
DEAD = "stats status dead_list dead_list_newest dead_show redrive redrive_all purge_dead purge_dead_all"
STEPS = {
    ("lease_group_deadletter", "jobs"): (
        "schema enqueue listen next_due claim extend ack drop retry retry_after ack_many "
        "drop_many retry_many retry_after_many dead_letter_many dead_letter release unclaim "
        f"columns indexes {DEAD} prune groups group_names regroup pending_list advance finished_per_minute cancel"
    ),
    (
        "row_lock_table_deadletter",
        "mail",
    ): (
        # with max_attempts the claim counts (committed), then take locks; unclaim undoes
        "schema enqueue listen next_due claim take ack drop retry retry_after ack_many "
        f"drop_many retry_many retry_after_many dead_letter unclaim columns indexes {DEAD} "
        "pending_list advance cancel"
    ),
    ("advisory_minimal", "hooks"): (
        "schema enqueue listen claim take ack drop ack_many drop_many unlock columns indexes stats status "
        "pending_list cancel"
    ),
    (
        "no_attempt_no_retry_after",
        "leased",
    ): (
        "schema enqueue listen claim extend ack drop retry ack_many drop_many retry_many release "
        "unclaim columns indexes stats status pending_list cancel"
    ),
    ("no_attempt_no_retry_after", "locked"): (
        "schema enqueue listen claim ack drop ack_many drop_many columns indexes stats status prune pending_list finished_per_minute cancel"
    ),
    ("override_and_custom", "tasks"): (
        "schema enqueue listen next_due claim extend ack drop retry retry_after ack_many "
        "retry_many dead_letter_many dead_letter "
        f"release unclaim columns indexes {DEAD} groups group_names regroup pending_list advance cancel custom.bump custom.park"
    ),
    # dedupe_key: enqueue_existing after enqueue (and enqueue_unlock on MySQL and MariaDB);
    # redrive refuses a dead message whose key is taken
    ("dedupe_lease_group", "jobs"): (
        "schema enqueue enqueue_existing listen next_due claim extend ack drop retry retry_after "
        "ack_many drop_many retry_many retry_after_many dead_letter_many dead_letter release "
        "unclaim columns indexes "
        "stats status dead_list dead_list_newest dead_show redrive redrive_blocked "
        "redrive_blocked_all redrive_all purge_dead purge_dead_all prune groups group_names regroup pending_list advance finished_per_minute cancel"
    ),
    # last_error: every form writes it, so row lock and advisory render a retry (and
    # retry_many) where they have none without it
    ("last_error_typed_others", "ping"): (
        "schema enqueue listen claim take ack drop retry ack_many drop_many retry_many "
        "unlock columns indexes stats status pending_list cancel"
    ),
}


@pytest.mark.parametrize(("case", "queue"), sorted(STEPS))
def test_golden_steps(case: str, queue: str) -> None:
    for dialect in ("postgres", "mysql", "mariadb", "sqlite"):
        f = read_rendered(GOLDEN / case / "expected" / dialect / f"{queue}.sql")
        names = list(f.statements)
        want = STEPS[(case, queue)].split()
        if f.header.form == "advisory" and dialect == "sqlite":
            want = [n for n in want if n != "unlock"]  # keys held in-process
        if f.header.form == "advisory" and dialect == "postgres":
            want = [n for n in want if n != "take"]  # the claim takes in the same statement
        fused = f.header.form in ("advisory", "lease") and "fifo_key" not in f.header.columns
        if fused and dialect == "postgres":
            # the claim that first finishes the last batch's acked rows (advisory: under
            # their keys; lease: those still holding their tokens)
            want.insert(want.index("claim") + 1, "ack_claim")
        if dialect != "postgres":
            want = [n for n in want if n != "listen"]  # LISTEN/NOTIFY on PostgreSQL only
        if dialect in ("mysql", "mariadb") and "enqueue_existing" in want:
            # a failed keyed enqueue gives back the key's named lock (the session's own)
            want.insert(want.index("enqueue_existing") + 1, "enqueue_unlock")
        if f.header.pause_table is not None:  # pausing: after the operating statements
            after = ("groups", "pending_list", "advance", "finished_per_minute", "cancel")
            at = min(want.index(n) for n in after if n in want)
            want[at:at] = ["pause", "resume", "paused"]
        assert names == want, (dialect, names)
        assert all(f.statements[n] for n in names), "every step holds SQL"
