"""Declarations: every bad qgen.toml SPEC.md lists fails with one DeclarationError naming the
file, the queue, the key and a fix (and through the CLI: exit 2, one line on stderr, no
traceback); good declarations get the documented defaults."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from qgen.build import render_declaration
from qgen.cli import main
from qgen.declaration import DeclarationError, load_declaration, parse_declaration
from qgen.render import render_unit
from runtime.contract.dialects import DIALECTS

ALL = 'dialects = ["postgres", "mysql", "mariadb", "sqlite"]\n'


def write(tmp_path: Path, body: str, name: str = "qgen.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def error_of(path: Path) -> DeclarationError:
    """The DeclarationError that loading and rendering ``path`` raises (render validates SQL)."""
    with pytest.raises(DeclarationError) as info:
        render_declaration(load_declaration(path))
    return info.value


def cli_error(path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`qgen render --config path --stdout`: exit 2 and exactly one line on stderr."""
    capsys.readouterr()
    rc = main(["render", "--config", str(path), "--stdout"])
    out, err = capsys.readouterr()
    assert rc == 2, f"exit {rc}, stderr: {err!r}"
    assert "Traceback" not in err
    assert err.endswith("\n") and len(err.strip().splitlines()) == 1, err
    assert err.startswith("qgen: "), err
    assert out == "", "nothing is rendered when the declaration is bad"
    return err.strip()


