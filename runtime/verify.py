"""Compare a live table with its rendered file: the columns each role needs, with types that
keep the queue exact, the attempt default, the claim's index, and what the enqueue leaves
empty. ``qgen verify`` prints what differs with the fix; the consumer runs the attempt check
before it claims anything.

Everything here reads the database through the file's own ``columns`` and ``indexes``
statements: rendered, validated and reviewed like every other.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from runtime.contract.dialects import PENDING_KEY
from runtime.drivers.base import Connection
from runtime.loaded import Loaded
from runtime.steps import run_step

#: the column types that keep each role exact, per engine (the type as the database names it)
ROLE_TYPES: dict[str, dict[str, str]] = {
    "postgres": {
        "id": r"bigint|integer",
        "payload": r"jsonb|json|text",
        "group": r"text|character varying.*",
        "dedupe_key": r"text|character varying.*",
        "attempt": r"integer|bigint|smallint",
        "time": r"timestamp with time zone",
        # up to LAST_ERROR_MAX characters: a VARCHAR(n) would refuse a longer one
        "last_error": r"text",
    },
    # DATETIME(6): a lease token is the expiry to the microsecond; fewer digits lose it
    "mysql": {
        "id": r"(big)?int.*",
        "payload": r"json|(long|medium)?text",
        "group": r"varchar.*|char.*",
        "dedupe_key": r"varchar.*",
        "attempt": r"(big|small|tiny|medium)?int.*",
        "time": r"datetime\(6\)",
        "last_error": r"(long|medium)?text",
    },
    # SQLite stores times as ISO text: any type but an INTEGER or REAL one keeps them as written
    "sqlite": {
        "id": r"integer",
        "payload": r"text|json|",
        "group": r"text|varchar.*|",
        "dedupe_key": r"text|varchar.*|",
        "attempt": r"int.*",
        "time": r"(?!.*(int|real|floa|doub)).*",
        "last_error": r"text|clob|",
    },
}
_TIME_ROLES = ("retry_after", "locked_until", "processed_at", "enqueued_at")
#: roles kept in the same types as another's: a priority is a whole number like attempt
_TYPE_LIKE = {
    "priority": "attempt",
    "fifo_key": "group",
    "result": "payload",
    "progress": "payload",
}


@dataclass(frozen=True)
class Finding:
    """One difference between the table and its file, with the fix; a ``note`` is what the
    service must do with a table that otherwise matches (``qgen verify`` still exits 0)."""

    table: str
    problem: str
    fix: str
    note: bool = False

    def __str__(self) -> str:
        if self.note:
            return f"note: {self.table}: {self.problem}; {self.fix}"
        return f"{self.table}: {self.problem}; fix: {self.fix}"


#: a column type's family, as the database names it: a move between the queue and its
#: dead-letter table copies each column, which needs the same family on both sides
_FAMILIES = (
    ("int", r"(big|small|tiny|medium)?int(eger)?\b.*|(big|small)?serial|int[248]"),
    ("json", r"jsonb?"),
    ("text", r"(long|medium|tiny)?text|(character )?varying.*|(var)?char.*|character.*|string"),
    ("time", r"timestamp.*|datetime.*|date|time( .*)?"),
    ("decimal", r"numeric.*|decimal.*"),
    ("float", r"real|double.*|float.*"),
    ("bool", r"bool(ean)?"),
    ("bytes", r"bytea|(long|medium|tiny)?blob|(var)?binary.*"),
)


def type_family(type_name: str, dialect: str) -> str:
    """``bigint`` → int, ``character varying(40)`` → text, ``DATETIME(6)`` → time; a type it
    does not know is its own family. MariaDB describes JSON as longtext: text there."""
    kind = " ".join(str(type_name).lower().split())
    for family, pattern in _FAMILIES:
        if re.fullmatch(pattern, kind):
            return "text" if family == "json" and dialect in ("mysql", "mariadb") else family
    return kind


def _split(table: str) -> dict[str, Any]:
    schema, _, name = table.rpartition(".")
    return {"table_schema": schema or None, "table_name": name}


async def describe(conn: Connection, queue: Loaded, table: str) -> dict[str, dict[str, Any]]:
    """The table's columns as the database describes them, by name."""
    rows = (await run_step(conn, queue.steps.columns, _split(table))).rows
    return {str(r["name"]): r for r in rows}


