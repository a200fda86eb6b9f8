"""The rendered-file format, owned here: the generator writes files with ``write_file`` and the
runtime, the bench and the tests read them with ``parse_rendered`` / ``read_rendered``.

A rendered file is UTF-8 text with ``\\n`` line ends::

    -- DO NOT EDIT: rendered by `qgen render` from qgen.toml; change the declaration and render again.
    -- queue: "orders"                  one header line per setting: `-- key: <JSON value>`
    -- dialect: "postgres"             (JSON with every non-ASCII character escaped, so no
    -- form: "lease"                     value can break its line or write another one)
    -- …
    -- seal: sha256:<64 hex digits>     the digest of every other byte of the file

    -- name: claim                      one block per statement
    -- Leases up to limit ready rows …  one line saying what it does
    -- kinds: writes-returning          each statement's kind, written by the generator
    UPDATE …                            the SQL exactly as the driver receives it; each
    …;                                  statement ends with ';' at the end of a line

The runtime never guesses: a statement's kind (``reads`` rows, ``writes`` rows and counts
them, ``writes-returning`` the rows it wrote) comes from the generator's parse tree, and the
seal refuses a file that was edited, truncated or re-encoded after ``qgen render`` wrote it.
The generator reads every file back with this same reader before it validates the
statements, so what runs is byte for byte what was validated. The user's description of the
format is docs/reference/rendered-file.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from runtime.contract.dialects import DIALECTS, FORMS, Dialect
from runtime.contract.errors import DialectMismatch, RenderedFileError
from runtime.contract.names import is_identifier, is_table_name
from runtime.contract.schedule_slots import Schedule, ScheduleError, parse_schedule

TITLE = (
    "-- DO NOT EDIT: rendered by `qgen render` from qgen.toml; "
    "change the declaration and render again."
)
_RENDER_AGAIN = "render it again with `qgen render` (change qgen.toml, never the rendered file)"
_HEADER_LINE = re.compile(r"-- ([a-z_]+): (.*)")
_SEAL_LINE = re.compile(r"-- seal: sha256:([0-9a-f]{64})")
_NAME_LINE = re.compile(r"-- name: (.*)")
#: statement names: an outcome or step (``ack``, ``dead_letter``) or ``custom.<identifier>``
_STATEMENT_NAME = re.compile(r"[a-z_]+(?:\.[A-Za-z_][A-Za-z0-9_]*)?")
_KINDS_PREFIX = "-- kinds: "
#: a notification channel: an identifier of at most 63 bytes (PostgreSQL's NAMEDATALEN - 1)
_CHANNEL = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,62}")


class Kind(StrEnum):
    """What a statement does with rows, as the runtime must run it."""

    #: a query: returns rows, changes none
    READS = "reads"
    #: changes rows; its count of matched rows is what the runtime reads
    WRITES = "writes"
    #: changes rows and returns them (``… RETURNING``)
    WRITES_RETURNING = "writes-returning"


class StatementName(StrEnum):
    """The named blocks the runtime runs (a service's own events are ``custom.<name>``)."""

    SCHEMA = "schema"
    ENQUEUE = "enqueue"
    ENQUEUE_EXISTING = "enqueue_existing"
    ENQUEUE_UNLOCK = "enqueue_unlock"
    CLAIM = "claim"
    #: a claim that first finishes the connection's last batch, all acked (PostgreSQL)
    ACK_CLAIM = "ack_claim"
    TAKE = "take"
    EXTEND = "extend"
    ACK = "ack"
    #: an ack that keeps the handler's result on the row (a result column)
    ACK_RESULT = "ack_result"
    #: a running handler's progress, written on the row it holds (a progress column)
    PROGRESS = "progress"
    DROP = "drop"
    RETRY = "retry"
    RETRY_AFTER = "retry_after"
    # one statement for several deliveries of one outcome (lease: pairs of id and token)
    ACK_MANY = "ack_many"
    DROP_MANY = "drop_many"
    RETRY_MANY = "retry_many"
    RETRY_AFTER_MANY = "retry_after_many"
    DEAD_LETTER_MANY = "dead_letter_many"
    DEAD_LETTER = "dead_letter"
    RELEASE = "release"
    UNCLAIM = "unclaim"
    UNLOCK = "unlock"
    COLUMNS = "columns"
    # waking idle consumers: LISTEN on the enqueue's channel, and when a delayed row is due
    LISTEN = "listen"
    NEXT_DUE = "next_due"
    INDEXES = "indexes"
    # operating a queue (runtime.operate)
    STATS = "stats"
    #: one message's state, attempts, result and progress by id (``queue.status``)
    STATUS = "status"
    DEAD_LIST = "dead_list"
    DEAD_LIST_NEWEST = "dead_list_newest"
    DEAD_SHOW = "dead_show"
    REDRIVE = "redrive"
    REDRIVE_ALL = "redrive_all"
    REDRIVE_BLOCKED = "redrive_blocked"
    REDRIVE_BLOCKED_ALL = "redrive_blocked_all"
    #: a dead-letter table with a group column: every dead message of one group
    REDRIVE_GROUP = "redrive_group"
    REDRIVE_BLOCKED_GROUP = "redrive_blocked_group"
    PURGE_DEAD = "purge_dead"
    PURGE_DEAD_ALL = "purge_dead_all"
    # the unfinished rows of each group, and moving a group's rows to another (qgen verify)
    GROUPS = "groups"
    #: the groups holding unfinished rows, one index probe each (the console's overview)
    GROUP_NAMES = "group_names"
    REGROUP = "regroup"
    CANCEL = "cancel"
    # a rate limit's token bucket (qgen.toml rate_limit): taken before a claim, the unused returned
    RATE_TAKE = "rate_take"
    RATE_REFUND = "rate_refund"
    # max_in_flight on a row-lock queue: the slot rows its claims lock, made once
    LIMIT_SLOTS = "limit_slots"
    # schedules (runtime.schedules): the clock, each schedule's state, firing, pausing
    SCHEDULE_NOW = "schedule_now"
    SCHEDULE_STATE = "schedule_state"
    SCHEDULE_START = "schedule_start"
    SCHEDULE_FIRE = "schedule_fire"
    SCHEDULE_PAUSE = "schedule_pause"
    # the pending rows in id order, and bringing delayed rows nearer (runtime.testing)
    PENDING_LIST = "pending_list"
    ADVANCE = "advance"
    # the console's per-minute counts and queue page (queue and outbox)
    FINISHED_PER_MINUTE = "finished_per_minute"
    ENQUEUED_PER_MINUTE = "enqueued_per_minute"
    READY_BY_PRIORITY = "ready_by_priority"
    FIFO_WAITING = "fifo_waiting"
    # pausing a queue or one group: the claim skips a paused scope (runtime.operate)
    PAUSE = "pause"
    RESUME = "resume"
    PAUSED = "paused"
    # the outbox's
    PUT = "put"
    FETCH = "fetch"
    MARK = "mark"
    PRUNE = "prune"
    # a partitioned layout: make upcoming partitions, drop those wholly past an age
    ROTATE = "rotate"
    ROUTINES = "routines"


class Statement(str):
    """One statement's SQL, exactly as the driver receives it, with its ``kind``.

    It is the text itself (a ``str``), so a driver takes it as it is:
    ``await conn.execute(statement, params)``.
    """

    kind: Kind

    def __new__(cls, sql: str, kind: Kind) -> Statement:
        self = super().__new__(cls, sql)
        self.kind = kind
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (Statement, (str(self), self.kind))


#: the statements of one named block, run in order (in one transaction when several)
Step = tuple[Statement, ...]


@dataclass(frozen=True)
class Block:
    """One named block: its name, the line saying what it does, and its statements."""

    name: str
    doc: str
    statements: Step


@dataclass(frozen=True)
class Header:
    """The settings a rendered file declares, typed; checked when the file is read."""

    #: "queue" or "outbox"
    kind: str
    #: the queue's (or the outbox's) name in qgen.toml
    name: str
    dialect: str
    table: str
    #: logical column role → the table's real column name
    columns: Mapping[str, str]
    #: the claim form (queues only)
    form: str | None = None
    max_attempts: int | None = None
    dead_group: str | None = None
    dead_table: str | None = None
    lease_s: float | None = None
    default_group: str | None = None
    #: the table's columns without a role, which enqueue may give values (``values=``)
    other_columns: tuple[str, ...] = ()
    #: what a reader of the file should know (e.g. SQLite's serial row lock)
    note: str | None = None
    #: the channel the enqueue notifies and idle consumers listen on (LISTEN/NOTIFY engines)
    channel: str | None = None
    #: the queue's schedules, checked (``runtime.contract.schedule_slots.Schedule``), in name order
    schedules: tuple[Schedule, ...] = ()
    #: the table that keeps each schedule's last decided slot (queues with schedules)
    schedule_table: str | None = None
    #: the table of paused scopes the claim consults (None: the queue cannot be paused)
    pause_table: str | None = None
    #: a partitioned layout's default partition, which holds the pending rows (None: plain)
    pending_table: str | None = None

    @property
    def dead_letter(self) -> str | None:
        """The dead letter for people: ``group orders_dead`` or ``table emails_dead``."""
        if self.dead_group is not None:
            return f"group {self.dead_group}"
        if self.dead_table is not None:
            return f"table {self.dead_table}"
        return None

    def lines(self) -> list[str]:
        """The header as written: one `-- key: <JSON>` line per setting, in a fixed order."""
        values: dict[str, Any] = {self.kind: self.name, "dialect": self.dialect}
        if self.kind == "queue":
            values["form"] = self.form
        values["table"] = self.table
        values["columns"] = dict(self.columns)
        if self.kind == "queue":
            values["max_attempts"] = self.max_attempts
            dead = None
            if self.dead_group is not None:
                dead = {"group": self.dead_group}
            elif self.dead_table is not None:
                dead = {"table": self.dead_table}
            values["dead_letter"] = dead
            if self.lease_s is not None:
                values["lease_s"] = _number(self.lease_s)
            if self.default_group is not None:
                values["default_group"] = self.default_group
            if self.other_columns:
                values["other_columns"] = list(self.other_columns)
            if self.channel is not None:
                values["channel"] = self.channel
            if self.schedules:
                values["schedule_table"] = self.schedule_table
                values["schedules"] = {s.name: s.as_header() for s in self.schedules}
            if self.pause_table is not None:
                values["pause_table"] = self.pause_table
            if self.pending_table is not None:
                values["pending_table"] = self.pending_table
        if self.note is not None:
            values["note"] = self.note
        return [f"-- {k}: {_json(v)}" for k, v in values.items()]


def _json(value: Any) -> str:
    # ensure_ascii escapes every non-ASCII character, U+2028 and U+0085 included: a value
    # is always one line of plain ASCII, whatever bytes the declaration held
    return json.dumps(value, ensure_ascii=True, separators=(", ", ": "), allow_nan=False)


def _number(value: float) -> int | float:
    return int(value) if float(value).is_integer() else float(value)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def write_file(header: Header, blocks: Iterable[Block]) -> str:
    """The file's text, sealed: ``write_file(header, blocks)``; ``parse_rendered`` reads it back."""
    head = [TITLE, *header.lines()]
    body: list[str] = []
    for block in blocks:
        body += ["", f"-- name: {block.name}", f"-- {_one_line(block.doc)}"]
        body.append(_KINDS_PREFIX + " ".join(s.kind.value for s in block.statements))
        body += [f"{s};" for s in block.statements]
    # the seal is the last header line: the digest of the file without that line
    unsealed = "\n".join([*head, *body]) + "\n"
    seal = f"-- seal: sha256:{_digest(unsealed)}"
    return "\n".join([*head, seal, *body]) + "\n"


def _one_line(text: str) -> str:
    return " ".join(text.split())


# ------------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class RenderedFile:
    """A rendered file as read: its typed ``header`` and ``statements`` (name → Step)."""

    path: str
    header: Header
    statements: Mapping[str, Step] = field(default_factory=dict)

    @property
    def dialect(self) -> Dialect:
        return DIALECTS[self.header.dialect]

    @property
    def columns(self) -> dict[str, str]:
        """Logical column → the table's real name, as declared."""
        return dict(self.header.columns)

    def check_runs_on(self, dialect: Dialect) -> None:
        """DialectMismatch unless a connection of ``dialect`` may run this file (a file
        rendered for one dialect runs only on the engines that accept it)."""
        if dialect.name not in self.dialect.runs_on:
            raise DialectMismatch(
                f"{self.path} was rendered for {self.dialect.name} but the connection reaches "
                f"{dialect.name}; load sql/{dialect.name}/… instead "
                f"(render it with `qgen render --dialect {dialect.name}`)"
            )

    def get(self, name: str) -> Step | None:
        """The block ``name``'s statements, or None. By a name chosen at run time (a test, a
        bench); the runtime reads a loaded file's typed steps instead (``queue.steps``)."""
        return self.statements.get(name)

    def require(self, name: str) -> Step:
        """The block ``name``'s statements; RenderedFileError when the file has none."""
        st = self.statements.get(name)
        if not st:
            raise RenderedFileError(
                f"{self.path}: has no '{name}' statement; render it again with `qgen render`"
            )
        return st


def _error(path: str, problem: str) -> RenderedFileError:
    return RenderedFileError(f"{path}: {problem}; {_RENDER_AGAIN}")


def decode_text(data: bytes, path: str) -> str:
    """A file's bytes as text, or the one error every unreadable file gets."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _error(
            path, f"is not UTF-8 text (byte {exc.start} cannot be read): it was re-encoded"
        ) from None


def is_rendered(text: str) -> bool:
    """Whether a text starts as a file qgen rendered (sealed or not)."""
    return text.startswith("-- DO NOT EDIT: rendered by `qgen render`")


def parse_rendered(text: str | bytes, path: str = "<text>") -> RenderedFile:
    """Read a rendered file's text (or bytes), checking its seal, header and blocks.

    Raises RenderedFileError, naming the file and `qgen render`, for anything else.
    """
    if isinstance(text, bytes):
        text = decode_text(text, path)
    if not is_rendered(text):
        raise _error(path, "not a file rendered by qgen (no DO NOT EDIT header)")
    if "\r" in text:
        raise _error(path, "has CR or CRLF line ends: it was converted after rendering")
    lines = text.split("\n")
    if lines[-1] != "":
        raise _error(path, "does not end with a line end: it was truncated or edited")
    lines.pop()
    _check_seal(lines, path)
    values: dict[str, Any] = {}
    i = 1
    while i < len(lines) and lines[i]:
        m = _HEADER_LINE.fullmatch(lines[i])
        if m is None or m.group(1) in values:
            raise _error(path, f"header line {i + 1} is not one qgen writes")
        if m.group(1) != "seal":
            try:
                values[m.group(1)] = json.loads(m.group(2))
            except ValueError:
                raise _error(path, f"header line {i + 1} holds no JSON value") from None
        i += 1
    header = _header(values, path)
    return RenderedFile(path=path, header=header, statements=split_blocks(lines[i:], path))


def read_rendered(path: str | Path) -> RenderedFile:
    """Read and check the rendered file at ``path`` (see ``parse_rendered``)."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise RenderedFileError(
            f"{path}: cannot be read ({exc.strerror or exc}); render it with `qgen render`"
        ) from None
    return parse_rendered(data, str(path))