# (case id, declaration body, key, words the problem must say, words the fix must say)
BAD: list[tuple[str, str, str, str, str]] = [
    (
        "unknown-form",
        """
        [queues.orders]
        table = "orders_queue"
        form = "leese"
        """,
        "form",
        "unknown form 'leese'",
        "did you mean 'lease'?",
    ),
    (
        "lease-without-locked_until",
        """
        [queues.orders]
        table = "orders_queue"
        form = "lease"
        [queues.orders.columns]
        id = "id"
        payload = "payload"
        """,
        "columns.locked_until",
        "the lease form needs a lease column",
        'add locked_until = "locked_until" under columns',
    ),
    (
        "row-lock-max-attempts-without-retry-after",
        """
        [queues.orders]
        table = "orders_queue"
        form = "row_lock"
        max_attempts = 3
        dead_letter = { table = "orders_dead" }
        [queues.orders.columns]
        id = "id"
        payload = "payload"
        attempt = "attempt"
        """,
        "max_attempts",
        "row lock with max_attempts needs a retry_after column",
        'add retry_after = "retry_after" under columns, or use form = "lease"',
    ),
    (
        "dead-letter-group-without-group-column",
        """
        [queues.orders]
        table = "orders_queue"
        form = "row_lock"
        max_attempts = 3
        dead_letter = { group = "orders_dead" }
        [queues.orders.columns]
        id = "id"
        payload = "payload"
        attempt = "attempt"
        """,
        "dead_letter.group",
        "a dead-letter group needs a group column",
        'add group = "queue" under columns',
    ),
    (
        "max_attempts-without-dead_letter",
        """
        [queues.orders]
        table = "orders_queue"
        max_attempts = 3
        """,
        "max_attempts",
        "max_attempts without dead_letter",
        "add dead_letter = ",
    ),
    (
        "max_attempts-without-attempt-column",
        """
        [queues.orders]
        table = "orders_queue"
        max_attempts = 3
        dead_letter = { table = "orders_dead" }
        [queues.orders.columns]
        id = "id"
        payload = "payload"
        locked_until = "locked_until"
        """,
        "max_attempts",
        "max_attempts needs an attempt column",
        'add attempt = "attempt" under columns',
    ),
    (
        "dead_letter-table-is-the-queue-table",
        """
        [queues.orders]
        table = "orders_queue"
        max_attempts = 3
        dead_letter = { table = "Orders_Queue" }
        """,
        "dead_letter.table",
        "the dead-letter table is the queue's own",
        'name another table, e.g. "orders_queue_dead"',
    ),
    (
        "dead_letter-table-not-text",
        """
        [queues.orders]
        table = "orders_queue"
        max_attempts = 3
        dead_letter = { table = 5 }
        """,
        "dead_letter.table",
        "is not a table name",
        "use an identifier",
    ),
    (
        "dead_letter-without-max_attempts",
        """
        [queues.orders]
        table = "orders_queue"
        dead_letter = { table = "orders_dead" }
        """,
        "dead_letter",
        "dead_letter without max_attempts",
        "add max_attempts = 5",
    ),
    (
        "override-does-not-parse",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.statements]
        ack = "DELETE FROM orders_queue WHERE (id = :id AND locked_until = :token"
        """,
        "statements.ack",
        "SQL does not parse",
        "write SQL that PostgreSQL 11 accepts",
    ),
    (
        "custom-does-not-parse",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.custom.park]
        default = "UPDAT orders_queue SET locked_until = NULL WHERE id = :id"
        """,
        "custom.park",
        "SQL does not parse",
        "write SQL that",
    ),
    (
        "override-with-undeclared-column",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.statements]
        ack = "UPDATE orders_queue SET done = 1 WHERE id = :id AND locked_until = :token"
        """,
        "statements.ack",
        "column 'done' is not declared for this table",
        "use one of attempt, id, locked_until, payload, retry_after, or declare it under columns",
    ),
    (
        "table-not-an-identifier",
        """
        [queues.orders]
        table = "orders-queue"
        """,
        "table",
        "'orders-queue' is not a table name",
        "letters, digits and underscores",
    ),
    (
        "column-with-a-space",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.columns]
        id = "order id"
        payload = "payload"
        locked_until = "locked_until"
        """,
        "columns.id",
        "'order id' is not an identifier",
        "use letters, digits and underscores",
    ),
    (
        "column-with-a-quote",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.columns]
        id = "id"
        payload = 'body"; DROP TABLE x; --'
        locked_until = "locked_until"
        """,
        "columns.payload",
        "is not an identifier",
        "use letters, digits and underscores",
    ),
    (
        "dedupe-generated-column-name",
        """
        [queues.orders]
        table = "orders_queue"
        other_columns = ["QGEN_PENDING_KEY"]
        [queues.orders.columns]
        id = "id"
        payload = "payload"
        locked_until = "locked_until"
        dedupe_key = "dedupe_key"
        """,
        "other_columns",
        "dedupe_key's generated column",
        "name the column otherwise",
    ),
    (
        "misspelt-max_attempt",
        """
        [queues.orders]
        table = "orders_queue"
        max_attempt = 3
        """,
        "max_attempt",
        "unknown key",
        "did you mean 'max_attempts'?",
    ),
    (
        "misspelt-colums",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.colums]
        id = "id"
        payload = "payload"
        """,
        "colums",
        "unknown key",
        "did you mean 'columns'?",
    ),
    (
        "misspelt-column-role",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.columns]
        id = "id"
        payload = "payload"
        locked_untill = "locked_until"
        """,
        "columns.locked_untill",
        "unknown key",
        "did you mean 'columns.locked_until'?",
    ),
    (
        "lease_s-on-row_lock",
        """
        [queues.orders]
        table = "orders_queue"
        form = "row_lock"
        lease_s = 30
        """,
        "lease_s",
        "lease_s applies to the lease form only, not row_lock",
        "remove lease_s",
    ),
    (
        "lease-custom-without-token",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.custom.park]
        default = "UPDATE orders_queue SET locked_until = NULL WHERE id = :id"
        """,
        "custom.park",
        "a lease-form statement without the token guard",
        "add AND locked_until = :token",
    ),
    (
        "override-with-unknown-param",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.statements]
        ack = "DELETE FROM orders_queue WHERE id = :order_id AND locked_until = :token"
        """,
        "statements.ack",
        "unknown parameter :order_id",
        "the runtime binds only :attempt, :dead_group, :delay_s",
    ),
    (
        "two-queues-on-one-table",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.refunds]
        table = "orders_queue"
        """,
        "table",
        "table 'orders_queue' is already used by queue 'orders'",
        "give it a table of its own; queues share a table only through a group column",
    ),
    (
        "dead-letter-table-is-another-queue",
        """
        [queues.orders]
        table = "orders_queue"
        max_attempts = 3
        dead_letter = { table = "refunds_queue" }
        [queues.refunds]
        table = "refunds_queue"
        """,
        "table",
        "table 'refunds_queue' is already used by queue 'orders'",
        "give it a table of its own; queues share a table only through a group column",
    ),
    (
        "per-dialect-sql-without-default",
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.statements.ack]
        postgres = "DELETE FROM orders_queue WHERE id = :id AND locked_until = :token"
        """,
        "statements.ack",
        "no SQL for mysql, mariadb, sqlite",
        'add default = "…"',
    ),
]


def _queue_of(body: str) -> str:
    # the queue an error is about: the last one declared in the cases above
    names = [
        ln.split(".")[1].rstrip("]") for ln in body.splitlines() if ln.strip()[:8] == "[queues."
    ]
    return names[-1]


@pytest.mark.parametrize(
    ("body", "key", "problem", "fix"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
def test_bad_declaration_names_file_queue_key_and_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, key: str, problem: str, fix: str
) -> None:
    path = write(tmp_path, ALL + textwrap.dedent(body))
    exc = error_of(path)
    message = str(exc)
    queue = _queue_of(textwrap.dedent(body))
    assert exc.file == str(path)
    assert message.startswith(f"{path}: queue '{queue}', key '{key}': "), message
    assert problem in exc.problem, message
    assert fix in exc.fix, message
    assert "; fix: " in message

    line = cli_error(path, capsys)
    assert line == f"qgen: {message}"


def test_unknown_dialect(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write(
        tmp_path,
        """
        dialects = ["postgres", "postgress"]
        [queues.orders]
        table = "orders_queue"
        """,
    )
    exc = error_of(path)
    assert str(exc).startswith(f"{path}: top level, key 'dialects': unknown dialect 'postgress'")
    assert "did you mean 'postgres'?" in exc.fix
    assert "postgres, mysql, mariadb, sqlite" in exc.fix
    assert "unknown dialect 'postgress'" in cli_error(path, capsys)


def test_unknown_dialect_in_a_per_dialect_sql_table(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        [queues.orders]
        table = "orders_queue"
        [queues.orders.custom.park]
        default = "DELETE FROM orders_queue WHERE id = :id AND locked_until = :token"
        sqllite = "DELETE FROM orders_queue WHERE id = :id AND locked_until = :token"
        """,
    )
    exc = error_of(path)
    assert (exc.where, exc.key, exc.problem) == (
        "queue 'orders'",
        "custom.park.sqllite",
        "unknown dialect",
    )
    assert "did you mean 'sqlite'?" in exc.fix


