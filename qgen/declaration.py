"""qgen.toml → typed declarations; every mistake becomes one DeclarationError naming file, queue, key and fix."""

from __future__ import annotations

import hashlib
import math
import re
import tomllib
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.contract.dialects import DIALECTS, FORMS, PENDING_KEY
from runtime.contract.names import KEY_MAX, is_identifier, is_table_name
from runtime.contract.schedule_slots import Schedule, ScheduleError, parse_schedule

#: lease_s and max_attempts: anything outside these is a mistake, not a setting
LEASE_RANGE = (0.1, 86_400.0)
MAX_ATTEMPTS_RANGE = (1, 10_000)

QUEUE_COLUMNS = (
    "id",
    "payload",
    "group",
    "attempt",
    "retry_after",
    "locked_until",
    "processed_at",
    "enqueued_at",
    "priority",
    "fifo_key",
    "dedupe_key",
    "last_error",
    "concurrency_key",
    "result",
    "progress",
)
#: a type of other_columns, spliced into the schema's DDL: words, digits, spaces, parentheses
#: and commas only (BIGINT, VARCHAR(40), NUMERIC(12, 2), TEXT NOT NULL), nothing that could
#: end the column or start a statement
COLUMN_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_ (),]{0,79}")
OUTBOX_COLUMNS = ("id", "payload", "topic", "key", "created_at", "processed_at")
QUEUE_OUTCOMES = ("ack", "drop", "retry", "retry_after", "dead_letter")
OUTBOX_OUTCOMES = ("mark",)

TOP_KEYS = ("dialects", "out", "queues", "outbox")
QUEUE_KEYS = (
    "table",
    "form",
    "lease_s",
    "max_attempts",
    "dead_letter",
    "default_group",
    "columns",
    "other_columns",
    "statements",
    "custom",
    "concurrency_limit",
    "max_in_flight",
    "rate_limit",
    "schedules",
    "pause_table",
    "layout",
    "partition_hours",
)
#: layout: how the queue table is laid out; "partitioned" (PostgreSQL, processed_at) ranges
#: its rows by processed_at so prune drops whole partitions (see _layout)
LAYOUTS = ("plain", "partitioned")
#: partition_hours: each processed partition spans this many hours (default a day)
PARTITION_HOURS = (1, 744)
#: a partition's name is the table's with this many characters added (_pYYYYMMDDHH)
PARTITION_SUFFIX = 12
#: concurrency_limit and max_in_flight: in flight at once; rate_limit: message starts a second
LIMIT_RANGE = (1, 1_000_000)
RATE_RANGE = (0.001, 1_000_000.0)
#: the default pause table: the queue table's name with this suffix, in its schema
PAUSE_SUFFIX = "_pause"
OUTBOX_KEYS = ("table", "columns", "statements", "custom")


class DeclarationError(Exception):
    """A declaration that cannot be rendered: says where (file, queue, key), what, and the fix."""

    def __init__(self, file: str | Path, where: str, key: str, problem: str, fix: str) -> None:
        self.file, self.where, self.key, self.problem, self.fix = (
            str(file),
            where,
            key,
            problem,
            fix,
        )
        place = "" if key == "-" else f"{where}, key {_show(key)}: "
        super().__init__(one_line(f"{file}: {place}{problem}; fix: {fix}"))


class GeneratorBug(DeclarationError):
    """SQL qgen wrote itself (a template's block, not the service's) failed qgen's own
    validation: a bug in qgen, never the declaration's fault. ``qgen`` exits 3 and asks for
    a report; the problem, key and dialect are kept as for a DeclarationError."""

    def __init__(self, file: str | Path, where: str, key: str, problem: str, fix: str) -> None:
        super().__init__(file, where, key, problem, fix)
        Exception.__init__(
            self,
            one_line(
                f"{file}: {where}, key {_show(key)}: qgen refused SQL it wrote itself: {problem}; "
                "this is a bug in qgen, not in the declaration: please report it with the "
                "qgen.toml that caused it"
            ),
        )


def short_name(name: str) -> str:
    """An identifier within 63 characters: long names keep a prefix and gain a hash."""
    if len(name) <= 63:
        return name
    return name[:54] + "_" + hashlib.sha1(name.encode()).hexdigest()[:8]


def one_line(text: str) -> str:
    """Text with every character that could start a new line, or hide, shown escaped."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def _show(value: Any) -> str:
    """A name from the declaration as a message shows it: quoted, never spanning lines."""
    return one_line(repr(value) if not isinstance(value, str) else f"'{value}'")


def group_key(group: str) -> str:
    """A group name as the loosest engine compares it: MySQL and MariaDB's default
    collations ignore case, accents and trailing spaces."""
    decomposed = unicodedata.normalize("NFKD", group)
    plain = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return plain.casefold().rstrip(" ")


@dataclass(frozen=True)
class Sql:
    """A service's own SQL for one step: one or more statements, per dialect (``default`` for the rest)."""

    by_dialect: Mapping[str, tuple[str, ...]]

    def for_dialect(self, dialect: str) -> tuple[str, ...]:
        return self.by_dialect.get(dialect) or self.by_dialect.get("default") or ()


@dataclass(frozen=True)
class DeadLetter:
    group: str | None = None
    table: str | None = None


