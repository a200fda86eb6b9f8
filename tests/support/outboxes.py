"""An outbox rendered, created and relayed into a list the test reads back."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import runtime
from qgen.build import render_declaration
from qgen.declaration import parse_declaration
from runtime.connect import connect
from runtime.delivery import Ctx
from runtime.outbox import Outbox, OutboxMessage
from support.engines import Engine, drop_tables, run, unique_table

Handler = Callable[[OutboxMessage, Ctx], Awaitable[runtime.Outcome]]


def _fill(value: Any, table: str) -> Any:
    if isinstance(value, str):
        return value.replace("{t}", table)
    if isinstance(value, dict):
        return {k: _fill(v, table) for k, v in value.items()}
    return value


def render_outbox(tmp_path: Path, dialect: str, table: str, **extra: Any) -> Outbox:
    """Render an [outbox] declaration for one dialect into tmp_path and load it."""
    raw = {"dialects": [dialect], "out": "sql", "outbox": {"table": table, **extra}}
    decl = parse_declaration(raw, tmp_path / "qgen.toml")
    files = render_declaration(decl)
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text, encoding="utf-8")
    ob = runtime.load(tmp_path / "sql" / dialect / "outbox.sql")
    assert isinstance(ob, Outbox)
    return ob


async def create_schema(url: str, ob: Outbox) -> None:
    async with await connect(url) as conn:
        for statement in ob.rendered.require("schema"):
            await conn.execute(statement, {})


@contextmanager
def make(engine: Engine, tmp_path: Path, **extra: Any) -> Iterator[Outbox]:
    """A fresh outbox table (``{t}`` in extra's SQL names it), dropped after."""
    table = unique_table("ob")
    extra = {k: _fill(v, table) for k, v in extra.items()}
    ob = render_outbox(tmp_path, engine.dialect_name, table, **extra)
    run(create_schema(engine.url, ob))
    try:
        yield ob
    finally:
        run(drop_tables(engine.url, table))


async def records(url: str, ob: Outbox) -> list[dict[str, Any]]:
    """Every row of the outbox, in id order: id, marked (bool), topic."""
    c = ob.columns
    async with await connect(url) as conn:
        q = conn.dialect.quote_ident
        rows = await conn.fetchall(
            f"SELECT {q(c['id'])} AS id, {q(c['processed_at'])} AS processed_at"
            + (f", {q(c['topic'])} AS topic" if "topic" in c else "")
            + f" FROM {q(ob.table)} ORDER BY {q(c['id'])}",
            {},
        )
    return [
        {"id": r["id"], "marked": r["processed_at"] is not None, "topic": r.get("topic")}
        for r in rows
    ]


def recorder(
    outcomes: dict[int, runtime.Outcome] | None = None,
) -> tuple[list[OutboxMessage], Handler]:
    """A handler that records what it is handed and acks (or returns outcomes[n] for the n-th
    payload value)."""
    seen: list[OutboxMessage] = []

    async def handle(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome:
        seen.append(message)
        return (outcomes or {}).get(message.payload.get("n"), runtime.ack())

    return seen, handle
