"""The bench's queues: one declaration per engine and form, rendered into a temp dir and loaded.

Everything the bench runs comes from these rendered files, so the runtime and the raw
baseline execute the very same SQL text.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import runtime
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.drivers.base import Connection
from runtime.queue import Queue

ENGINES = ("postgres", "mariadb", "sqlite")
FORMS = ("row_lock", "lease", "advisory")
DEFAULT_URLS = {
    "postgres": os.environ.get(
        "QGEN_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
    ),
    "mariadb": os.environ.get("QGEN_BENCH_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test"),
}
#: the payload every message carries (about 100 bytes of JSON), for every contender
PAYLOAD: dict[str, Any] = {"order": 12345, "customer": "c-0001", "note": "x" * 60}


@dataclass
class Engine:
    """One engine under test and where it lives."""

    name: str
    url: str
    #: what the bench reports as the server's version
    version: str = ""


def table_prefix() -> str:
    """A prefix unique to this run, so two runs (or a run and the tests) never share a table."""
    return f"qgb{os.getpid()}"


def render_queue(
    engine: str,
    form: str,
    table: str,
    out_dir: Path,
    *,
    processed_at: bool = False,
    priority: bool = False,
    layout: str = "plain",
) -> Queue:
    """Declare, render, validate and load one bench queue: ``processed_at`` keeps finished
    rows (marked) instead of deleting them; ``priority`` adds a priority column. The rendered file lands in ``out_dir/sql/``.
    """
    columns = {"id": "id", "payload": "payload", "attempt": "attempt", "retry_after": "retry_after"}
    if form == "lease":
        columns["locked_until"] = "locked_until"
    if processed_at:
        columns["processed_at"] = "processed_at"
    if priority:
        columns["priority"] = "priority"
    queue: dict[str, Any] = {"table": table, "form": form, "columns": columns}
    if form == "lease":
        queue["lease_s"] = 30
    if layout != "plain":
        queue["layout"] = layout
    decl_path = out_dir / "qgen.toml"
    decl = parse_declaration(
        {"dialects": [engine], "out": "sql", "queues": {"bench": queue}}, decl_path
    )
    text = build_unit(decl.queues["bench"], engine, decl_path)
    path = out_dir / "sql" / engine / f"{table}_{form}.sql"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return runtime.load(path)


def quoted(engine: str, name: str) -> str:
    q = "`" if engine == "mariadb" else '"'
    return f"{q}{name}{q}"


async def create_table(db: Connection, queue: Queue) -> None:
    await drop_table(db, queue.dialect.name, queue.table)
    for sql in queue.rendered.require("schema"):
        await db.execute(sql)
    for sql in queue.rendered.get("rotate") or ():  # a partitioned layout's partitions
        await db.execute(sql, {"age_s": None, "group": None})


async def drop_table(db: Connection, engine: str, table: str) -> None:
    """Drop a bench queue's table and what its schema block creates beside it: the pause
    table, and a partitioned layout's rotate function (its partitions go with the table)."""
    for name in (table, f"{table}_pause"):
        await db.execute(f"DROP TABLE IF EXISTS {quoted(engine, name)}")
    if engine == "postgres":  # a partitioned layout's rotate function
        await db.execute(f"DROP FUNCTION IF EXISTS {quoted(engine, table + '_rotate')}")


async def clear_table(db: Connection, engine: str, table: str) -> None:
    """Empty a table between runs (TRUNCATE where it exists: no dead rows left behind)."""
    if engine == "sqlite":
        await db.execute(f"DELETE FROM {quoted(engine, table)}")
    else:
        await db.execute(f"TRUNCATE TABLE {quoted(engine, table)}")


async def count_rows(db: Connection, engine: str, table: str) -> int:
    row = await db.fetchone(f"SELECT COUNT(*) AS n FROM {quoted(engine, table)}")
    return int(row["n"]) if row else -1