def _check_seal(lines: list[str], path: str) -> None:
    seals = [n for n, line in enumerate(lines) if line.startswith("-- seal:")]
    if not seals:
        raise _error(path, "has no seal: it was written by hand or by an older qgen")
    n = seals[0]
    m = _SEAL_LINE.fullmatch(lines[n])
    rest = [*lines[:n], *lines[n + 1 :]]
    if len(seals) > 1 or m is None or m.group(1) != _digest("\n".join(rest) + "\n"):
        raise _error(
            path,
            "does not match its seal: it was edited, truncated or re-encoded after "
            "`qgen render` wrote it",
        )


def split_blocks(lines: list[str], path: str) -> dict[str, Step]:
    """The named blocks after the header: the one splitter the generator and runtime share.

    Each block is `-- name: NAME`, one line saying what it does, `-- kinds: …`, then SQL
    lines until the next `-- name:` line; a statement ends at a line ending with ';'.
    """
    statements: dict[str, Step] = {}
    i = 0
    while i < len(lines):
        if not lines[i]:
            i += 1
            continue
        m = _NAME_LINE.fullmatch(lines[i])
        if m is None or not _STATEMENT_NAME.fullmatch(m.group(1)):
            raise _error(path, f"line {i + 1} of the body is not a `-- name:` line")
        name = m.group(1)
        if name in statements:
            raise _error(path, f"statement '{name}' appears twice")
        if i + 2 >= len(lines) or not lines[i + 1].startswith("-- "):
            raise _error(path, f"statement '{name}' has no line saying what it does")
        if not lines[i + 2].startswith(_KINDS_PREFIX):
            raise _error(path, f"statement '{name}' has no `-- kinds:` line")
        try:
            kinds = [Kind(k) for k in lines[i + 2][len(_KINDS_PREFIX) :].split(" ")]
        except ValueError:
            raise _error(path, f"statement '{name}' names an unknown kind") from None
        i += 3
        body: list[str] = []
        while i < len(lines) and not _NAME_LINE.fullmatch(lines[i]):
            body.append(lines[i])
            i += 1
        sqls = split_statements(body)
        if sqls is None:
            raise _error(path, f"statement '{name}' does not end with ';'")
        if len(sqls) != len(kinds):
            raise _error(
                path, f"statement '{name}' has {len(sqls)} statements but {len(kinds)} kinds"
            )
        statements[name] = tuple(Statement(s, k) for s, k in zip(sqls, kinds, strict=True))
    return statements


