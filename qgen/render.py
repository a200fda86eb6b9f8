"""Declaration × dialect → one draft file: the Jinja environment, the header, overrides and custom events.

The draft is not yet a file: ``qgen.build`` writes it, reads it back with the runtime's reader,
validates what it read, and seals it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from qgen.declaration import (
    OUTBOX_COLUMNS,
    QUEUE_COLUMNS,
    Limits,
    OutboxDeclaration,
    QueueDeclaration,
    Sql,
    Unit,
    short_name,
)
from runtime.contract.dialects import DIALECTS, PENDING_KEY, Dialect
from runtime.contract.rendered import Block, Header, Kind, Statement, split_statements, write_file
from runtime.contract.sqltext import to_driver

_HERE = Path(__file__).resolve().parent
# an installed wheel carries the templates inside the package; a checkout has them beside it
TEMPLATES = next(
    (p for p in (_HERE / "templates", _HERE.parent / "templates") if p.is_dir()),
    _HERE.parent / "templates",
)
# dialects that read another's templates where they have none of their own
TEMPLATE_PARENT = {"mariadb": "mysql"}
_NAME_LINE = re.compile(r"^-- name: (\S+)$", re.M)


@dataclass
class DraftBlock:
    """One named block before it is written: a line saying what it does, then its SQL."""

    name: str
    doc: str
    sql: list[str]
    #: where it came from, for errors: "template", "statements.ack", "custom.park"
    origin: str = "template"


@dataclass
class Draft:
    """One file as rendered, before it is read back, validated, sealed and written."""

    unit: Unit
    dialect: Dialect
    header: Header
    blocks: list[DraftBlock] = field(default_factory=list)

    def text(
        self,
        kinds: dict[str, tuple[Kind, ...]] | None = None,
        blocks: list[DraftBlock] | None = None,
    ) -> str:
        """The file's text (or one with only ``blocks``); each statement's kind is the
        validator's, ``writes`` until the validator has read it."""
        kinds = kinds or {}

        def step(b: DraftBlock) -> tuple[Statement, ...]:
            ks = kinds.get(b.name) or (Kind.WRITES,) * len(b.sql)
            return tuple(Statement(sql, k) for sql, k in zip(b.sql, ks, strict=True))

        return write_file(
            self.header,
            [Block(b.name, b.doc, step(b)) for b in (self.blocks if blocks is None else blocks)],
        )


_ENVIRONMENTS: dict[str, jinja2.Environment] = {}


def environment() -> jinja2.Environment:
    """One Jinja environment per templates folder for the process: each template compiles
    once, and Jinja reloads one whose file changed since (its loader checks the time)."""
    folder = str(TEMPLATES)
    env = _ENVIRONMENTS.get(folder)
    if env is None:
        env = _ENVIRONMENTS[folder] = jinja2.Environment(
            loader=jinja2.FileSystemLoader(folder),
            undefined=jinja2.StrictUndefined,
            keep_trailing_newline=True,
            autoescape=False,
        )
    return env


def _template_for(env: jinja2.Environment, dialect: str, name: str) -> str:
    d: str | None = dialect
    while d:
        candidate = f"{d}/{name}"
        if Path(TEMPLATES, candidate).is_file():
            return candidate
        d = TEMPLATE_PARENT.get(d)
    return f"base/{name}"


_short_name = short_name


def _enqueued_columns(unit: Unit, dialect: Dialect, c: dict[str, str]) -> list[str]:
    """(group, enqueued_at) for a queue that keeps enqueued_at, where the engine has partial
    indexes; none otherwise (MySQL's claim index carries enqueued_at last instead)."""
    if not isinstance(unit, QueueDeclaration) or not unit.has("enqueued_at"):
        return []
    if not dialect.partial_index:
        return []
    return [*(c[k] for k in ("group",) if k in c), c["enqueued_at"]]