def test_toml_syntax_error_names_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, '[queues.orders\ntable = "orders_queue"\n')
    exc = error_of(path)
    assert exc.file == str(path)
    assert "not valid TOML" in exc.problem and "line 1" in exc.problem
    assert "correct the TOML syntax" in exc.fix
    assert "not valid TOML" in cli_error(path, capsys)


def test_missing_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nowhere" / "qgen.toml"
    with pytest.raises(DeclarationError) as info:
        load_declaration(path)
    assert str(info.value).startswith(f"{path}: ")
    assert info.value.problem == "not found"
    assert "qgen init" in info.value.fix and "--config" in info.value.fix
    assert "not found" in cli_error(path, capsys)


def test_a_form_the_dialect_cannot_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every dialect in runtime/contract/dialects.py runs all three forms today, so the check cannot be
    # reached without changing the table: this one case swaps in a SQLite that lacks the
    # advisory form (dataclasses.replace; no SQL is monkeypatched).
    reduced = dataclasses.replace(DIALECTS["sqlite"], forms=("row_lock", "lease"))
    monkeypatch.setitem(DIALECTS, "sqlite", reduced)
    raw = {
        "dialects": ["postgres", "sqlite"],
        "queues": {"hooks": {"table": "hooks_queue", "form": "advisory"}},
    }
    with pytest.raises(DeclarationError) as info:
        parse_declaration(raw, tmp_path / "qgen.toml")
    exc = info.value
    assert (exc.where, exc.key) == ("queue 'hooks'", "form")
    assert exc.problem == "the sqlite dialect cannot run the advisory form"
    assert exc.fix == "use one of row_lock, lease or drop sqlite from dialects"
    # the same declaration without sqlite is fine
    raw["dialects"] = ["postgres"]
    assert parse_declaration(raw).queues["hooks"].form == "advisory"

    path = write(
        tmp_path, 'dialects = ["sqlite"]\n[queues.hooks]\ntable = "h"\nform = "advisory"\n'
    )
    assert "cannot run the advisory form" in cli_error(path, capsys)


def test_cli_errors_from_a_real_process(tmp_path: Path) -> None:
    """The installed entry point: exit 2, one stderr line, no traceback (TOML, file, SQL)."""
    bad_sql = write(
        tmp_path,
        """
        [queues.orders]
        table = "orders_queue"
        form = "row_lock"
        [queues.orders.custom.park]
        default = "UPDATE orders_queue SET parked = 1 WHERE id = :id"
        """,
        "sql.toml",
    )
    bad_toml = write(tmp_path, "[queues.orders\n", "toml.toml")
    missing = tmp_path / "missing.toml"
    for path, words in [
        (bad_sql, "key 'custom.park': column 'parked' is not declared"),
        (bad_toml, "not valid TOML"),
        (missing, "not found"),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "qgen.cli", "render", "--config", str(path)],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and str(path) in lines[0] and words in lines[0], proc.stderr
        assert not (tmp_path / "sql").exists()


# ----------------------------------------------------------------- good declarations


def test_defaults(tmp_path: Path) -> None:
    decl = load_declaration(write(tmp_path, '[queues.orders]\ntable = "orders_queue"\n'))
    assert decl.dialects == ("postgres", "mysql", "mariadb", "sqlite")
    assert decl.out == "sql"
    q = decl.queues["orders"]
    assert q.form == "lease"
    assert q.lease_s == 30.0
    assert dict(q.columns) == {
        "id": "id",
        "payload": "payload",
        "attempt": "attempt",
        "retry_after": "retry_after",
        "locked_until": "locked_until",
    }
    assert q.max_attempts is None and q.dead_letter is None
    assert q.default_group is None  # no group column, no group
    assert not q.statements and not q.custom


