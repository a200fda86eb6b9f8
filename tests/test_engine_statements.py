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

import datetime as dt
import json
import re
import tomllib
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
from engines import Engine, run

from qgen.build import render_declaration
from qgen.declaration import parse_declaration
from runtime.connect import connect
from runtime.drivers.base import Connection
from runtime.rendered import read_rendered

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "generated_examples" / "sql"
QUEUES = ["audit", "emails", "exports", "invoices", "orders", "pings", "reports", "webhooks"]


def params_for(dialect: str) -> dict[str, Any]:
    """Representative values for every parameter a rendered statement binds."""
    now = dt.datetime.now(dt.UTC).replace(microsecond=123000)
    token: Any
    if dialect == "postgres":
        token = now
    elif dialect == "sqlite":
        token = now.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]  # the form the templates store
    else:
        token = now.replace(tzinfo=None)  # DATETIME(6) in UTC
    return {
        "id": 1,
        "token": token,
        "new_token": token,
        "group": "g",
        "dead_group": "d",
        "payload": '{"n": 1}',
        "delay_s": 1.5,
        "lease_s": 30.0,
        "hold_s": 5.0,
        "limit": 5,
        "scan": 20,
        "ids": "[1]",
        # the _many statements: [id, token] pairs as the lease form binds them
        "pairs": json.dumps([[1, token]], default=str),
        "attempt": 1,
        # what `columns` and `indexes` describe
        "table_schema": None,
        "table_name": "no_such_table",
        # the outbox's
        "topic": "t",
        "record_key": "k",
        "after_id": 0,
        "age_s": 60.0,
        # advance: how far delayed rows are brought nearer
        "by_s": 30.0,
        # the console's per-minute counts: the last hour
        "window_s": 3600,
        # operating a queue: prune's batch; stats counts kept rows up to processed_limit
        "batch": 100,
        "processed_limit": 10_001,
        # regroup: the group its rows are moved from; last_error: why a delivery failed
        "from_group": "old",
        "error": "RuntimeError: boom",
        # the ordering roles' enqueue
        "priority": 3,
        "fifo_key": "k",
        # the channel the PostgreSQL enqueue notifies
        "channel": "qgen.t",
        # dedupe_key: the one committed row holds it, so enqueue meets a duplicate
        "dedupe_key": "k",
        # schedules: a schedule's state row, its slots as epoch seconds
        "queue": "q",
        "schedule": "nightly",
        "horizon": 1_700_000_000,
        "seen": 1_699_999_000,
        "last_slot": 1_700_000_000,
        "paused": 1,
        # ack_result and progress: JSON text, as the runtime encodes it
        "result": '{"rows": 3}',
        "progress": "50",
    }


def statements_in(path: Path) -> tuple[list[str], int]:
    """The step names and the number of SQL statements in a rendered file, counted from the
    raw text (every line that ends a statement with ';'), independently of the runtime's
    reader."""
    text = path.read_text(encoding="utf-8")
    body = text.split("\n-- name: ", 1)[1]
    names = re.findall(r"^-- name: (\S+)$", "-- name: " + body, re.M)
    ends = [
        ln for ln in body.splitlines() if not ln.startswith("-- ") and ln.rstrip().endswith(";")
    ]
    return names, len(ends)


async def create_namespace(engine: Engine) -> tuple[str, str]:
    """A schema (PostgreSQL), database (MariaDB) or file (SQLite) no other test uses: its name
    and a URL whose connections land in it."""
    name = f"qgen_t_{uuid.uuid4().hex[:10]}"
    if engine.name == "sqlite":
        return name, engine.url  # engine_url gives a fresh file per test
    async with await connect(engine.url) as admin:
        if engine.name == "postgres":
            await admin.execute(f'CREATE SCHEMA "{name}"')
            sep = "&" if "?" in engine.url else "?"
            return name, f"{engine.url}{sep}options=-csearch_path%3D{name}"
        await admin.execute(f"CREATE DATABASE `{name}`")
        return name, urlunsplit(urlsplit(engine.url)._replace(path=f"/{name}"))


async def drop_namespace(engine: Engine, name: str) -> None:
    if engine.name == "sqlite":
        return
    async with await connect(engine.url) as admin:
        if engine.name == "postgres":
            await admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        else:
            await admin.execute(f"DROP DATABASE IF EXISTS `{name}`")


@asynccontextmanager
async def namespace(engine: Engine) -> AsyncIterator[Connection]:
    """A connection into a namespace of its own (``create_namespace``), dropped afterwards;
    ``conn.test_url`` reaches it, for code that opens its own connections."""
    name, url = await create_namespace(engine)
    try:
        conn = await connect(url)
        conn.test_url = url  # type: ignore[attr-defined]
        try:
            yield conn
        finally:
            await conn.close()
    finally:
        await drop_namespace(engine, name)


async def run_file(conn: Connection, path: Path, params: dict[str, Any]) -> tuple[int, list[str]]:
    """Run every statement of one rendered file; return (statements run, failures)."""
    rendered = read_rendered(path)
    ran, failures = 0, []
    for sql in rendered.require("schema"):
        await conn.execute(sql, params)
        ran += 1
    # one committed row that the statements below find
    for sql in rendered.require("put" if rendered.header.kind == "outbox" else "enqueue"):
        await conn.fetchall(sql, {**params, "delay_s": None})
    for name, steps in rendered.statements.items():
        if name == "schema":
            continue
        await conn.begin()
        try:
            for i, sql in enumerate(steps):
                try:
                    await conn.fetchall(sql, params)
                except Exception as exc:
                    failures.append(f"{path.parent.name}/{path.name} {name}[{i}]: {exc}\n  {sql}")
                    break
                ran += 1
        finally:
            await conn.rollback()
    return ran, failures


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