@dataclass(frozen=True)
class Limits:
    """What a queue's claim lets through: per concurrency_key and queue-wide in flight, and
    message starts a second (a token bucket of ``rate_burst`` tokens)."""

    concurrency_limit: int | None = None
    max_in_flight: int | None = None
    rate_per_s: float | None = None
    rate_burst: float | None = None

    def __bool__(self) -> bool:
        return any(
            v is not None for v in (self.concurrency_limit, self.max_in_flight, self.rate_per_s)
        )


@dataclass(frozen=True)
class QueueDeclaration:
    """One [queues.NAME] table of qgen.toml, checked (the runtime's loaded queue is
    ``runtime.Queue``)."""

    name: str
    table: str
    form: str
    columns: Mapping[str, str]  # logical name → the table's real column name
    lease_s: float | None = None
    max_attempts: int | None = None
    dead_letter: DeadLetter | None = None
    default_group: str | None = None
    statements: Mapping[str, Sql] = field(default_factory=dict)
    custom: Mapping[str, Sql] = field(default_factory=dict)
    #: the table's columns qgen has no role for, which the service's SQL and enqueue may set
    other_columns: tuple[str, ...] = ()
    #: the SQL types other_columns declares (``{ user_id = "BIGINT" }``); the rest are TEXT
    other_types: Mapping[str, str] = field(default_factory=dict)
    #: [queues.NAME.schedules.X]: messages enqueued once per slot, in name order
    schedules: tuple[Schedule, ...] = ()
    #: the table of paused scopes the claim consults (None: the queue cannot be paused)
    pause_table: str | None = None
    kind: str = "queue"
    #: limits the claim enforces (None: none); see _limits
    limits: Limits = field(default_factory=lambda: Limits())
    #: "plain", or "partitioned": ranged by processed_at, pending rows in the default partition
    layout: str = "plain"
    #: partitioned: the hours each processed partition spans
    partition_hours: int = 24

    @property
    def partitioned(self) -> bool:
        return self.layout == "partitioned"

    @property
    def schedule_table(self) -> str | None:
        """The table keeping each schedule's last decided slot: ``<table>_schedules``."""
        if not self.schedules:
            return None
        schema, dot, bare = self.table.rpartition(".")
        return f"{schema}{dot}{short_name(bare + '_schedules')}"

    def has(self, column: str) -> bool:
        return column in self.columns


@dataclass(frozen=True)
class OutboxDeclaration:
    """The [outbox] table of qgen.toml, checked (the runtime's is ``runtime.outbox.Outbox``)."""

    name: str
    table: str
    columns: Mapping[str, str]
    statements: Mapping[str, Sql] = field(default_factory=dict)
    custom: Mapping[str, Sql] = field(default_factory=dict)
    kind: str = "outbox"

    def has(self, column: str) -> bool:
        return column in self.columns


@dataclass(frozen=True)
class Declaration:
    path: Path
    dialects: tuple[str, ...]
    out: str
    queues: Mapping[str, QueueDeclaration]
    outbox: OutboxDeclaration | None = None

    def units(self) -> list[QueueDeclaration | OutboxDeclaration]:
        """Every queue, then the outbox: what render writes a file for."""
        return [*self.queues.values(), *([self.outbox] if self.outbox else [])]


Unit = QueueDeclaration | OutboxDeclaration


#: bidirectional overrides and isolates: they make SQL read differently from how it runs
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def _control(ch: str) -> bool:
    """A character that breaks or hides a line: controls, line and paragraph separators."""
    return unicodedata.category(ch) in ("Cc", "Zl", "Zp") or ch in _BIDI


def _suggest(word: str, choices: tuple[str, ...] | list[str]) -> str:
    import difflib

    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"did you mean '{close[0]}'? " if close else ""