def split_statements(body: list[str]) -> list[str] | None:
    """A block's SQL lines cut into statements at lines ending with ';' (the ';' dropped);
    None when text follows the last one. Blank lines after the last statement separate
    blocks and are not part of it."""
    while body and not body[-1]:
        body = body[:-1]
    out: list[str] = []
    current: list[str] = []
    for line in body:
        current.append(line)
        if line.endswith(";"):
            out.append("\n".join(current)[:-1])
            current = []
    return None if current else out


_Bad = Callable[[str], RenderedFileError]

_HEADER_KEYS = {
    "queue": {"queue", "dialect", "form", "table", "columns", "max_attempts"}
    | {"dead_letter", "lease_s", "default_group", "other_columns", "note", "channel"}
    | {"schedules", "schedule_table", "pause_table", "pending_table"},
    "outbox": {"outbox", "dialect", "table", "columns", "note"},
}


def _header_kind(values: Mapping[str, Any], path: str) -> str:
    """ "queue" or "outbox", with no key that kind's header does not know."""
    kind = "queue" if "queue" in values else "outbox" if "outbox" in values else None
    if kind is None:
        raise _error(path, "the header names no queue or outbox")
    unknown = sorted(set(values) - _HEADER_KEYS[kind])
    if unknown:
        raise _error(path, f"the header holds {unknown[0]!r}, which this runtime does not know")
    return kind