def _default(row: dict[str, Any]) -> str | None:
    value = row.get("default")
    if value is None or str(value).upper() == "NULL":
        return None
    return str(value).strip("'").split("::", 1)[0]


def attempt_problem(queue: Loaded, columns: dict[str, dict[str, Any]]) -> Finding | None:
    """The attempt column must default to 1: the number the first delivery reads."""
    name = queue.columns.get("attempt")
    row = columns.get(name) if name else None
    if row is None or _default(row) == "1":
        return None
    found = _default(row)
    return Finding(
        queue.table,
        f"the attempt column {name!r} defaults to {found if found is not None else 'nothing'}, "
        "not 1: ctx.attempt would not read 1 on the first delivery and the cap would count "
        "wrong",
        f"ALTER TABLE {queue.table} ALTER COLUMN {name} SET DEFAULT 1 (SQLite: rebuild the "
        "table with DEFAULT 1), after setting the rows waiting now to the number their next "
        "delivery should read",
    )


def _column_findings(queue: Loaded, cols: dict[str, dict[str, Any]]) -> list[Finding]:
    """Each role's column present and of a type that keeps the queue exact; each other column
    present."""
    types = ROLE_TYPES[queue.dialect.name if queue.dialect.name != "mariadb" else "mysql"]
    t, found = queue.table, []
    for role, name in queue.columns.items():
        row = cols.get(name)
        if row is None:
            found.append(Finding(t, f"no column {name!r} (role {role})", f"add {name} to {t}"))
            continue
        pattern = types["time" if role in _TIME_ROLES else _TYPE_LIKE.get(role, role)]
        kind = str(row["type"]).lower()
        if not re.fullmatch(pattern, kind):
            found.append(
                Finding(
                    t,
                    f"column {name!r} (role {role}) is {kind}, which does not keep the queue exact",
                    f"make it one of: {pattern.replace('|', ', ')}",
                )
            )
    for name in queue.rendered.header.other_columns:
        if name not in cols:
            found.append(Finding(t, f"no column {name!r} (other_columns)", f"add {name} to {t}"))
    return found


def _id_finding(queue: Loaded, cols: dict[str, dict[str, Any]]) -> list[Finding]:
    """The id column is the database's to number."""
    id_row = cols.get(queue.columns["id"])
    if id_row is None or id_row.get("generated"):
        return []
    return [
        Finding(
            queue.table,
            f"the id column {queue.columns['id']!r} is not generated by the database",
            "make it an identity / AUTO_INCREMENT / INTEGER PRIMARY KEY column",
        )
    ]


def _empty_column_findings(queue: Loaded, cols: dict[str, dict[str, Any]]) -> list[Finding]:
    """NOT NULL columns the enqueue may leave empty: other columns (a note) and columns it
    never writes that have no default."""
    t, found = queue.table, []
    written = {
        queue.columns[r] for r in ("id", "payload", "group", "retry_after") if r in queue.columns
    }
    others = queue.rendered.header.other_columns
    written |= set(others)
    for name in others:
        row = cols.get(name)
        if row is not None and not row.get("nullable"):
            found.append(
                Finding(
                    t,
                    f"column {name!r} (other_columns) is NOT NULL, and an enqueue whose values= "
                    "leaves it out writes NULL there (its default does not apply)",
                    f"every enqueue needs values={{{name!r}: …}}",
                    note=True,
                )
            )
    for name, row in cols.items():
        empty = not row.get("nullable") and _default(row) is None and not row.get("generated")
        if empty and name not in written:
            found.append(
                Finding(
                    t,
                    f"column {name!r} is NOT NULL without a default, and the enqueue leaves it "
                    "empty",
                    "list it in other_columns and pass values={...} to enqueue, or give it a "
                    "default",
                )
            )
    return found