def context(unit: Unit, dialect: Dialect) -> dict[str, Any]:
    """What a template sees: quoted identifiers by their logical name, and small helpers."""
    order = QUEUE_COLUMNS if isinstance(unit, QueueDeclaration) else OUTBOX_COLUMNS
    q = dialect.quote_ident
    c = {logical: q(unit.columns[logical]) for logical in order if logical in unit.columns}
    dead = unit.dead_letter if isinstance(unit, QueueDeclaration) else None
    others = unit.other_columns if isinstance(unit, QueueDeclaration) else ()
    schema, _, bare = unit.table.rpartition(".")
    index = q(short_name(f"{bare}_claim"))
    index_columns: list[str] = []
    if isinstance(unit, QueueDeclaration) and any(
        unit.has(k) for k in ("group", "processed_at", "priority")
    ):
        index_columns = [c[k] for k in ("group",) if k in c]
        if not dialect.partial_index and unit.has("processed_at"):
            index_columns.append(c["processed_at"])
        if unit.has("priority"):  # the claim reads higher priority first, then id
            index_columns.append(f"{c['priority']} DESC")
        index_columns.append(c["id"])
        if not dialect.partial_index and unit.has("enqueued_at"):
            # the per-minute chart's range scan (group, processed_at) reads enqueued_at here
            # instead of from the table: no index of its own, so no more for a settlement
            # to move (enqueued_at is never updated)
            index_columns.append(c["enqueued_at"])
    # kept rows: an index over the processed ones, for prune and the processed count
    # (MySQL's claim index already leads with group, processed_at)
    processed = q(short_name(f"{bare}_processed"))
    processed_columns: list[str] = []
    if isinstance(unit, QueueDeclaration) and unit.has("processed_at") and dialect.partial_index:
        processed_columns = [c[k] for k in ("group", "processed_at", "id") if k in c]
    # enqueued_at: the partial index the console's per-minute chart counts the unfinished
    # rows of the last hour by (group, enqueued_at), without reading the table. enqueued_at
    # is written once, at enqueue: a claim (HOT on PostgreSQL) or a settlement (whose row
    # leaves the predicate) writes nothing in it
    enqueued = q(short_name(f"{bare}_enqueued"))
    enqueued_columns = _enqueued_columns(unit, dialect, c)
    # a fifo_key: the index the claim's "no earlier unfinished row of my key" reads
    fifo = q(short_name(f"{bare}_fifo"))
    fifo_columns: list[str] = []
    if isinstance(unit, QueueDeclaration) and unit.has("fifo_key"):
        fifo_columns = [c["fifo_key"]]
        if not dialect.partial_index and unit.has("processed_at"):
            fifo_columns.append(c["processed_at"])
        fifo_columns.append(c["id"])
    dedupe = q(_short_name(f"{bare}_dedupe"))
    # limits: the (concurrency_key, [processed_at], id) index the per-key window reads, and
    # the table of the queue's token bucket and in-flight slots
    limits = unit.limits if isinstance(unit, QueueDeclaration) else Limits()
    keyed = q(_short_name(f"{bare}_concurrency"))
    key_columns: list[str] = []
    if limits.concurrency_limit is not None:
        key_columns = [c["concurrency_key"]]
        if not dialect.partial_index and unit.has("processed_at"):
            key_columns.append(c["processed_at"])
        key_columns.append(c["id"])
    # max_in_flight on a lease queue: the (group, [processed_at], locked_until) index its
    # count of the leases held reads (without it, a scan of every pending row per claim)
    flight = q(_short_name(f"{bare}_in_flight"))
    flight_columns: list[str] = []
    if limits.max_in_flight is not None and unit.has("locked_until"):
        flight_columns = [c[k] for k in ("group",) if k in c]
        if not dialect.partial_index and unit.has("processed_at"):
            flight_columns.append(c["processed_at"])
        flight_columns.append(c["locked_until"])
    limits_table = _short_name(f"{bare}_limits")

    def pending(alias: str = "") -> list[str]:
        """What keeps a row's dedupe key taken: not processed, not in the dead-letter group."""
        out = []
        if unit.has("processed_at"):
            out.append(f"{alias}{c['processed_at']} IS NULL")
        if dead and dead.group is not None:
            out.append(f"{alias}{c['group']} <> {dialect.quote_text(dead.group)}")
        return out

    return {
        "d": dialect,
        "q": unit,
        "t": dialect.quote_table(unit.table),
        "table_name": unit.table,
        #: the table without its schema, and the claim index as SQLite's CREATE INDEX names it
        "t_bare": q(bare),
        "index_ref": f"{q(schema)}.{index}" if schema else index,
        "c": c,
        #: every column of the table: (role, quoted name), then ("other", name) for the rest
        "columns": [*c.items(), *(("other", q(o)) for o in others)],
        #: the SQL types other_columns declares, by quoted name (the rest: the dialect's text)
        "other_types": {
            q(o): t
            for o, t in (unit.other_types if isinstance(unit, QueueDeclaration) else {}).items()
        },
        #: the columns without a role: (quoted name, the enqueue's parameter for its value)
        "others": [(q(o), dialect.placeholder(f"value_{o}")) for o in others],
        "has": unit.has,
        "p": dialect.placeholder,
        "alias": q,
        "dead_letter": dead,
        "dead_table": bool(dead and dead.table),
        "dt": dialect.quote_table(dead.table) if dead and dead.table else None,
        "index_name": index,
        "index_columns": index_columns,
        "processed_index": processed,
        "processed_index_ref": f"{q(schema)}.{processed}" if schema else processed,
        "processed_columns": processed_columns,
        "enqueued_index": enqueued,
        "enqueued_index_ref": f"{q(schema)}.{enqueued}" if schema else enqueued,
        "enqueued_columns": enqueued_columns,
        "fifo_index": fifo,
        "fifo_index_ref": f"{q(schema)}.{fifo}" if schema else fifo,
        "fifo_columns": fifo_columns,
        "channel": channel(unit, dialect),
        #: dedupe_key: one pending row per key (per group), held by a unique index
        "dedupe_index": dedupe,
        "dedupe_index_ref": f"{q(schema)}.{dedupe}" if schema else dedupe,
        "dedupe_columns": [c[k] for k in ("group", "dedupe_key") if k in c],
        "pending": pending,
        "pending_key": q(PENDING_KEY),
        "limits": limits,
        "key_index": keyed,
        "key_index_ref": f"{q(schema)}.{keyed}" if schema else keyed,
        "key_columns": key_columns,
        "flight_index": flight,
        "flight_index_ref": f"{q(schema)}.{flight}" if schema else flight,
        "flight_columns": flight_columns,
        "lt": dialect.quote_table(f"{schema}.{limits_table}" if schema else limits_table),
        #: the bucket a queue's limits are counted in: its group, or its name
        "bucket": dialect.placeholder("group")
        if unit.has("group")
        else dialect.quote_text(unit.name),
        #: schedules: the table keeping each one's last decided slot
        "schedules": unit.schedules if isinstance(unit, QueueDeclaration) else (),
        "st": (
            dialect.quote_table(unit.schedule_table)
            if isinstance(unit, QueueDeclaration) and unit.schedule_table
            else None
        ),
        #: pausing (base/pause.sql.j2): the table of paused scopes, and the text its rows
        #: name this queue's table by
        "pt": dialect.quote_table(unit.pause_table)
        if isinstance(unit, QueueDeclaration) and unit.pause_table
        else None,
        "pause_key": dialect.quote_text(unit.table),
        **_layout(unit, dialect),
    }


