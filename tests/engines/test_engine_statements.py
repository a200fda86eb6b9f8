"""Every statement of every file in generated_examples/sql/ accepted by the real engine.

sqlglot is a parser, not a validator (FINDINGS.md): this is the layer that asks the engines.
Each engine gets a namespace of its own (a PostgreSQL schema, a MariaDB database, a fresh
SQLite file), runs each file's `schema` and one committed `enqueue` (`put` for the outbox;
so row 1 exists and the
statements below touch a real row), then every statement of every step, in order, inside a
transaction that is rolled back, with representative parameters. The "mysql" engine runs the
MySQL-dialect files over a mysql:// URL on the MariaDB server (there is no Oracle MySQL here).

Each engine's test asserts it ran exactly as many statements as the files hold, and the
counts are printed at the end of the run as ``engine statements: <engine> ran N statements
from M files`` (the eight queues, and the outbox when the examples declare one).
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, run
from support.statements import (
    namespace,
    params_for,
    run_file,
    statements_in,
)

from qgen.build import render_declaration
from qgen.declaration import parse_declaration
from runtime.contract.rendered import read_rendered

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "generated_examples" / "sql"
QUEUES = ["audit", "emails", "exports", "invoices", "orders", "pings", "reports", "webhooks"]


def example_files(dialect: str) -> list[Path]:
    return sorted((EXAMPLES / dialect).glob("*.sql"))


def test_examples_are_complete() -> None:
    for dialect in ("postgres", "mysql", "mariadb", "sqlite"):
        files = [p.stem for p in example_files(dialect)]
        assert set(QUEUES) <= set(files), dialect
        assert set(files) - set(QUEUES) <= {"outbox"}, dialect
        for q in QUEUES:
            header = read_rendered(EXAMPLES / dialect / f"{q}.sql").header
            assert (header.name, header.dialect) == (q, dialect)


def test_every_statement_accepted(engine: Engine, request: pytest.FixtureRequest) -> None:
    dialect = engine.dialect_name
    files = example_files(dialect)
    assert len(files) >= len(QUEUES)
    expected = sum(statements_in(f)[1] for f in files)

    async def go() -> tuple[int, list[str]]:
        total, failures = 0, []
        async with namespace(engine) as conn:
            for path in files:
                ran, failed = await run_file(conn, path, params_for(dialect))
                total += ran
                failures += failed
        return total, failures

    ran, failures = run(go())
    assert not failures, f"{engine.name} rejected {len(failures)} statements:\n" + "\n".join(
        failures
    )
    line = f"engine statements: {engine.name} ran {ran} statements from {len(files)} files"
    request.node.user_properties.append(("summary:statements accepted per engine", line))
    assert ran == expected, f"{line}; the files hold {expected}"


PROBE = """
dialects = ["postgres", "mysql", "mariadb", "sqlite"]
out = "sql"

[queues.probe]
table = "pq"
form = "row_lock"

[queues.probe.columns]
id = "id"
payload = "payload"

[queues.probe.custom.look]
postgres = "SELECT '50%' AS pct, ':id' AS lit, id::text AS t, payload FROM pq WHERE id = :id"
sqlite = "SELECT '50%' AS pct, ':id' AS lit, CAST(id AS TEXT) AS t, payload FROM pq WHERE id = :id"
default = "SELECT '50%' AS pct, ':id' AS lit, CAST(id AS CHAR) AS t, payload FROM pq WHERE id = :id"
"""


def test_service_sql_reaches_the_engine_intact(engine: Engine, tmp_path: Path) -> None:
    """A literal %, a ':id' inside quotes and a ::text cast survive the placeholder rewrite."""
    files = render_declaration(parse_declaration(tomllib.loads(PROBE)))
    path = tmp_path / "probe.sql"
    path.write_text(files[Path("sql") / engine.dialect_name / "probe.sql"], encoding="utf-8")
    rendered = read_rendered(path)

    async def go() -> list[dict[str, Any]]:
        async with namespace(engine) as conn:
            for sql in rendered.require("schema"):
                await conn.execute(sql, {})
            for sql in rendered.require("enqueue"):
                await conn.execute(sql, {"payload": '{"a": "50%"}', "channel": "qgen.probe"})
            (look,) = rendered.require("custom.look")
            return await conn.fetchall(look, {"id": 1})

    rows = run(go())
    assert len(rows) == 1
    row = rows[0]
    assert (row["pct"], row["lit"], str(row["t"])) == ("50%", ":id", "1")
    payload = row["payload"]
    assert (payload if isinstance(payload, dict) else json.loads(payload)) == {"a": "50%"}