def _header_ident(key: str, v: Any, bad: _Bad) -> str:
    if not is_identifier(v):
        raise bad(key)
    return v


def _header_note(values: Mapping[str, Any], bad: _Bad) -> str | None:
    v = values.get("note")
    if v is None:
        return None
    if not isinstance(v, str) or not v or not v.isprintable() or v != v.strip():
        raise bad("note")
    return v


def _header_columns(values: Mapping[str, Any], bad: _Bad) -> dict[str, str]:
    columns = values.get("columns")
    if not isinstance(columns, dict) or "id" not in columns or "payload" not in columns:
        raise bad("columns")
    return {
        _header_ident("columns", k, bad): _header_ident("columns", v, bad)
        for k, v in columns.items()
    }


def _header_max_attempts(values: Mapping[str, Any], bad: _Bad) -> int | None:
    max_attempts = values.get("max_attempts")
    if max_attempts is not None and (
        isinstance(max_attempts, bool) or not isinstance(max_attempts, int) or max_attempts < 1
    ):
        raise bad("max_attempts")
    return max_attempts


def _header_dead_letter(values: Mapping[str, Any], bad: _Bad) -> tuple[str | None, str | None]:
    """(dead_group, dead_table): at most one of them."""
    dead = values.get("dead_letter")
    if dead is None:
        return None, None
    if not isinstance(dead, dict) or len(dead) != 1:
        raise bad("dead_letter")
    if "group" not in dead:
        return None, _schema_table(dead.get("table"), bad)
    dead_group = dead["group"]
    if not isinstance(dead_group, str) or not dead_group:
        raise bad("dead_letter")
    return dead_group, None