async def _dead_letter_findings(
    conn: Connection, queue: Loaded, cols: dict[str, dict[str, Any]]
) -> list[Finding]:
    """The dead-letter table exists and can hold each of the queue table's rows as it is."""
    dead = queue.rendered.header.dead_table
    if dead is None:
        return []
    found: list[Finding] = []
    dead_cols = await describe(conn, queue, dead)
    missing = [
        c
        for c in [*queue.columns.values(), *queue.rendered.header.other_columns]
        if c not in dead_cols
    ]
    if not dead_cols:
        found.append(
            Finding(
                dead, "the dead-letter table does not exist", "run the file's schema statements"
            )
        )
    elif missing:
        found.append(
            Finding(
                dead, f"the dead-letter table lacks {', '.join(missing)}", f"add them to {dead}"
            )
        )
    if dead_cols:
        found += _dead_table_findings(queue, cols, dead_cols)
    return found


async def _pause_findings(conn: Connection, queue: Loaded) -> list[Finding]:
    pause = queue.rendered.header.pause_table
    if pause is None or await describe(conn, queue, pause):
        return []
    return [
        Finding(
            pause,
            "the pause table does not exist, and every claim reads it",
            "run the file's schema statements (`qgen apply`)",
        )
    ]


async def verify(conn: Connection, queue: Loaded) -> list[Finding]:
    """Everything about the queue's live tables that differs from its file."""
    cols = await describe(conn, queue, queue.table)
    if not cols:
        return [
            Finding(queue.table, "the table does not exist", "run the file's schema statements")
        ]
    found = _column_findings(queue, cols)
    problem = attempt_problem(queue, cols)
    if problem is not None:
        found.append(problem)
    found += _id_finding(queue, cols)
    found += _empty_column_findings(queue, cols)
    found += await _index_findings(conn, queue)
    if "dedupe_key" in queue.columns:
        found += await _dedupe_index_findings(conn, queue)
    found += await _dead_letter_findings(conn, queue, cols)
    found += await _pause_findings(conn, queue)
    found += await _partition_findings(conn, queue, cols)
    return found


async def _partition_findings(
    conn: Connection, queue: Loaded, cols: dict[str, dict[str, Any]]
) -> list[Finding]:
    """A file with a partitioned layout names the default partition that holds the pending
    rows; a table created plain (before the layout was declared) has none, and the file's
    acks and enqueues would fail on it. The other way round, a partitioned table behind a
    plain file that keeps processed_at: its settlements set processed_at in place, which
    moves a row to another partition where that is the key, and a claim that meets a row
    so moved fails (the columns statement says whether the table is partitioned, where the
    engine can tell)."""
    pending = queue.rendered.header.pending_table
    if pending is None:
        partitioned = any(row.get("partitioned") for row in cols.values())
        if not partitioned or "processed_at" not in queue.columns:
            return []
        return [
            Finding(
                queue.table,
                "the table is partitioned, but the file has the plain layout: its "
                "settlements set processed_at in place, which moves a row to another "
                "partition where processed_at is the key, and a claim that meets a row so "
                "moved fails",
                'declare layout = "partitioned" and render again (the file then moves a '
                "finished row by a delete and an insert), or recreate the table plain",
            )
        ]
    if await describe(conn, queue, pending):
        return []
    return [
        Finding(
            queue.table,
            f"the file lays the table out in partitions, but {pending}, its partition of "
            "pending rows, does not exist: the table was created with the plain layout",
            f"rename {queue.table}, run the file's schema statements and copy the rows "
            'across (INSERT … SELECT), or declare layout = "plain" and render again',
        )
    ]


