"""Create what a rendered file's ``schema`` block declares, where it is missing:
``created = await runtime.apply(db, queue)`` at a service's start, or ``qgen apply``.

The schema block is the generator's reviewed DDL (``CREATE TABLE IF NOT EXISTS``, ``CREATE
INDEX IF NOT EXISTS``; on MySQL and MariaDB the indexes sit in the CREATE TABLE). apply reads
which tables and indexes exist through the file's own ``columns`` and ``indexes`` statements,
runs the statements of those that are missing, and returns what it created. It never drops,
alters or rewrites: a queue table that exists but differs from its file raises SchemaDiffers
with the findings of ``qgen verify``, and nothing is created.

Two processes applying at once (two workers starting) both succeed and create each object
once: where DDL is transactional (PostgreSQL, SQLite) everything runs in one transaction
(SQLite's BEGIN IMMEDIATE: one writer at a time), and one that loses a race for a catalog
entry rolls back and tries again, finding the object made; on MySQL and MariaDB each
statement commits on its own and the server's metadata lock makes the second one see the
first's table. There DDL would also commit a transaction the connection has open, so apply
refuses to run in one. What each returns is what was missing when it looked: two applies
racing (but on SQLite) may both list an object the other created in between.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from runtime.adapters import Adapted, adapt, adapted, run_sync
from runtime.connect import connect
from runtime.contract.dialects import Dialect
from runtime.contract.errors import ConfigurationError, DatabaseError
from runtime.contract.file_steps import present
from runtime.contract.rendered import Statement
from runtime.contract.sqltext import to_named
from runtime.drivers.base import Connection
from runtime.loaded import Loaded
from runtime.steps import run_step
from runtime.verify import Finding, describe, verify

log = logging.getLogger("runtime")

#: a transaction that lost a race for a catalog entry to another apply tries again this often
_TRIES = 3


@dataclass(frozen=True)
class SchemaObject:
    """A table, index or function a schema block declares: ``str(obj)`` → ``"index
    orders_queue_claim"``."""

    #: "table", "index" or "function" (a partitioned layout's rotate function)
    kind: str
    #: its name as declared (schema-qualified where the declaration qualifies it)
    name: str
    #: the table it belongs to (a table: itself)
    table: str

    def __str__(self) -> str:
        return f"{self.kind} {self.name}"


@dataclass
class Plan:
    """What apply would do for one file: the objects missing and the statements that create
    them (in the schema block's order), or the findings that stop it."""

    name: str
    missing: list[SchemaObject] = field(default_factory=list)
    statements: list[Statement] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


class SchemaDiffers(ConfigurationError):
    """A live table differs from its rendered file; apply created nothing and ``findings``
    (those of ``qgen verify``) say what differs and how to fix it."""

    def __init__(self, name: str, findings: Sequence[Finding]) -> None:
        self.findings = list(findings)
        super().__init__(
            f"queue '{name}': its live tables differ from the file and apply changes no "
            f"existing table: {'; '.join(map(str, self.findings))}"
        )


def _ident(dialect: Dialect) -> str:
    """A regex for one identifier as the generator writes it: quoted (quotes doubled
    inside) or bare, optionally schema-qualified."""
    q = re.escape(dialect.quote)
    one = rf"(?:{q}(?:[^{q}]|{q}{q})*{q}|\w+)"
    return rf"{one}(?:\.{one})*"


def _unquote(text: str, dialect: Dialect) -> str:
    q = dialect.quote
    parts = re.findall(
        rf"{re.escape(q)}((?:[^{re.escape(q)}]|{re.escape(q * 2)})*){re.escape(q)}|(\w+)", text
    )
    return ".".join((quoted.replace(q + q, q) or bare) for quoted, bare in parts)