def _header_lease_s(values: Mapping[str, Any], form: str, bad: _Bad) -> float | None:
    """The lease form's lease in seconds; no other form has one."""
    lease_s = values.get("lease_s")
    if (form == "lease") != (lease_s is not None):
        raise bad("lease_s")
    if lease_s is None:
        return None
    if (
        isinstance(lease_s, bool)
        or not isinstance(lease_s, int | float)
        or not math.isfinite(lease_s)
        or lease_s <= 0
    ):
        raise bad("lease_s")
    return float(lease_s)


def _header_default_group(values: Mapping[str, Any], bad: _Bad) -> str | None:
    default_group = values.get("default_group")
    if default_group is not None and (not isinstance(default_group, str) or not default_group):
        raise bad("default_group")
    return default_group


def _header_channel(values: Mapping[str, Any], bad: _Bad) -> str | None:
    channel = values.get("channel")
    if channel is not None and (not isinstance(channel, str) or not _CHANNEL.fullmatch(channel)):
        raise bad("channel")
    return channel


def _header_schedules(
    values: Mapping[str, Any], bad: _Bad
) -> tuple[tuple[Schedule, ...], str | None]:
    """The schedules and, when there are any, the table keeping their slots."""
    schedules = _schedules(values.get("schedules", {}), bad)
    if not schedules:
        return schedules, None
    return schedules, _schema_table(values.get("schedule_table"), lambda _: bad("schedules"))