def _layout(unit: Unit, dialect: Dialect) -> dict[str, Any]:
    """A partitioned layout (templates/postgres/partitions.sql.j2): the default partition
    the pending rows live in, the rotate function, and the names its body builds."""
    if not isinstance(unit, QueueDeclaration) or not unit.partitioned:
        return {"partitioned": False}
    schema, dot, bare = unit.table.rpartition(".")
    pending = pending_table(unit)
    assert pending is not None
    rotate = f"{schema}{dot}{short_name(bare + '_rotate')}"
    return {
        "partitioned": True,
        "tp": dialect.quote_table(pending),
        "tp_name": pending,
        "rotate_fn": dialect.quote_table(rotate),
        "rotate_name": rotate,
        "part_hours": unit.partition_hours,
        "part_schema": dialect.quote_text(schema) if schema else "current_schema()",
        "part_bare": dialect.quote_text(bare),
        "id_index": q_(dialect, short_name(f"{bare}_id")),
        "pending_id_index": q_(dialect, short_name(f"{bare}_pending_id")),
    }


def q_(dialect: Dialect, name: str) -> str:
    return dialect.quote_ident(name)


def channel(unit: Unit, dialect: Dialect) -> str | None:
    """The channel a queue's enqueue notifies on an engine with LISTEN/NOTIFY (``qgen.<table>``,
    within 63 bytes), else None. Queues on one table share it."""
    if not isinstance(unit, QueueDeclaration) or not dialect.listen_notify:
        return None
    return short_name(f"qgen.{unit.table}")


def _template_blocks(text: str) -> list[DraftBlock]:
    """A template's output cut at its `-- name:` lines, its SQL cut by the runtime's own
    statement splitter."""
    parts = _NAME_LINE.split(text)
    out = []
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip("\n").split("\n")
        doc = lines[0].removeprefix("-- ").strip()
        statements = split_statements([ln.rstrip() for ln in lines[1:]])
        if statements is None:
            raise ValueError(f"template block {name!r} has SQL after its last ';'")
        out.append(DraftBlock(name=name, doc=doc, sql=[s.strip() for s in statements]))
    return out


def _with_limits(blocks: list[DraftBlock], limits: list[DraftBlock]) -> list[DraftBlock]:
    """The form's blocks with its limits' (templates/*/limits.sql.j2): a limits block named
    as a form's block joins it (``claim``: its statements run first, in the claim's
    transaction; ``schema``: after), its line saying what it adds; the rest are blocks of
    their own, after the claim."""
    by_name = {b.name: b for b in blocks}
    extra: list[DraftBlock] = []
    for lb in limits:
        block = by_name.get(lb.name)
        if block is None:
            extra.append(lb)
            continue
        block.doc = block.doc.removesuffix(".") + lb.doc
        block.sql = [*lb.sql, *block.sql] if lb.name == "claim" else [*block.sql, *lb.sql]
    at = next(i for i, b in enumerate(blocks) if b.name == "claim") + 1
    return [*blocks[:at], *extra, *blocks[at:]]