def declared_objects(sql: str, dialect: Dialect) -> list[SchemaObject]:
    """The tables, indexes and functions one schema statement creates, in order."""
    ident = _ident(dialect)
    table = re.match(rf"\s*CREATE TABLE IF NOT EXISTS ({ident}) \(", sql)
    if table:
        name = _unquote(table.group(1), dialect)
        inline = re.finditer(rf"^\s+(?:UNIQUE )?INDEX ({ident}) \(", sql, re.MULTILINE)
        return [SchemaObject("table", name, name)] + [
            SchemaObject("index", _unquote(m.group(1), dialect), name) for m in inline
        ]
    # a partitioned layout's default partition (of the table) and its rotate function
    part = re.match(rf"\s*CREATE TABLE IF NOT EXISTS ({ident}) PARTITION OF ({ident}) ", sql)
    if part:
        name = _unquote(part.group(1), dialect)
        return [SchemaObject("table", name, name)]
    routine = re.match(rf"\s*CREATE OR REPLACE FUNCTION ({ident})\(", sql)
    if routine:
        name = _unquote(routine.group(1), dialect)
        return [SchemaObject("function", name, name)]
    index = re.match(rf"\s*CREATE (?:UNIQUE )?INDEX IF NOT EXISTS ({ident}) ON ({ident})\s", sql)
    if index:
        name, on = _unquote(index.group(1), dialect), _unquote(index.group(2), dialect)
        schema, _, _ = name.rpartition(".")
        if schema and "." not in on:  # SQLite names the schema on the index, not the table
            on = f"{schema}.{on}"
        return [SchemaObject("index", name, on)]
    raise ConfigurationError(
        f"a schema statement apply cannot read (it creates tables and indexes only): "
        f"{' '.join(sql.split())[:80]}; render the file again with `qgen render`"
    )


def plain_sql(statement: str, dialect: Dialect) -> str:
    """A statement as a person runs it in the database's own client (``%%`` is ``%``)."""
    return to_named(statement) if dialect.paramstyle == "pyformat" else str(statement)


def _where(table: str) -> dict[str, Any]:
    schema, _, name = table.rpartition(".")
    return {"table_schema": schema or None, "table_name": name}


async def _existing(conn: Any, target: Any, objects: list[SchemaObject]) -> set[SchemaObject]:
    found: set[SchemaObject] = set()
    indexes: dict[str, set[str]] = {}
    for obj in objects:
        if obj.kind == "table":
            if await describe(conn, target, obj.table):
                found.add(obj)
            continue
        if obj.kind == "function":
            step = present(target.steps.routines, target.rendered, "routines")
            if (await run_step(conn, step, _where(obj.name))).rows:
                found.add(obj)
            continue
        if obj.table not in indexes:
            rows = (await run_step(conn, target.steps.indexes, _where(obj.table))).rows
            indexes[obj.table] = {str(r["name"]) for r in rows}
        if obj.name.rpartition(".")[2] in indexes[obj.table]:
            found.add(obj)
    return found


def _explained(finding: Finding, missing: list[SchemaObject]) -> bool:
    """A finding apply is about to fix: a table it creates, or an index it creates on a
    table (not one declared inside a CREATE TABLE of a table that exists: MySQL, MariaDB)."""
    return any(
        finding.table == m.table and (m.kind == "table" or "index" in finding.problem)
        for m in missing
    )


async def plan(db: Any, target: Loaded) -> Plan:
    """What ``apply`` would create on ``db`` (a URL or a connection, as apply takes),
    changing nothing: ``plan.missing``, ``plan.statements``, and ``plan.findings`` when a live
    table differs from the file (then apply refuses)."""
    if isinstance(db, str):
        async with await connect(db) as opened:
            return await plan(opened, target)
    conn = await adapted(db)
    target.rendered.check_runs_on(conn.dialect)
    return await _plan(conn, target)


async def _plan(conn: Connection | Adapted, target: Loaded) -> Plan:
    dialect = target.rendered.dialect
    out = Plan(target.name)
    declared = [(st, declared_objects(st, dialect)) for st in target.steps.schema]
    everything = [obj for _, objs in declared for obj in objs]
    existing = await _existing(conn, target, everything)
    for st, objs in declared:
        if objs[0].kind == "table" and objs[0] in existing:
            continue  # CREATE TABLE IF NOT EXISTS does nothing: to the indexes inside it too
        new = [o for o in objs if o not in existing]
        if new:
            out.missing += new
            out.statements.append(st)
    if target.rendered.header.kind == "queue" and any(o.kind == "table" for o in existing):
        # an Adapted connection is always in a transaction: run_step never needs its begin()
        found = await verify(conn, target)  # type: ignore[arg-type]
        # a note (what the service must do with a table that matches) stops nothing
        out.findings = [f for f in found if not f.note and not _explained(f, out.missing)]
    return out


