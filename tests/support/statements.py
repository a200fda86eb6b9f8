"""Namespaces of a test's own on each engine, statement parameters (``params_for``: add a new
statement's parameters here), and a rendered file run statement by statement."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from runtime.connect import connect
from runtime.contract.rendered import read_rendered
from runtime.drivers.base import Connection
from support.engines import Engine


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
        # the advisory claim that takes (PostgreSQL): the keys it releases first
        "release": "[1]",
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
        # operating a queue: prune's batch; stats counts kept rows up to processed_limit,
        # unfinished and dead rows up to count_limit
        "batch": 100,
        "processed_limit": 10_001,
        "count_limit": 10_001,
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