def _service_sql(sql: Sql, dialect: Dialect) -> list[str]:
    return [to_driver(s, dialect) for s in sql.for_dialect(dialect.name)]


#: statements that finish rows as ``ack_many`` does, beside what else they do
_FINISHES_AS_ACK = frozenset({"ack_claim"})


def render_unit(unit: Unit, dialect_name: str, env: jinja2.Environment | None = None) -> Draft:
    """Render one queue (or the outbox) for one dialect: ``render_unit(q, "postgres")``.

    ``qgen.build.build_unit`` turns the draft into the validated, sealed file.
    """
    env = env or environment()
    dialect = DIALECTS[dialect_name]
    ctx = context(unit, dialect)
    ctx["x"] = env.get_template(_template_for(env, dialect.name, "expr.sql.j2")).make_module(ctx)
    limits = env.get_template(_template_for(env, dialect.name, "limits.sql.j2"))
    ctx["lim"] = limits.make_module(ctx)
    form = unit.form if isinstance(unit, QueueDeclaration) else "outbox"
    text = env.get_template(_template_for(env, dialect.name, f"{form}.sql.j2")).render(ctx)
    blocks = _template_blocks(text)
    if ctx["limits"]:
        # the limits' statements run before the claim: a claim that also settles (ack_claim)
        # would claim past them, so such a file has none
        blocks = [b for b in blocks if b.name not in _FINISHES_AS_ACK]
        blocks = _with_limits(blocks, _template_blocks(limits.render(ctx)))

    # a declared override settles its outcome one delivery at a time: no `<outcome>_many`,
    # and no statement that finishes rows as ack_many does (``ack_claim``)
    blocks = [
        b
        for b in blocks
        if not (b.name.endswith("_many") and b.name.removesuffix("_many") in unit.statements)
        and not (b.name in _FINISHES_AS_ACK and "ack" in unit.statements)
    ]
    by_name = {b.name: b for b in blocks}
    for outcome, sql in unit.statements.items():
        block = by_name.get(outcome)
        if block is None:  # e.g. an override of retry for a table without attempt
            block = DraftBlock(name=outcome, doc="", sql=[])
            blocks.append(block)
        block.sql = _service_sql(sql, dialect)
        block.doc = f"The table's own statement for {outcome} (declared in statements.{outcome})."
        block.origin = f"statements.{outcome}"
    for name in sorted(unit.custom):
        blocks.append(
            DraftBlock(
                name=f"custom.{name}",
                doc=f"The service's own event {name!r}, run in place of the outcome's own statement.",
                sql=_service_sql(unit.custom[name], dialect),
                origin=f"custom.{name}",
            )
        )
    return Draft(unit=unit, dialect=dialect, header=header(unit, dialect), blocks=blocks)


def header(unit: Unit, dialect: Dialect) -> Header:
    """The settings the runtime reads back, typed (``runtime.contract.rendered.Header``)."""
    if isinstance(unit, OutboxDeclaration):
        note = None
        if not dialect.skip_locked:
            note = (
                "the relay's BEGIN IMMEDIATE holds the database's write lock while its handler "
                "runs: one relay at a time, and put waits for the relay's batch"
            )
        return Header(
            kind="outbox",
            name=unit.name,
            dialect=dialect.name,
            table=unit.table,
            columns=dict(unit.columns),
            note=note,
        )
    note = None
    if unit.form == "advisory" and not dialect.server_advisory:
        note = (
            "advisory keys are held in the consumer's process: run one consumer process "
            "per database file"
        )
    elif unit.form == "row_lock" and not dialect.skip_locked:
        note = (
            "BEGIN IMMEDIATE holds the database's write lock while the handler runs: "
            "correct but serial"
        )
    dead = unit.dead_letter
    return Header(
        kind="queue",
        name=unit.name,
        dialect=dialect.name,
        form=unit.form,
        table=unit.table,
        columns=dict(unit.columns),
        max_attempts=unit.max_attempts,
        dead_group=dead.group if dead else None,
        dead_table=dead.table if dead else None,
        lease_s=unit.lease_s,
        default_group=unit.default_group,
        other_columns=tuple(unit.other_columns),
        note=note,
        channel=channel(unit, dialect),
        schedules=unit.schedules,
        schedule_table=unit.schedule_table,
        pause_table=unit.pause_table,
        pending_table=pending_table(unit),
    )


def pending_table(unit: QueueDeclaration) -> str | None:
    """A partitioned layout's default partition (``<table>_pending``, beside it), else None."""
    if not unit.partitioned:
        return None
    schema, dot, bare = unit.table.rpartition(".")
    return f"{schema}{dot}{short_name(bare + '_pending')}"