async def apply(db: Any, target: Loaded) -> list[SchemaObject]:
    """Create the tables and indexes ``target``'s schema block declares that ``db`` lacks;
    returns them (``[]``: all were there). ``await runtime.apply(db, queue)``

    ``db`` is a database URL (apply opens and closes its own connection), the runtime's
    connection with no transaction open (on PostgreSQL and SQLite one that is open holds the
    DDL until the caller commits), or a service's own connection on PostgreSQL or SQLite
    (run in its transaction; the service commits). On MySQL and MariaDB every DDL statement
    commits, a transaction open included: apply refuses a connection with one open (and a
    service's own, whose transaction it cannot see) with ConfigurationError. A queue table
    that exists but differs from the file raises SchemaDiffers and creates nothing."""
    if isinstance(db, str):
        async with await connect(db) as opened:
            return await apply(opened, target)
    conn = await adapted(db)
    target.rendered.check_runs_on(conn.dialect)
    dialect = conn.dialect
    if conn.in_transaction and not dialect.transactional_ddl:
        raise ConfigurationError(
            f"apply on {dialect.name}: a connection with a transaction open (or a service's "
            "own, whose transaction the runtime cannot see) would have it committed by the "
            "first CREATE TABLE; apply with a database URL, or the runtime's connection "
            "after commit() or rollback()"
        )
    own = isinstance(conn, Connection) and not conn.in_transaction and dialect.transactional_ddl
    tries = 1
    while True:
        try:
            created = await (_in_own_transaction if own else _apply_once)(conn, target)
            break
        except DatabaseError as exc:
            if not own or tries == _TRIES:
                raise
            tries += 1
            log.info("%s: another apply created the same objects (%s); again", target.name, exc)
    for obj in created:
        log.info("%s: created %s", target.name, obj)
    return created


async def _in_own_transaction(conn: Any, target: Loaded) -> list[SchemaObject]:
    """One transaction (SQLite: BEGIN IMMEDIATE, one writer from the first read on)."""
    await conn.begin(immediate=True)
    try:
        created = await _apply_once(conn, target)
        await conn.commit()
        return created
    except BaseException:
        if not conn.closed:
            await conn.rollback()
        raise


async def _apply_once(conn: Connection | Adapted, target: Loaded) -> list[SchemaObject]:
    found = await _plan(conn, target)
    if found.findings:
        raise SchemaDiffers(target.name, found.findings)
    for st in found.statements:
        await conn.execute(st, {})
    rotate = target.steps.rotate
    for st in rotate or ():  # a partitioned layout: the partitions for the days ahead
        await conn.execute(st, {"age_s": None, "group": None})
    if found.statements and target.rendered.header.kind == "queue":
        found_after = await verify(conn, target)  # type: ignore[arg-type]  # Adapted: as in _plan
        left = [f for f in found_after if not f.note]
        if left:  # the file's DDL and verify disagree (a bug): say so; DDL rolls back where it can
            raise SchemaDiffers(target.name, left)
    return found.missing


def apply_sync(db: Any, target: Loaded) -> list[SchemaObject]:
    """``apply`` for blocking code: ``db`` is a database URL (apply opens its own connection
    on a fresh event loop) or a blocking connection (psycopg, sqlite3, SQLAlchemy Connection
    or Session; PostgreSQL and SQLite: in its transaction, the caller commits).
    ``runtime.apply_sync("sqlite:///app.db", queue)``; also ``queue.sync.apply(db)``."""
    if isinstance(db, str):
        return asyncio.run(apply(db, target))
    return run_sync(apply(adapt(db, sync=True), target))


__all__ = [
    "Plan",
    "SchemaDiffers",
    "SchemaObject",
    "apply",
    "apply_sync",
    "declared_objects",
    "plain_sql",
    "plan",
]
