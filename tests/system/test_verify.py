"""`qgen verify`: a live table compared with its declaration, every difference with its fix;
and the consumer refusing a table whose attempt default would make it count wrong."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.engines import Engine, run
from support.statements import create_namespace, drop_namespace

import runtime
from qgen.cli import main

DECL = """\
dialects = ["{dialect}"]
[queues.jobs]
table = "jobs"
form = "lease"
{extra}
[queues.jobs.columns]
id = "id"
payload = "payload"
attempt = "attempt"
locked_until = "locked_until"
processed_at = "processed_at"
"""

#: an existing table as a service might have it: attempt counted from 0, a lease column
#: that loses the token's digits, a NOT NULL column of its own, no index for the claim
ADOPTED = {
    "postgres": "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, payload JSONB NOT NULL, "
    "attempt INT NOT NULL DEFAULT 0, locked_until TIMESTAMP, processed_at TIMESTAMPTZ, "
    "kind TEXT NOT NULL)",
    "mysql": "CREATE TABLE jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload JSON NOT NULL, "
    "attempt INT NOT NULL DEFAULT 0, locked_until DATETIME NULL, processed_at DATETIME(6) NULL, "
    "kind VARCHAR(20) NOT NULL)",
    "sqlite": "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, payload TEXT NOT NULL, "
    "attempt INTEGER NOT NULL DEFAULT 0, locked_until REAL, processed_at TEXT, "
    "kind TEXT NOT NULL)",
}


def verify(tmp_path: Path, dialect: str, url: str, extra: str = "") -> tuple[int, str, str]:
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(DECL.format(dialect=dialect, extra=extra), encoding="utf-8")
    assert main(["render", "--config", str(cfg)]) == 0
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["verify", "--config", str(cfg), "--db", url])
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def space(engine: Engine) -> Iterator[str]:
    """A URL into a namespace of the test's own (the CLI runs its own event loop)."""
    name, url = run(create_namespace(engine))
    yield url
    run(drop_namespace(engine, name))


async def execute(url: str, *statements: str) -> None:
    async with await runtime.connect(url) as conn:
        for s in statements:
            await conn.execute(s, {})


def test_a_table_made_by_its_schema_block_matches(
    engine: Engine, space: str, tmp_path: Path
) -> None:
    run(execute(space))  # the database (a SQLite file) exists: qgen commands never create one
    code, out, err = verify(tmp_path, engine.dialect_name, space)
    assert code == 1 and "the table does not exist" in out, out + err
    queue = runtime.load(tmp_path / "sql" / engine.dialect_name / "jobs.sql")
    run(execute(space, *queue.rendered.require("schema")))
    code, out, err = verify(tmp_path, engine.dialect_name, space)
    assert (code, out.strip(), err) == (0, "queue 'jobs': matches its declaration", ""), out + err


def test_an_adopted_table_lists_every_difference_with_its_fix(
    engine: Engine, space: str, tmp_path: Path
) -> None:
    run(execute(space, ADOPTED["mysql" if engine.name in ("mariadb", "mysql") else engine.name]))
    code, out, err = verify(tmp_path, engine.dialect_name, space)
    assert code == 1, out + err
    lines = out.strip().splitlines()
    assert all(" fix: " in ln for ln in lines), out
    assert any("attempt column 'attempt' defaults to 0" in ln for ln in lines), out
    assert any("'locked_until' (role locked_until)" in ln for ln in lines), out
    assert any("column 'kind' is NOT NULL without a default" in ln for ln in lines), out
    assert any("index led by" in ln for ln in lines), out
    code, out, _ = verify(tmp_path, engine.dialect_name, space, 'other_columns = ["kind"]')
    # declared: the enqueue binds it, and an enqueue must give it (a note, not a difference)
    kind = [ln for ln in out.splitlines() if "'kind'" in ln]
    assert code == 1 and len(kind) == 1, out
    assert "note: jobs: column 'kind' (other_columns) is NOT NULL" in kind[0], out
    assert kind[0].endswith("every enqueue needs values={'kind': …}"), out


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_verify_without_a_database_url_is_one_line(
    engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("QGEN_DATABASE_URL", raising=False)
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(DECL.format(dialect="sqlite", extra=""), encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert main(["verify", "--config", str(cfg)]) == 2
    assert err.getvalue().count("\n") == 1 and "QGEN_DATABASE_URL" in err.getvalue()