class _Reader:
    """Reads one file; every error names the file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def fail(self, where: str, key: str, problem: str, fix: str) -> DeclarationError:
        return DeclarationError(self.path, where, key, problem, fix)

    def keys(self, where: str, table: Mapping[str, Any], allowed: tuple[str, ...]) -> None:
        for key in table:
            if key not in allowed:
                raise self.fail(
                    where,
                    key,
                    "unknown key",
                    f"{_suggest(key, allowed)}the keys here are: {', '.join(allowed)}",
                )

    def identifier(self, where: str, key: str, value: Any) -> str:
        if not is_identifier(value):
            raise self.fail(
                where,
                key,
                f"{_show(value)} is not an identifier",
                "use letters, digits and underscores, starting with a letter or underscore, "
                "at most 63 characters",
            )
        return value

    def table_name(self, where: str, key: str, value: Any) -> str:
        """A table: an identifier, or schema.identifier (a PostgreSQL schema, a MySQL/MariaDB
        database, an attached SQLite database)."""
        if not is_table_name(value):
            raise self.fail(
                where,
                key,
                f"{_show(value)} is not a table name",
                "use an identifier (letters, digits and underscores, starting with a letter or "
                "underscore, at most 63 characters), or schema.identifier",
            )
        return value

    def group(self, where: str, key: str, value: Any) -> str:
        """A group name: printable text, no space at either end, within the column's size."""
        if (
            not isinstance(value, str)
            or not value
            or len(value) > KEY_MAX
            or not value.isprintable()
            or value != value.strip()
        ):
            raise self.fail(
                where,
                key,
                f"{_show(value)} is not a group name",
                f"use 1 to {KEY_MAX} printable characters, without spaces at either end "
                "or control and line-break characters",
            )
        return value

    def table(self, where: str, key: str, value: Any) -> Mapping[str, Any]:
        if not isinstance(value, dict):
            raise self.fail(
                where,
                key,
                f"expected a table, found {type(value).__name__}",
                f"write it as [{key}] or {key} = {{ ... }}",
            )
        return value

    def sql(self, where: str, key: str, value: Any, dialects: tuple[str, ...]) -> Sql:
        """A string, a list of strings, or a table of those per dialect (``default`` for the rest)."""

        def statements(k: str, v: Any) -> tuple[str, ...]:
            if isinstance(v, str):
                v = [v]
            if (
                not isinstance(v, list)
                or not v
                or not all(isinstance(s, str) and s.strip() for s in v)
            ):
                raise self.fail(
                    where,
                    k,
                    "expected SQL text or a list of SQL statements",
                    'write key = "UPDATE …" or key = ["INSERT …", "DELETE …"]',
                )
            for s in v:
                bad = next((ch for ch in s if ch not in "\n\t" and _control(ch)), None)
                if bad is not None:
                    raise self.fail(
                        where,
                        k,
                        f"the SQL holds the control or line-break character {bad!r}",
                        "write it on plain lines (LF line ends, no CR, NUL or other control "
                        "characters); put such values in parameters",
                    )
            return tuple(s.strip().rstrip(";").strip() for s in v)

        if isinstance(value, dict):
            allowed = ("default", *DIALECTS)
            out: dict[str, tuple[str, ...]] = {}
            for d, v in value.items():
                if d not in allowed:
                    raise self.fail(
                        where,
                        f"{key}.{d}",
                        "unknown dialect",
                        f"{_suggest(d, allowed)}use default or one of {', '.join(DIALECTS)}",
                    )
                out[d] = statements(f"{key}.{d}", v)
            missing = [d for d in dialects if d not in out and "default" not in out]
            if missing:
                raise self.fail(
                    where,
                    key,
                    f"no SQL for {', '.join(missing)}",
                    f'add default = "…" or {missing[0]} = "…"',
                )
            return Sql(out)
        return Sql({"default": statements(key, value)})