def test_defaults_with_a_dead_letter_group_add_the_group_column(tmp_path: Path) -> None:
    body = (
        '[queues.orders]\ntable = "orders_queue"\n'
        'max_attempts = 5\ndead_letter = { group = "orders_dead" }\n'
    )
    q = load_declaration(write(tmp_path, body)).queues["orders"]
    assert q.columns["group"] == "queue"
    assert q.default_group == "orders"
    assert q.dead_letter is not None and q.dead_letter.group == "orders_dead"
    assert q.max_attempts == 5


def test_row_lock_and_advisory_defaults_have_no_lease(tmp_path: Path) -> None:
    body = (
        '[queues.a]\ntable = "a_q"\nform = "row_lock"\n'
        '[queues.b]\ntable = "b_q"\nform = "advisory"\n'
    )
    decl = load_declaration(write(tmp_path, body))
    for q in decl.queues.values():
        assert q.lease_s is None
        assert "locked_until" not in q.columns
    texts = render_declaration(decl, ["postgres"])
    assert all("lease_s" not in t for t in texts.values())


def test_per_dialect_custom_sql_with_default(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        ALL
        + """
[queues.orders]
table = "orders_queue"
form = "row_lock"
[queues.orders.columns]
id = "id"
payload = "payload"
group = "queue"
[queues.orders.custom.park]
postgres = "UPDATE orders_queue SET queue = 'parked_pg' WHERE id = :id"
default = "UPDATE orders_queue SET queue = 'parked' WHERE id = :id"
""",
    )
    decl = load_declaration(path)
    q = decl.queues["orders"]
    got = {d: render_unit(q, d) for d in decl.dialects}
    park = {d: next(s for s in r.blocks if s.name == "custom.park") for d, r in got.items()}
    assert park["postgres"].sql == ["UPDATE orders_queue SET queue = 'parked_pg' WHERE id = %(id)s"]
    assert park["mysql"].sql == ["UPDATE orders_queue SET queue = 'parked' WHERE id = %(id)s"]
    assert park["mariadb"].sql == park["mysql"].sql
    assert park["sqlite"].sql == ["UPDATE orders_queue SET queue = 'parked' WHERE id = :id"]
    assert park["sqlite"].origin == "custom.park"
    render_declaration(decl)  # and every dialect validates


def test_custom_as_a_list_of_statements(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
        dialects = ["sqlite"]
        [queues.reports]
        table = "reports_queue"
        form = "row_lock"
        [queues.reports.columns]
        id = "id"
        payload = "payload"
        attempt = "attempt"
        [queues.reports.custom.reset]
        default = [
          "UPDATE reports_queue SET attempt = 1 WHERE id = :id;",
          "  DELETE FROM reports_queue WHERE id = :id  ",
        ]
        """,
    )
    files = render_declaration(load_declaration(path))
    text = files[Path("sql/sqlite/reports.sql")]
    block = text.split("-- name: custom.reset\n", 1)[1]
    assert block.splitlines()[2:4] == [
        "UPDATE reports_queue SET attempt = 1 WHERE id = :id;",
        "DELETE FROM reports_queue WHERE id = :id;",
    ]
    from runtime.contract.rendered import parse_rendered

    assert parse_rendered(text).statements["custom.reset"] == (
        "UPDATE reports_queue SET attempt = 1 WHERE id = :id",
        "DELETE FROM reports_queue WHERE id = :id",
    )


def test_examples_declaration_loads() -> None:
    decl = load_declaration(
        Path(__file__).resolve().parents[2] / "generated_examples" / "qgen.toml"
    )
    assert sorted(decl.queues) == sorted(
        ["orders", "emails", "pings", "invoices", "reports", "audit", "webhooks", "exports"]
    )
    assert {q.form for q in decl.queues.values()} == {"lease", "row_lock", "advisory"}


def test_two_queues_may_share_a_table_through_its_group_column(tmp_path):
    cols = (
        'id = "id"\npayload = "payload"\ngroup = "queue"\nattempt = "attempt"\n'
        'locked_until = "locked_until"\n'
    )
    path = tmp_path / "qgen.toml"
    path.write_text(
        f"""
[queues.orders]
table = "jobs"
[queues.orders.columns]
{cols}
[queues.refunds]
table = "jobs"
[queues.refunds.columns]
{cols}
"""
    )
    decl = load_declaration(path)
    assert {q.default_group for q in decl.queues.values()} == {"orders", "refunds"}
    # the same table without a group column (nothing tells the rows apart) is refused
    path.write_text(path.read_text().replace('group = "queue"\n', ""))
    with pytest.raises(DeclarationError, match="already used by queue 'orders'"):
        load_declaration(path)
