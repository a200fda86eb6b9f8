"""Test helper: render a small queue declaration for one engine, create its tables, read rows back."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import runtime
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from qgen.render import environment
from runtime.contract.rendered import parse_rendered
from runtime.queue import Queue, decode_payload
from support.engines import Engine, drop_tables, unique_table

# the database's clock, as the tests compare against it (never the client's)
NOW = {
    "postgres": "clock_timestamp()",
    "mariadb": "UTC_TIMESTAMP(6)",
    "mysql": "UTC_TIMESTAMP(6)",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')",
}
PAST = {
    "postgres": "clock_timestamp() - interval '1 hour'",
    "mariadb": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
    "mysql": "UTC_TIMESTAMP(6) - INTERVAL 1 HOUR",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-1 hour')",
}


@dataclass
class QueueUnderTest:
    engine: Engine
    queue: Queue
    table: str
    dead_table: str | None
    columns: dict[str, str]
    tables: list[str] = field(default_factory=list)
    #: the rendered file's text, for code that loads it from disk
    text: str = ""

    @property
    def url(self) -> str:
        return self.engine.url

    def q(self, name: str) -> str:
        return runtime.contract.dialects.DIALECTS[self.engine.dialect_name].quote_ident(name)

    def col(self, logical: str) -> str:
        return self.q(self.columns[logical])

    def p(self, name: str) -> str:
        return runtime.contract.dialects.DIALECTS[self.engine.dialect_name].placeholder(name)

    async def sql(self, sql: str, params: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """Run the test's own SQL on a fresh connection (autocommit)."""
        async with await runtime.connect(self.url) as db:
            if sql.lstrip().upper().startswith("SELECT"):
                return await db.fetchall(sql, params or {})
            await db.execute(sql, params or {})
            return []

    async def rows(self, table: str | None = None) -> list[dict[str, Any]]:
        """The whole table under logical names, with times as due/future flags."""
        table = table or self.table
        now = NOW[self.engine.dialect_name]
        cols = [f"{self.col(k)} AS {self.q(k)}" for k in self.columns]
        for k in ("retry_after", "locked_until", "processed_at"):
            if k in self.columns:
                cols.append(
                    f"CASE WHEN {self.col(k)} > {now} THEN 1 ELSE 0 END AS {self.q(k + '_future')}"
                )
        out = await self.sql(
            f"SELECT {', '.join(cols)} FROM {self.q(table)} ORDER BY {self.col('id')}"
        )
        for r in out:
            r["payload"] = decode_payload(r["payload"])
        return out

    async def dead_rows(self) -> list[dict[str, Any]]:
        if self.dead_table:
            return await self.rows(self.dead_table)
        group = self.queue.dead_group
        return [r for r in await self.rows() if r.get("group") == group]

    async def enqueue(self, *payloads: Any, **kw: Any) -> list[int]:
        async with await runtime.connect(self.url) as db:
            return [await self.queue.enqueue(db, p, **kw) for p in payloads]

    async def expire_leases(self, *ids: int) -> None:
        """Move the leases (of rows ``ids``, or of every row) into the past."""
        which = f" AND {self.col('id')} IN ({', '.join(str(int(i)) for i in ids)})" if ids else ""
        await self.sql(
            f"UPDATE {self.q(self.table)} SET {self.col('locked_until')} = "
            f"{PAST[self.engine.dialect_name]} WHERE {self.col('locked_until')} IS NOT NULL{which}"
        )

    async def make_due(self) -> None:
        await self.sql(
            f"UPDATE {self.q(self.table)} SET {self.col('retry_after')} = "
            f"{PAST[self.engine.dialect_name]} WHERE {self.col('retry_after')} IS NOT NULL"
        )

    async def drop(self) -> None:
        await drop_tables(self.url, *self.tables)
        if self.queue.rendered.get("rotate") is not None:  # a partitioned layout's function
            await self.sql(f"DROP FUNCTION IF EXISTS {self.q(self.table + '_rotate')}")


#: QGEN_TEST_LAYOUT=partitioned: every PostgreSQL queue that keeps processed rows is made
#: with the partitioned layout, so a suite runs its outcomes on it unchanged
LAYOUT = os.environ.get("QGEN_TEST_LAYOUT", "plain")


#: one Jinja environment for the process: it compiles each template once (a fresh one per
#: queue compiled them all again, about 0.4 s of CPU per make_queue), and reloads a template
#: whose file changed (an edited template is rendered as it is on disk)
_ENV = environment()


async def make_queue(
    engine: Engine,
    form: str,
    columns: tuple[str, ...] = ("attempt", "retry_after", "processed_at"),
    dead: str | None = None,
    max_attempts: int | None = None,
    lease_s: float = 30,
    custom: dict[str, Any] | None = None,
    statements: dict[str, Any] | None = None,
    names: dict[str, str] | None = None,
    extra: dict[str, Any] | None = None,
) -> QueueUnderTest:
    """Render a queue of this form for the engine under a fresh table name and create it.

    ``names`` renames what the queue declares: a column by its role, "table" the table's
    name prefix and "dead" the dead-letter table's suffix; ``extra`` adds keys to the queue's
    declaration (other_columns, default_group, …)."""
    names = names or {}
    table = unique_table(names.get("table", f"q_{form}"))
    cols = {"id": "id", "payload": "payload"} | {c: c for c in columns}
    if form == "lease":
        cols["locked_until"] = "locked_until"
    if dead == "group":
        cols["group"] = "grp"
    cols = {role: names.get(role, name) for role, name in cols.items()}
    decl: dict[str, Any] = {"table": table, "form": form, "columns": cols, **(extra or {})}
    if LAYOUT != "plain" and engine.dialect_name == "postgres" and "processed_at" in cols:
        decl.setdefault("layout", LAYOUT)
    if form == "lease":
        decl["lease_s"] = lease_s
    dead_table = None
    if dead:
        decl["max_attempts"] = max_attempts or 2
        if dead == "group":
            decl["dead_letter"] = {"group": "dead"}
        else:
            dead_table = table + names.get("dead", "_dead")
            decl["dead_letter"] = {"table": dead_table}
    quote = runtime.contract.dialects.DIALECTS[engine.dialect_name].quote_ident
    # {t} the table as declared, {qt} quoted, {c_<role>} a column quoted
    fmt = {"t": table, "now": NOW[engine.dialect_name], "qt": quote(table)}
    fmt |= {f"c_{role}": quote(name) for role, name in cols.items()}
    if custom:
        decl["custom"] = {
            k: [s.format(**fmt) for s in (v if isinstance(v, list) else [v])]
            for k, v in custom.items()
        }
    if statements:
        decl["statements"] = {k: v.format(**fmt) for k, v in statements.items()}
    parsed = parse_declaration({"dialects": [engine.dialect_name], "queues": {"q": decl}})
    text = build_unit(parsed.queues["q"], engine.dialect_name, env=_ENV)
    queue = Queue(parse_rendered(text, f"{table}.sql"))
    tables = [table] + ([dead_table] if dead_table else [])
    if "max_in_flight" in decl or "rate_limit" in decl:
        tables.append(f"{table}_limits")
    if parsed.queues["q"].schedule_table:
        tables.append(parsed.queues["q"].schedule_table)
    await drop_tables(engine.url, *tables)
    async with await runtime.connect(engine.url) as db:
        for st in queue.rendered.require("schema"):
            await db.execute(st, {})
        for st in queue.rendered.get("rotate") or ():  # the partitions acks move rows to
            await db.execute(st, {"age_s": None, "group": None})
    return QueueUnderTest(engine, queue, table, dead_table, cols, tables, text=text)
