"""Declaration × dialect → one rendered file: the Jinja environment, the header, overrides and custom events."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import jinja2

from qgen.declaration import OUTBOX_COLUMNS, QUEUE_COLUMNS, Declaration, Outbox, Queue, Sql
from runtime.dialects import DIALECTS, Dialect
from runtime.sqltext import to_driver

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
class Statement:
    """One named block of a rendered file: a line saying what it does, then its SQL."""

    name: str
    doc: str
    sql: list[str]
    #: where it came from, for errors: "template", "statements.ack", "custom.park"
    origin: str = "template"


@dataclass
class Rendered:
    """One rendered file before it is written: its header and its statements."""

    queue: Queue | Outbox
    dialect: Dialect
    header: dict[str, str]
    statements: list[Statement] = field(default_factory=list)

    def text(self) -> str:
        lines = [
            "-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; "
            "change the declaration and render again.",
        ]
        lines += [f"-- {k}: {v}" for k, v in self.header.items()]
        for st in self.statements:
            lines += ["", f"-- name: {st.name}", f"-- {st.doc}"]
            lines += [f"{s};" for s in st.sql]
        return "\n".join(lines) + "\n"


def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )


def _template_for(env: jinja2.Environment, dialect: str, name: str) -> str:
    d: str | None = dialect
    while d:
        candidate = f"{d}/{name}"
        if Path(TEMPLATES, candidate).is_file():
            return candidate
        d = TEMPLATE_PARENT.get(d)
    return f"base/{name}"


def _short_name(name: str) -> str:
    """An identifier within 63 characters: long names keep a prefix and gain a hash."""
    if len(name) <= 63:
        return name
    return name[:54] + "_" + hashlib.sha1(name.encode()).hexdigest()[:8]


def context(unit: Queue | Outbox, dialect: Dialect) -> dict:
    """What a template sees: quoted identifiers by their logical name, and small helpers."""
    order = QUEUE_COLUMNS if isinstance(unit, Queue) else OUTBOX_COLUMNS
    q = dialect.quote_ident
    c = {logical: q(unit.columns[logical]) for logical in order if logical in unit.columns}
    dead = unit.dead_letter if isinstance(unit, Queue) else None
    index_columns: list[str] = []
    if isinstance(unit, Queue) and (unit.has("group") or unit.has("processed_at")):
        index_columns = [c[k] for k in ("group",) if k in c]
        if not dialect.partial_index and unit.has("processed_at"):
            index_columns.append(c["processed_at"])
        index_columns.append(c["id"])
    return {
        "d": dialect,
        "q": unit,
        "t": q(unit.table),
        "table_name": unit.table,
        "c": c,
        "columns": list(c.items()),
        "has": unit.has,
        "p": dialect.placeholder,
        "alias": q,
        "dead_letter": dead,
        "dead_table": bool(dead and dead.table),
        "dt": q(dead.table) if dead and dead.table else None,
        "index_name": q(_short_name(f"{unit.table}_claim")),
        "index_columns": index_columns,
    }


def _parse_blocks(text: str) -> list[Statement]:
    """Split a template's output at its `-- name:` lines into statements."""
    parts = _NAME_LINE.split(text)
    out = []
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        lines = body.strip("\n").split("\n")
        doc = lines[0].removeprefix("-- ").strip()
        sql = "\n".join(lines[1:]).strip()
        statements = [s.strip() for s in re.split(r";[ \t]*(?:\n|$)", sql) if s.strip()]
        out.append(Statement(name=name, doc=doc, sql=statements))
    return out


def _service_sql(sql: Sql, dialect: Dialect) -> list[str]:
    return [to_driver(s, dialect) for s in sql.for_dialect(dialect.name)]


def render_unit(
    unit: Queue | Outbox, dialect_name: str, env: jinja2.Environment | None = None
) -> Rendered:
    """Render one queue (or the outbox) for one dialect, e.g. ``render_unit(q, "postgres").text()``."""
    env = env or environment()
    dialect = DIALECTS[dialect_name]
    ctx = context(unit, dialect)
    ctx["x"] = env.get_template(_template_for(env, dialect.name, "expr.sql.j2")).make_module(ctx)
    form = unit.form if isinstance(unit, Queue) else "outbox"
    text = env.get_template(_template_for(env, dialect.name, f"{form}.sql.j2")).render(ctx)
    statements = _parse_blocks(text)

    by_name = {s.name: s for s in statements}
    for outcome, sql in unit.statements.items():
        st = by_name.get(outcome)
        if st is None:  # e.g. an override of retry for a table without attempt
            st = Statement(name=outcome, doc="", sql=[])
            statements.append(st)
        st.sql = _service_sql(sql, dialect)
        st.doc = f"The table's own statement for {outcome} (declared in statements.{outcome})."
        st.origin = f"statements.{outcome}"
    for name in sorted(unit.custom):
        statements.append(
            Statement(
                name=f"custom.{name}",
                doc=f"The service's own event {name!r}, run in place of the outcome's own statement.",
                sql=_service_sql(unit.custom[name], dialect),
                origin=f"custom.{name}",
            )
        )
    return Rendered(
        queue=unit, dialect=dialect, header=header(unit, dialect), statements=statements
    )


def header(unit: Queue | Outbox, dialect: Dialect) -> dict[str, str]:
    """The `-- key: value` lines the runtime reads back (see runtime/rendered.py)."""
    cols = " ".join(f"{k}={v}" for k, v in unit.columns.items())
    if isinstance(unit, Outbox):
        h = {"outbox": unit.name, "dialect": dialect.name, "table": unit.table, "columns": cols}
        if not dialect.skip_locked:
            h["note"] = (
                "the relay's BEGIN IMMEDIATE holds the database's write lock while its handler "
                "runs: one relay at a time, and put waits for the relay's batch"
            )
        return h
    h = {
        "queue": unit.name,
        "dialect": dialect.name,
        "form": unit.form,
        "table": unit.table,
        "columns": cols,
        "max_attempts": str(unit.max_attempts) if unit.max_attempts else "none",
        "dead_letter": unit.dead_letter.describe() if unit.dead_letter else "none",
    }
    if unit.lease_s is not None:
        h["lease_s"] = f"{unit.lease_s:g}"
    if unit.default_group is not None:
        h["default_group"] = unit.default_group
    if unit.form == "advisory" and not dialect.server_advisory:
        h["note"] = (
            "advisory keys are held in the consumer's process: run one consumer process "
            "per database file"
        )
    elif unit.form == "row_lock" and not dialect.skip_locked:
        h["note"] = (
            "BEGIN IMMEDIATE holds the database's write lock while the handler runs: "
            "correct but serial"
        )
    return h


def render_declaration(decl: Declaration, dialects: list[str] | None = None) -> dict[Path, str]:
    """Every file the declaration renders: relative path → text (validated)."""
    from qgen.validate import validate_rendered

    env = environment()
    files: dict[Path, str] = {}
    units: list[Queue | Outbox] = list(decl.queues.values())
    if decl.outbox is not None:
        units.append(decl.outbox)
    for dialect in dialects or decl.dialects:
        for unit in units:
            rendered = render_unit(unit, dialect, env)
            validate_rendered(rendered, decl.path)
            files[Path(decl.out) / dialect / f"{unit.name}.sql"] = rendered.text()
    return files