def _header_table(values: Mapping[str, Any], key: str, bad: _Bad) -> str | None:
    """An optional table name (pause_table, pending_table), checked like the queue's."""
    table = values.get(key)
    return None if table is None else _schema_table(table, bad)


def _header(values: dict[str, Any], path: str) -> Header:
    """The typed header, every value checked: a file that passed its seal but holds values
    this runtime cannot use (another format) fails here, at load, not at first use."""

    def bad(key: str) -> RenderedFileError:
        return _error(path, f"header value {key} is not one this runtime can use")

    kind = _header_kind(values, path)
    if values.get("dialect") not in DIALECTS:
        raise bad("dialect")
    header = Header(
        kind=kind,
        columns=_header_columns(values, bad),
        name=_header_ident(kind, values.get(kind), bad),
        dialect=values["dialect"],
        table=_schema_table(values.get("table"), bad),
        note=_header_note(values, bad),
    )
    if kind == "outbox":
        return header
    form = values.get("form")
    if form not in FORMS:
        raise bad("form")
    max_attempts = _header_max_attempts(values, bad)
    dead_group, dead_table = _header_dead_letter(values, bad)
    lease_s = _header_lease_s(values, form, bad)
    default_group = _header_default_group(values, bad)
    others = values.get("other_columns", [])
    if not isinstance(others, list):
        raise bad("other_columns")
    channel = _header_channel(values, bad)
    schedules, schedule_table = _header_schedules(values, bad)
    pause_table = _header_table(values, "pause_table", bad)
    pending_table = _header_table(values, "pending_table", bad)
    return replace(
        header,
        form=form,
        max_attempts=max_attempts,
        dead_group=dead_group,
        dead_table=dead_table,
        lease_s=lease_s,
        default_group=default_group,
        other_columns=tuple(_header_ident("other_columns", o, bad) for o in others),
        channel=channel,
        schedules=schedules,
        schedule_table=schedule_table,
        pause_table=pause_table,
        pending_table=pending_table,
    )


def _schedules(value: Any, bad: Any) -> tuple[Schedule, ...]:
    """The header's schedules, each checked as the generator checked its declaration."""
    if not isinstance(value, dict):
        raise bad("schedules")
    out = []
    for name, raw in value.items():
        if not isinstance(raw, dict) or not is_identifier(name):
            raise bad("schedules")
        try:
            out.append(parse_schedule(name, raw, from_header=True))
        except ScheduleError:
            raise bad("schedules") from None
    return tuple(out)


def _schema_table(value: Any, bad: Any) -> str:
    """A table name: an identifier, or schema.identifier."""
    if not is_table_name(value):
        raise bad("table")
    return value