def load_declaration(path: str | Path) -> Declaration:
    """Read and check a qgen.toml, e.g. ``load_declaration("qgen.toml").queues["orders"].form``."""
    path = Path(path)
    r = _Reader(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise r.fail(
            "file",
            "-",
            "not found",
            "run `qgen init` to write a starter qgen.toml, or pass --config PATH",
        ) from None
    except OSError as exc:
        raise r.fail(
            "file", "-", f"cannot be read ({exc.strerror or exc})", "check the path"
        ) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise r.fail(
            "file",
            "-",
            f"not UTF-8 text (byte {exc.start} cannot be read)",
            "save qgen.toml as UTF-8",
        ) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise r.fail(
            "file", "-", f"not valid TOML ({exc})", "correct the TOML syntax there"
        ) from None
    except RecursionError:
        raise r.fail(
            "file", "-", "nested too deeply to read", "flatten the nested arrays or tables"
        ) from None
    return parse_declaration(raw, path)


def parse_declaration(raw: Mapping[str, Any], path: str | Path = "qgen.toml") -> Declaration:
    """Check an already-parsed TOML document (what load_declaration does after reading)."""
    path = Path(path)
    r = _Reader(path)
    r.keys("top level", raw, TOP_KEYS)

    dialects_raw = raw.get("dialects", list(DIALECTS))
    if not isinstance(dialects_raw, list) or not dialects_raw:
        raise r.fail(
            "top level",
            "dialects",
            "expected a non-empty list",
            f'write dialects = ["{", ".join(DIALECTS)}"]',
        )
    for d in dialects_raw:
        if not isinstance(d, str) or d not in DIALECTS:
            raise r.fail(
                "top level",
                "dialects",
                f"unknown dialect {_show(d)}",
                f"{_suggest(str(d), tuple(DIALECTS))}use any of {', '.join(DIALECTS)}",
            )
    dialects = tuple(dict.fromkeys(dialects_raw))

    out = raw.get("out", "sql")
    if not isinstance(out, str) or not out.strip() or not out.isprintable():
        raise r.fail(
            "top level",
            "out",
            f"{_show(out)} is not a folder name",
            'write out = "sql" (printable characters only)',
        )

    queues_raw = r.table("top level", "queues", raw.get("queues", {}))
    queues = {name: _queue(r, name, q, dialects) for name, q in queues_raw.items()}
    outbox = _outbox(r, raw["outbox"], dialects) if "outbox" in raw else None
    _check_names(r, queues)
    if not queues and outbox is None:
        raise r.fail(
            "top level",
            "queues",
            "no queue is declared",
            'add [queues.NAME] with table = "…" and form = "lease"',
        )
    _check_tables(r, [*queues.values(), *([outbox] if outbox else [])])
    return Declaration(path=path, dialects=dialects, out=out, queues=queues, outbox=outbox)


def _shares_by_group(a: Unit, b: Unit) -> bool:
    """Two queues may share a table when its group column tells their rows apart."""
    return (
        isinstance(a, QueueDeclaration)
        and isinstance(b, QueueDeclaration)
        and a.has("group")
        and dict(a.columns) == dict(b.columns)
        and a.other_columns == b.other_columns
        and dict(a.other_types) == dict(b.other_types)
        and a.form == b.form
        and (a.layout, a.partition_hours) == (b.layout, b.partition_hours)
        and group_key(a.default_group or "") != group_key(b.default_group or "")
    )


def _where(u: Unit) -> str:
    return f"queue {_show(u.name)}" if isinstance(u, QueueDeclaration) else "outbox"


def _check_names(r: _Reader, queues: Mapping[str, QueueDeclaration]) -> None:
    """Queue names become file names: two that differ only in case collide on many disks."""
    seen: dict[str, str] = {}
    for name in queues:
        other = seen.setdefault(name.casefold(), name)
        if other != name:
            raise r.fail(
                f"queue {_show(name)}",
                "name",
                f"it differs from queue {_show(other)} only in case, and their files collide",
                "give the queues names that differ in more than case",
            )


def _check_tables(r: _Reader, units: list[Unit]) -> None:
    """Tables are compared as the engines compare names: MySQL, MariaDB (on most systems) and
    SQLite ignore case, so names that differ only in case are one table."""
    owners: dict[str, tuple[Unit, str]] = {}
    for u in units:
        owned = [(u.table, "table")]
        if isinstance(u, QueueDeclaration) and u.dead_letter and u.dead_letter.table:
            owned.append((u.dead_letter.table, "dead_letter.table"))
        for t, key in owned:
            other, spelt = owners.get(t.casefold(), (None, t))
            if other is not None and other is not u:
                if key == "table" and other.table == t and _shares_by_group(other, u):
                    continue
                raise r.fail(
                    _where(u),
                    key,
                    f"table {_show(t)} is already used by {_where(other)}"
                    + ("" if spelt == t else f" (as {_show(spelt)}: case is ignored)"),
                    "give it a table of its own; queues share a table only through a "
                    "group column, with the same columns and form and their own "
                    "default_group",
                )
            owners[t.casefold()] = (u, t)
    _check_dead_groups(r, [u for u in units if isinstance(u, QueueDeclaration)])


def _check_dead_groups(r: _Reader, queues: list[QueueDeclaration]) -> None:
    """A dead-letter group must never be a group some queue claims from on the same table
    (compared as the loosest engine compares text), or the cap would send rows back."""
    live: dict[tuple[str, str], QueueDeclaration] = {}
    for q in queues:
        if q.default_group is not None:
            live[(q.table.casefold(), group_key(q.default_group))] = q
    for q in queues:
        dead = q.dead_letter.group if q.dead_letter else None
        if dead is None:
            continue
        owner = live.get((q.table.casefold(), group_key(dead)))
        if owner is not None:
            whose = "the queue's own group" if owner is q else f"the group of {_where(owner)}"
            raise r.fail(
                _where(q),
                "dead_letter.group",
                f"the dead-letter group {_show(dead)} is {whose} "
                f"{_show(owner.default_group)} as MySQL/MariaDB compare text (case, accents "
                "and trailing spaces ignored)",
                f'name another group, e.g. "{q.default_group}_dead"',
            )


def _columns(
    r: _Reader, where: str, raw: Any, known: tuple[str, ...], default: dict[str, str]
) -> dict[str, str]:
    if raw is None:
        return default
    cols = r.table(where, "columns", raw)
    r.keys(
        where, {f"columns.{k}": v for k, v in cols.items()}, tuple(f"columns.{k}" for k in known)
    )
    out = {k: r.identifier(where, f"columns.{k}", v) for k, v in cols.items()}
    for needed in ("id", "payload"):
        if needed not in out:
            raise r.fail(
                where,
                f"columns.{needed}",
                "missing",
                f'name the table\'s {needed} column: {needed} = "…"',
            )
    # engines compare column names without case: id and ID are one column
    physical = [v.casefold() for v in out.values()]
    for k, v in out.items():
        if physical.count(v.casefold()) > 1:
            raise r.fail(
                where,
                f"columns.{k}",
                f"column {_show(v)} is mapped twice (names are compared without case)",
                "map each role to a column of its own",
            )
    return out


def _own_sql(
    r: _Reader,
    where: str,
    raw: Mapping[str, Any],
    outcomes: tuple[str, ...],
    dialects: tuple[str, ...],
) -> tuple[dict[str, Sql], dict[str, Sql]]:
    """The service's own SQL: per-outcome overrides (statements.X) and events (custom.NAME)."""
    statements: dict[str, Sql] = {}
    if "statements" in raw:
        st = r.table(where, "statements", raw["statements"])
        r.keys(
            where,
            {f"statements.{k}": v for k, v in st.items()},
            tuple(f"statements.{k}" for k in outcomes),
        )
        statements = {k: r.sql(where, f"statements.{k}", v, dialects) for k, v in st.items()}
    custom: dict[str, Sql] = {}
    for k, v in r.table(where, "custom", raw.get("custom", {})).items():
        r.identifier(where, f"custom.{k}", k)
        custom[k] = r.sql(where, f"custom.{k}", v, dialects)
    return statements, custom


def _form(r: _Reader, where: str, q: Mapping[str, Any], dialects: tuple[str, ...]) -> str:
    """The claim form, known and runnable on every declared dialect."""
    form = q.get("form", "lease")
    if form not in FORMS:
        raise r.fail(
            where,
            "form",
            f"unknown form {_show(form)}",
            f"{_suggest(str(form), FORMS)}use one of {', '.join(FORMS)}",
        )
    for d in dialects:
        if form not in DIALECTS[d].forms:
            raise r.fail(
                where,
                "form",
                f"the {d} dialect cannot run the {form} form",
                f"use one of {', '.join(DIALECTS[d].forms)} or drop {d} from dialects",
            )
    return str(form)


def _dead_letter(r: _Reader, where: str, q: Mapping[str, Any], table: str) -> DeadLetter | None:
    """dead_letter = { group = "…" } or { table = "…" } (another table than the queue's)."""
    if "dead_letter" not in q:
        return None
    dl = r.table(where, "dead_letter", q["dead_letter"])
    r.keys(
        where,
        {f"dead_letter.{k}": v for k, v in dl.items()},
        ("dead_letter.group", "dead_letter.table"),
    )
    if len(dl) != 1:
        raise r.fail(
            where,
            "dead_letter",
            "give exactly one of group or table",
            'write dead_letter = { group = "NAME_dead" } or { table = "NAME_dead" }',
        )
    if "group" in dl:
        return DeadLetter(group=r.group(where, "dead_letter.group", dl["group"]))
    dead_table = r.table_name(where, "dead_letter.table", dl["table"])
    if dead_table.casefold() == table.casefold():
        raise r.fail(
            where,
            "dead_letter.table",
            "the dead-letter table is the queue's own",
            f'name another table, e.g. "{table}_dead"',
        )
    return DeadLetter(table=dead_table)


def _default_columns(form: str, dead_letter: DeadLetter | None) -> dict[str, str]:
    """The column roles a queue has when it names none: its form and dead letter add theirs."""
    default_cols = {
        "id": "id",
        "payload": "payload",
        "attempt": "attempt",
        "retry_after": "retry_after",
    }
    if form == "lease":
        default_cols["locked_until"] = "locked_until"
    if dead_letter and dead_letter.group is not None:
        default_cols["group"] = "queue"
    return default_cols


def _lease_s(
    r: _Reader, where: str, q: Mapping[str, Any], form: str, columns: Mapping[str, str]
) -> float | None:
    """The lease form's lease in seconds (with its lease column); no other form takes one."""
    if form != "lease":
        if "lease_s" in q:
            raise r.fail(
                where,
                "lease_s",
                f"lease_s applies to the lease form only, not {form}",
                'remove lease_s, or use form = "lease"',
            )
        return None
    if "locked_until" not in columns:
        raise r.fail(
            where,
            "columns.locked_until",
            "the lease form needs a lease column",
            'add locked_until = "locked_until" under columns, or use form = "row_lock"',
        )
    lease_s = q.get("lease_s", 30)
    low, high = LEASE_RANGE
    if (
        isinstance(lease_s, bool)
        or not isinstance(lease_s, int | float)
        or not math.isfinite(lease_s)
        or not low <= lease_s <= high
    ):
        raise r.fail(
            where,
            "lease_s",
            f"{_show(lease_s)} is not a number of seconds from {low:g} to {high:g}",
            "write lease_s = 30 (the runtime extends the lease while a handler runs)",
        )
    return float(lease_s)


def _max_attempts(
    r: _Reader,
    where: str,
    q: Mapping[str, Any],
    dead_letter: DeadLetter | None,
    columns: Mapping[str, str],
) -> int | None:
    """max_attempts, which comes with a dead letter and an attempt column (and vice versa)."""
    max_attempts = q.get("max_attempts")
    if max_attempts is None:
        if dead_letter is not None:
            raise r.fail(
                where,
                "dead_letter",
                "dead_letter without max_attempts",
                "add max_attempts = 5, or remove dead_letter",
            )
        return None
    low, high = MAX_ATTEMPTS_RANGE
    if (
        isinstance(max_attempts, bool)
        or not isinstance(max_attempts, int)
        or not low <= max_attempts <= high
    ):
        raise r.fail(
            where,
            "max_attempts",
            f"{_show(max_attempts)} is not a whole number from {low} to {high}",
            "write max_attempts = 5",
        )
    if dead_letter is None:
        raise r.fail(
            where,
            "max_attempts",
            "max_attempts without dead_letter",
            'add dead_letter = { group = "…" } or { table = "…" }, or remove max_attempts',
        )
    if "attempt" not in columns:
        raise r.fail(
            where,
            "max_attempts",
            "max_attempts needs an attempt column",
            'add attempt = "attempt" under columns, or remove max_attempts',
        )
    return max_attempts


def _check_retry_columns(
    r: _Reader,
    where: str,
    form: str,
    columns: Mapping[str, str],
    dead_letter: DeadLetter | None,
    max_attempts: int | None,
) -> None:
    """A dead-letter group needs a group column; row lock's counted claim needs retry_after."""
    if dead_letter and dead_letter.group is not None and "group" not in columns:
        raise r.fail(
            where,
            "dead_letter.group",
            "a dead-letter group needs a group column",
            'add group = "queue" under columns, or use dead_letter = { table = "…" }',
        )
    if max_attempts is not None and form == "row_lock" and "retry_after" not in columns:
        raise r.fail(
            where,
            "max_attempts",
            "row lock with max_attempts needs a retry_after column: its claim counts each "
            "delivery before the handler runs and marks the row in retry_after meanwhile",
            'add retry_after = "retry_after" under columns, or use form = "lease"',
        )


def _default_group(
    r: _Reader, where: str, q: Mapping[str, Any], name: str, columns: Mapping[str, str]
) -> str | None:
    """The group enqueue uses when none is given: the queue's name where it has a group column."""
    if "default_group" not in q:
        return name if "group" in columns else None
    if "group" not in columns:
        raise r.fail(
            where,
            "default_group",
            "default_group needs a group column",
            'add group = "queue" under columns, or remove default_group',
        )
    return r.group(where, "default_group", q["default_group"])


def _check_in_flight(
    r: _Reader, where: str, form: str, limits: Limits, max_attempts: int | None
) -> None:
    """Row lock cannot hold max_in_flight's slots across max_attempts' own commit."""
    if limits.max_in_flight is not None and form == "row_lock" and max_attempts is not None:
        # the claim that counts a delivery commits on its own, which would free the slot rows
        # max_in_flight's claim holds before the batch takes its rows
        raise r.fail(
            where,
            "max_in_flight",
            "row lock cannot enforce max_in_flight together with max_attempts: its claim "
            "commits each delivery's count before the batch locks its rows, which frees the "
            "slots that max_in_flight counts",
            'use form = "lease" (which enforces both), or remove one of the two',
        )


def _queue(r: _Reader, name: str, raw: Any, dialects: tuple[str, ...]) -> QueueDeclaration:
    where = f"queue {_show(name)}"
    r.identifier(where, "name", name)
    q = r.table(where, f"queues.{name}", raw)
    r.keys(where, q, QUEUE_KEYS)
    if "table" not in q:
        raise r.fail(where, "table", "missing", f'write table = "{name}_queue"')
    table = r.table_name(where, "table", q["table"])
    form = _form(r, where, q, dialects)
    dead_letter = _dead_letter(r, where, q, table)
    columns = _columns(
        r, where, q.get("columns"), QUEUE_COLUMNS, _default_columns(form, dead_letter)
    )
    lease_s = _lease_s(r, where, q, form, columns)
    max_attempts = _max_attempts(r, where, q, dead_letter, columns)
    _check_retry_columns(r, where, form, columns, dead_letter, max_attempts)
    default_group = _default_group(r, where, q, name, columns)

    other_columns, other_types = _other_columns(r, where, q.get("other_columns", []), columns)
    if "dedupe_key" in columns:
        _check_pending_key(r, where, columns, other_columns)
    limits = _limits(r, where, q, form, columns)
    _check_in_flight(r, where, form, limits, max_attempts)
    statements, custom = _own_sql(r, where, q, QUEUE_OUTCOMES, dialects)
    schedules = _schedules(r, where, q.get("schedules", {}), columns, other_columns)
    if "dead_letter" in statements and dead_letter is None:
        raise r.fail(
            where,
            "statements.dead_letter",
            "an override for a dead letter the queue does not have",
            "declare max_attempts and dead_letter, or remove the override",
        )
    _check_result(r, where, columns, statements)
    layout, partition_hours = _layout(r, where, q, table, columns, dialects)

    return QueueDeclaration(
        name=name,
        table=table,
        form=form,
        pause_table=_pause_table(r, where, q, table),
        columns=columns,
        lease_s=lease_s,
        max_attempts=max_attempts,
        dead_letter=dead_letter,
        default_group=default_group,
        statements=statements,
        custom=custom,
        other_columns=other_columns,
        other_types=other_types,
        limits=limits,
        schedules=schedules,
        layout=layout,
        partition_hours=partition_hours,
    )


def _layout(
    r: _Reader,
    where: str,
    q: Mapping[str, Any],
    table: str,
    columns: Mapping[str, str],
    dialects: tuple[str, ...],
) -> tuple[str, int]:
    """layout = "partitioned": PostgreSQL only, on a table that keeps processed rows."""
    layout = q.get("layout", "plain")
    if layout not in LAYOUTS:
        raise r.fail(
            where,
            "layout",
            f"unknown layout {_show(layout)}",
            f"{_suggest(str(layout), LAYOUTS)}use one of {', '.join(LAYOUTS)}",
        )
    if layout == "plain":
        if "partition_hours" in q:
            raise r.fail(
                where,
                "partition_hours",
                "partition_hours sizes the partitions of a partitioned layout",
                'add layout = "partitioned", or remove partition_hours',
            )
        return layout, 24
    others = [d for d in dialects if d != "postgres"]
    if others:
        raise r.fail(
            where,
            "layout",
            f'layout = "partitioned" is PostgreSQL only, and this file renders {others[0]}',
            'write dialects = ["postgres"] in a qgen.toml of its own, or remove layout',
        )
    if "processed_at" not in columns:
        raise r.fail(
            where,
            "layout",
            "a partitioned layout ranges rows by processed_at, which the table lacks",
            'add processed_at = "processed_at" under columns, or remove layout',
        )
    hours = q.get("partition_hours", 24)
    low, high = PARTITION_HOURS
    if isinstance(hours, bool) or not isinstance(hours, int) or not low <= hours <= high:
        raise r.fail(
            where,
            "partition_hours",
            f"{_show(hours)} is not a whole number of hours from {low} to {high}",
            "write partition_hours = 24 (a partition a day)",
        )
    bare = table.rpartition(".")[2]
    if len(bare) + PARTITION_SUFFIX > 63:
        raise r.fail(
            where,
            "table",
            "a partition's name (the table's and _pYYYYMMDDHH) would pass 63 characters",
            f"name the table in at most {63 - PARTITION_SUFFIX} characters",
        )
    return layout, hours


def _whole(r: _Reader, where: str, key: str, value: Any, fix: str) -> int:
    low, high = LIMIT_RANGE
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise r.fail(where, key, f"{_show(value)} is not a whole number from {low} to {high}", fix)
    return value


def _limits(
    r: _Reader,
    where: str,
    q: Mapping[str, Any],
    form: str,
    columns: Mapping[str, str],
) -> Limits:
    """concurrency_limit (with a concurrency_key column), max_in_flight and rate_limit."""
    per_key = None
    if "concurrency_limit" in q:
        per_key = _whole(
            r, where, "concurrency_limit", q["concurrency_limit"], "write concurrency_limit = 5"
        )
        if "concurrency_key" not in columns:
            raise r.fail(
                where,
                "concurrency_limit",
                "concurrency_limit needs a concurrency_key column (what it counts per)",
                'add concurrency_key = "customer" under columns, or remove concurrency_limit',
            )
    elif "concurrency_key" in columns:
        raise r.fail(
            where,
            "columns.concurrency_key",
            "a concurrency_key without concurrency_limit",
            "add concurrency_limit = 5 (at most 5 messages of a key in flight at once)",
        )
    in_flight = None
    if "max_in_flight" in q:
        in_flight = _whole(
            r, where, "max_in_flight", q["max_in_flight"], "write max_in_flight = 50"
        )
        if form == "advisory":
            raise r.fail(
                where,
                "max_in_flight",
                "the advisory form cannot enforce max_in_flight: keys other sessions hold are "
                "not countable in the claim's SQL (and SQLite's live in their process)",
                'use form = "lease" or "row_lock", or limit per key with concurrency_limit',
            )
    rate = burst = None
    if "rate_limit" in q:
        rl = r.table(where, "rate_limit", q["rate_limit"])
        r.keys(
            where,
            {f"rate_limit.{k}": v for k, v in rl.items()},
            ("rate_limit.per_s", "rate_limit.burst"),
        )
        low, high = RATE_RANGE
        fix = "write rate_limit = { per_s = 20 } (at most 20 message starts a second)"
        for key in ("per_s", "burst"):
            value = rl.get(key)
            if key == "per_s" and value is None:
                raise r.fail(where, "rate_limit.per_s", "missing", fix)
            if value is not None and (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or not (low <= value <= high if key == "per_s" else 1 <= value <= high)
            ):
                raise r.fail(
                    where,
                    f"rate_limit.{key}",
                    f"{_show(value)} is not a number from {low if key == 'per_s' else 1:g} to {high:g}",
                    fix if key == "per_s" else "write burst = 20 (tokens the bucket holds)",
                )
        rate = float(rl["per_s"])
        burst = float(rl.get("burst", max(1.0, rate)))
    return Limits(
        concurrency_limit=per_key, max_in_flight=in_flight, rate_per_s=rate, rate_burst=burst
    )


def _schedules(
    r: _Reader, where: str, raw: Any, columns: Mapping[str, str], others: tuple[str, ...]
) -> tuple[Schedule, ...]:
    """[queues.NAME.schedules.X] tables: each checked (cron, time zone, policy) and held to
    the queue's columns (a group needs the group column, slot_column an other column)."""
    out = []
    for name, value in sorted(r.table(where, "schedules", raw).items()):
        key = f"schedules.{name}"
        r.identifier(where, key, name)
        table = r.table(where, key, value)
        try:
            schedule = parse_schedule(name, table)
        except ScheduleError as exc:
            raise r.fail(where, f"{key}.{exc.key}", exc.problem, exc.fix) from None
        if schedule.group is not None:
            if "group" not in columns:
                raise r.fail(
                    where,
                    f"{key}.group",
                    "a schedule's group needs a group column",
                    'add group = "queue" under columns, or remove the schedule\'s group',
                )
            r.group(where, f"{key}.group", schedule.group)
        if schedule.slot_column is not None and schedule.slot_column not in others:
            raise r.fail(
                where,
                f"{key}.slot_column",
                f"{_show(schedule.slot_column)} is not one of the queue's other_columns",
                f'add "{schedule.slot_column}" to other_columns, or remove slot_column',
            )
        out.append(schedule)
    return tuple(out)


def _check_result(
    r: _Reader, where: str, columns: Mapping[str, str], statements: Mapping[str, Any]
) -> None:
    """A result is kept on the row an ack finishes: the row must stay (processed_at), and the
    ack that writes it is qgen's own ``ack_result``, not a declared ack."""
    if "result" not in columns:
        return
    if "processed_at" not in columns:
        raise r.fail(
            where,
            "columns.result",
            "a result column needs a processed_at column (an ack without one deletes the row, "
            "and the result with it)",
            'add processed_at = "processed_at" under columns, or remove result',
        )
    if "ack" in statements:
        raise r.fail(
            where,
            "statements.ack",
            "an ack with a result runs qgen's ack_result, which a declared ack would not match",
            "remove statements.ack, or remove columns.result",
        )


def _pause_table(r: _Reader, where: str, q: Mapping[str, Any], table: str) -> str | None:
    """pause_table: a table name, or false for a queue that cannot be paused; by default the
    queue table's name with ``_pause``, beside it (queues may name one table to share it: a
    row names its queue's table)."""
    schema, _, bare = table.rpartition(".")
    own = short_name(bare + PAUSE_SUFFIX)
    value = q.get("pause_table", f"{schema}.{own}" if schema else own)
    if value is False:
        return None
    if value is True or not isinstance(value, str):
        raise r.fail(
            where,
            "pause_table",
            f"{_show(value)} is neither a table name nor false",
            f'write pause_table = "{own}" (the default), or false for a queue that cannot be '
            "paused",
        )
    name = r.table_name(where, "pause_table", value)
    if name.casefold() == table.casefold():
        raise r.fail(
            where,
            "pause_table",
            "the pause table is the queue's own",
            f'name another table, e.g. "{own}"',
        )
    return name


def _check_pending_key(
    r: _Reader, where: str, columns: Mapping[str, str], others: tuple[str, ...]
) -> None:
    """dedupe_key's generated column (MySQL, MariaDB) takes a name no other column may have."""
    for role, col in [*columns.items(), *(("other", o) for o in others)]:
        if col.casefold() == PENDING_KEY:
            raise r.fail(
                where,
                f"columns.{role}" if role != "other" else "other_columns",
                f"{_show(col)} is the name of dedupe_key's generated column",
                "name the column otherwise",
            )


def _other_columns(
    r: _Reader, where: str, raw: Any, columns: Mapping[str, str]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The table's columns without a role: identifiers, each once, none a mapped column; a
    list of names, or a table of name = "SQL type" (the type the schema block creates)."""
    if isinstance(raw, dict):
        names, types = list(raw), raw
    elif isinstance(raw, list):
        names, types = raw, {}
    else:
        raise r.fail(
            where,
            "other_columns",
            "expected a list of column names or a table of column types",
            'write other_columns = ["kind", "status"] or { user_id = "BIGINT", kind = "TEXT" }',
        )
    taken = {c.casefold(): role for role, c in columns.items()}
    out: list[str] = []
    typed: dict[str, str] = {}
    for value in names:
        col = r.identifier(where, "other_columns", value)
        if col.casefold() in taken or col.casefold() in (o.casefold() for o in out):
            mapped = taken.get(col.casefold())
            raise r.fail(
                where,
                "other_columns",
                f"column {_show(col)} is "
                + (f"already mapped as columns.{mapped}" if mapped else "listed twice")
                + " (names are compared without case)",
                "list each column once, and only columns without a role",
            )
        out.append(col)
        if col in types:
            typed[col] = _column_type(r, where, col, types[col])
    return tuple(out), typed


def _column_type(r: _Reader, where: str, col: str, value: Any) -> str:
    """A column's SQL type as written into CREATE TABLE: a conservative grammar (words,
    digits, spaces, parentheses and commas, parentheses balanced), so it cannot end the
    column definition or start another statement."""
    text = value.strip() if isinstance(value, str) else value
    ok = isinstance(text, str) and COLUMN_TYPE.fullmatch(text) is not None
    depth = 0
    for ch in text if ok else "":
        depth += {"(": 1, ")": -1}.get(ch, 0)
        ok = ok and 0 <= depth <= 1
    words = set(text.upper().replace("(", " ").replace(")", " ").split()) if ok else set()
    if not ok or depth or words & {"PRIMARY", "UNIQUE", "REFERENCES"}:
        raise r.fail(
            where,
            f"other_columns.{col}",
            f"{_show(value)} is not a column type qgen writes into the schema",
            "write a type of letters, digits, spaces, commas and one level of parentheses, "
            "without keys (PRIMARY, UNIQUE, REFERENCES: the dead-letter table copies it), "
            'e.g. "BIGINT", "VARCHAR(40)" or "NUMERIC(12, 2) NOT NULL"',
        )
    return " ".join(text.split())


def _outbox(r: _Reader, raw: Any, dialects: tuple[str, ...]) -> OutboxDeclaration:
    where = "outbox"
    o = r.table(where, "outbox", raw)
    r.keys(where, o, OUTBOX_KEYS)
    table = r.table_name(where, "table", o.get("table", "outbox"))
    default_cols = {
        "id": "id",
        "payload": "payload",
        "topic": "topic",
        "key": "key",
        "created_at": "created_at",
        "processed_at": "processed_at",
    }
    columns = _columns(r, where, o.get("columns"), OUTBOX_COLUMNS, default_cols)
    if "processed_at" not in columns:
        raise r.fail(
            where,
            "columns.processed_at",
            "the outbox marks records it handed on",
            'add processed_at = "processed_at" under columns',
        )
    statements, custom = _own_sql(r, where, o, OUTBOX_OUTCOMES, dialects)
    return OutboxDeclaration(
        name="outbox", table=table, columns=columns, statements=statements, custom=custom
    )