def _dead_table_findings(
    queue: Loaded, cols: dict[str, dict[str, Any]], dead_cols: dict[str, dict[str, Any]]
) -> list[Finding]:
    """The dead-letter table holds each row of the queue table as it is, and a redrive moves
    it back: each column must be of the same type family on both sides, and nullable there
    where it is nullable here."""
    dialect, dead, found = queue.dialect.name, queue.rendered.header.dead_table, []
    for name in [*queue.columns.values(), *queue.rendered.header.other_columns]:
        live, kept = cols.get(name), dead_cols.get(name)
        if live is None or kept is None:
            continue
        here, there = type_family(live["type"], dialect), type_family(kept["type"], dialect)
        if here != there:
            found.append(
                Finding(
                    str(dead),
                    f"column {name!r} is {str(kept['type']).lower()} in the dead-letter table "
                    f"but {str(live['type']).lower()} in {queue.table}: a move to the dead "
                    "letter or a redrive would fail or change its values",
                    f"give {dead}.{name} the type {str(live['type']).lower()} (declare it "
                    f'under other_columns, e.g. {{ {name} = "{str(live["type"]).upper()}" }}, '
                    "and the schema block creates both tables alike)",
                )
            )
        elif live.get("nullable") and not kept.get("nullable"):
            found.append(
                Finding(
                    str(dead),
                    f"column {name!r} is NOT NULL in the dead-letter table but nullable in "
                    f"{queue.table}: moving a row without a value there would fail",
                    f"make {dead}.{name} nullable",
                )
            )
    return found


async def _index_findings(conn: Connection, queue: Loaded) -> list[Finding]:
    """The claim reads an index led by (group, [processed_at where no partial index],
    [priority], id); a fifo_key's check one led by (fifo_key, [processed_at], id)."""
    c = queue.columns
    kept = not queue.dialect.partial_index and "processed_at" in c
    needed: list[tuple[list[str], str]] = []
    if any(k in c for k in ("group", "processed_at", "priority")):  # else: the primary key
        lead = [c[k] for k in ("group",) if k in c] + ([c["processed_at"]] if kept else [])
        needed.append(([*lead, *([c["priority"]] if "priority" in c else []), c["id"]], "claim"))
    if "fifo_key" in c:
        lead = [c["fifo_key"], *([c["processed_at"]] if kept else []), c["id"]]
        needed.append((lead, "check for a key's earlier rows"))
    if not needed:
        return []
    # where the engine has partial indexes, the claim's skips finished rows by its predicate
    partial = queue.dialect.partial_index and "processed_at" in c
    rows = (await run_step(conn, queue.steps.indexes, _split(queue.table))).rows
    found = []
    for lead, use in needed:
        if not any(
            str(r["columns"] or "").split(",")[: len(lead)] == lead
            and (r["partial"] or not partial)
            for r in rows
        ):
            found.append(
                Finding(
                    queue.table,
                    f"no {'partial ' if partial else ''}index led by ({', '.join(lead)}) for the "
                    f"{use}: it would read finished rows too",
                    "run the CREATE INDEX of the file's schema block",
                )
            )
    return found


async def _dedupe_index_findings(conn: Connection, queue: Loaded) -> list[Finding]:
    """dedupe_key holds only under the schema's unique index over (group, key): partial over
    the pending rows where the engine has partial indexes, else over the generated column
    (the ``indexes`` statement lists columns, not uniqueness: its name and columns are read)."""
    c = queue.columns
    pending = "processed_at" in c or queue.rendered.header.dead_group is not None
    key = c["dedupe_key"] if queue.dialect.partial_index or not pending else PENDING_KEY
    want = ([c["group"]] if "group" in c else []) + [key]
    partial = queue.dialect.partial_index and pending
    # a partitioned layout keeps it on the default partition, where the pending rows are
    table = queue.rendered.header.pending_table or queue.table
    rows = (await run_step(conn, queue.steps.indexes, _split(table))).rows
    for r in rows:
        if str(r["columns"] or "").split(",") == want and (r["partial"] or not partial):
            return []
    return [
        Finding(
            queue.table,
            f"no unique {'partial ' if partial else ''}index on ({', '.join(want)}): "
            "two pending messages could hold one dedupe_key",
            "run the file's schema statements (its CREATE UNIQUE INDEX, or on MySQL and "
            "MariaDB the generated column and its UNIQUE INDEX)",
        )
    ]
