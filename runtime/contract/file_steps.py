"""A loaded file's steps, typed: one attribute per statement the runtime runs, built and
checked once when the file is loaded (``QueueSteps``, ``OutboxSteps``).

The runtime reads ``queue.steps.claim``, ``queue.steps.extend``, … instead of looking
statements up by name where it runs them. ``queue_steps`` checks that every statement the
header's form, columns and settings need is there: a file without one (a lease queue without
``extend``, a retry_after column without ``retry_after``) is refused at load with a
RenderedFileError naming the file and the statement, never at the first claim that needs it.
A statement that only some files hold, and whose absence the runtime handles (a row-lock
queue's ``take``, an operation a file rendered by an older qgen lacks), is ``Step | None``.

Names stay only where they are data: the statement that settles an outcome (``settle``,
keyed by the outcome's statement name, ``custom.<name>`` included), an outcome's statement
for several deliveries (``many``, keyed the same way: ``many["ack"]`` is ``ack_many``) and
the service's own events (``custom``, by event name).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

from runtime.contract.dialects import DIALECTS, Dialect
from runtime.contract.errors import RenderedFileError
from runtime.contract.rendered import Header, RenderedFile, Step

#: the statements that settle an outcome, by the name a Decision carries
SETTLE_NAMES = ("ack", "ack_result", "drop", "retry", "retry_after", "dead_letter")
#: the outcomes with a statement for several deliveries (``<name>_many``)
MANY_NAMES = ("ack", "drop", "retry", "retry_after", "dead_letter")
_CUSTOM = "custom."
_MAPPINGS = ("settle", "many", "custom")


@dataclass(frozen=True, kw_only=True)
class FileSteps:
    """What every loaded file (a queue's or an outbox's) holds."""

    schema: Step
    #: the database's description of a table's columns (verify, apply)
    columns: Step
    indexes: Step
    #: the service's own events (``custom.<name>``), by name
    custom: Mapping[str, Step]
    stats: Step | None = None
    prune: Step | None = None
    finished_per_minute: Step | None = None
    enqueued_per_minute: Step | None = None
    #: a partitioned layout: make upcoming partitions, drop those wholly past an age
    rotate: Step | None = None
    #: whether the functions a layout creates exist (apply)
    routines: Step | None = None


@dataclass(frozen=True, kw_only=True)
class QueueSteps(FileSteps):
    """A queue's steps. ``Step`` fields every queue file holds; ``Step | None`` the rest,
    each present when what needs it is declared (checked at load: see ``needed``)."""

    enqueue: Step
    claim: Step
    #: an advisory claim that first finishes rows as ack_many does, in the same statement
    #: (PostgreSQL; not with limits, a fifo_key, the partitioned layout, nor where ack is the
    #: table's own statement)
    ack_claim: Step | None = None
    ack: Step
    drop: Step
    #: a settlement's statement by the name its Decision carries (``ack``, ``retry_after``,
    #: ``dead_letter``, ``custom.<name>``, …): the outcomes' own and the custom events
    settle: Mapping[str, Step]
    #: an outcome's statement for several deliveries (``many["ack"]`` is ``ack_many``)
    many: Mapping[str, Step]
    enqueue_existing: Step | None = None
    enqueue_unlock: Step | None = None
    take: Step | None = None
    extend: Step | None = None
    ack_result: Step | None = None
    progress: Step | None = None
    retry: Step | None = None
    retry_after: Step | None = None
    dead_letter: Step | None = None
    release: Step | None = None
    unclaim: Step | None = None
    unlock: Step | None = None
    listen: Step | None = None
    next_due: Step | None = None
    status: Step | None = None
    dead_list: Step | None = None
    dead_list_newest: Step | None = None
    dead_show: Step | None = None
    redrive: Step | None = None
    redrive_all: Step | None = None
    redrive_blocked: Step | None = None
    redrive_blocked_all: Step | None = None
    redrive_group: Step | None = None
    redrive_blocked_group: Step | None = None
    purge_dead: Step | None = None
    purge_dead_all: Step | None = None
    groups: Step | None = None
    #: the groups holding unfinished rows, one index probe each (the console)
    group_names: Step | None = None
    regroup: Step | None = None
    cancel: Step | None = None
    rate_take: Step | None = None
    rate_refund: Step | None = None
    limit_slots: Step | None = None
    schedule_now: Step | None = None
    schedule_state: Step | None = None
    schedule_start: Step | None = None
    schedule_fire: Step | None = None
    schedule_pause: Step | None = None
    pending_list: Step | None = None
    advance: Step | None = None
    ready_by_priority: Step | None = None
    fifo_waiting: Step | None = None
    pause: Step | None = None
    resume: Step | None = None
    paused: Step | None = None


@dataclass(frozen=True, kw_only=True)
class OutboxSteps(FileSteps):
    """An outbox's steps: put in the caller's transaction, fetch and mark in the relay's."""

    put: Step
    fetch: Step
    mark: Step


_QUEUE_ALWAYS = ("schema", "columns", "indexes", "enqueue", "claim", "ack", "drop")
_OUTBOX_ALWAYS = ("schema", "columns", "indexes", "put", "fetch", "mark", "prune")
#: what a declared column needs (a queue's)
_BY_COLUMN = {
    "retry_after": ("retry_after", "next_due"),
    "result": ("ack_result",),
    "progress": ("progress",),
    "dedupe_key": ("enqueue_existing",),
}
#: what a declared dead letter needs: the move, and operating it (runtime.operate)
_DEAD_LETTER: tuple[str, ...] = ("dead_letter", "dead_list", "dead_list_newest", "dead_show")
_DEAD_LETTER += ("redrive", "redrive_all", "purge_dead", "purge_dead_all")
#: a dead letter's redrive refuses the messages whose dedupe_key a pending message holds
_DEAD_BLOCKED = ("redrive_blocked", "redrive_blocked_all")
#: what a claim form needs whatever else is declared
_BY_FORM = {
    "lease": ("extend", "retry", "release", "unclaim"),
    "advisory": (),
    "row_lock": (),
}


def _needed_by_form(header: Header, dialect: Dialect) -> Iterator[tuple[str, str]]:
    form = header.form or ""
    for name in _BY_FORM.get(form, ()):
        yield name, f"the {form} form"
    if form == "advisory" and not dialect.advisory_claim_takes:  # else the claim takes
        yield "take", "the advisory form"
    if form == "advisory" and dialect.server_advisory:
        yield "unlock", f"the advisory form on {header.dialect}"
    counts_at_claim = (
        form == "row_lock"
        and header.dead_letter is not None
        and {"attempt", "retry_after"} <= set(header.columns)
    )
    if counts_at_claim:  # the claim counts each delivery in a statement of its own
        for name in ("take", "unclaim"):
            yield name, "the row_lock form with a dead letter and attempt and retry_after columns"


def needed(header: Header) -> list[tuple[str, str]]:
    """The statements a file with this header must hold, each with what needs it."""
    if header.kind == "outbox":
        return [(name, "every outbox") for name in _OUTBOX_ALWAYS]
    out = [(name, "every queue") for name in _QUEUE_ALWAYS]
    out += _needed_by_form(header, DIALECTS[header.dialect])
    for column, names in _BY_COLUMN.items():
        if column in header.columns:
            out += [(name, f"the {column} column") for name in names]
    if header.dead_letter is not None:
        why = f"the dead letter ({header.dead_letter})"
        out += [(name, why) for name in _DEAD_LETTER]
        if "dedupe_key" in header.columns:
            out += [(name, f"{why} with a dedupe_key column") for name in _DEAD_BLOCKED]
    elif header.max_attempts is not None:  # the cap moves a message to its dead letter
        out.append(("dead_letter", "max_attempts"))
    if header.channel is not None:
        out.append(("listen", "the header's channel"))
    if header.pause_table is not None:
        out += [(name, "the pause table") for name in ("pause", "resume", "paused")]
    if header.pending_table is not None:
        out.append(("rotate", "the partitioned layout"))
    if header.schedules:
        names = ("schedule_now", "schedule_state", "schedule_start", "schedule_fire")
        out += [(name, "the schedules") for name in (*names, "schedule_pause")]
    return out


def check_needed(rendered: RenderedFile) -> None:
    """RenderedFileError, naming the file and the first statement missing, unless the file
    holds every statement its header needs."""
    pairs = needed(rendered.header)
    if rendered.statements.get("rate_take"):  # a rate limit: the unused tokens go back
        pairs.append(("rate_refund", "the rate limit's rate_take"))
    for name, why in pairs:
        if not rendered.statements.get(name):
            raise RenderedFileError(
                f"{rendered.path}: has no '{name}' statement, which {why} needs; "
                "render it again with `qgen render`"
            )


_F = TypeVar("_F", bound=FileSteps)


def _build(cls: type[_F], rendered: RenderedFile, **mappings: Any) -> _F:
    check_needed(rendered)
    statements = rendered.statements
    custom = {
        name.removeprefix(_CUSTOM): step
        for name, step in statements.items()
        if name.startswith(_CUSTOM)
    }
    values: dict[str, Any] = {
        f.name: statements.get(f.name) for f in fields(cls) if f.name not in _MAPPINGS
    }
    return cls(custom=custom, **values, **mappings)


def queue_steps(rendered: RenderedFile) -> QueueSteps:
    """A queue file's steps, checked (RenderedFileError when one it needs is missing)."""
    statements = rendered.statements
    settle = {name: statements[name] for name in SETTLE_NAMES if statements.get(name)}
    settle |= {name: step for name, step in statements.items() if name.startswith(_CUSTOM)}
    many = {
        name: statements[f"{name}_many"] for name in MANY_NAMES if statements.get(f"{name}_many")
    }
    return _build(QueueSteps, rendered, settle=settle, many=many)


def outbox_steps(rendered: RenderedFile) -> OutboxSteps:
    """An outbox file's steps, checked (RenderedFileError when one it needs is missing)."""
    return _build(OutboxSteps, rendered)


def steps_of(rendered: RenderedFile) -> FileSteps:
    """A queue's or an outbox's steps, by the header's kind (checked as at load)."""
    return outbox_steps(rendered) if rendered.header.kind == "outbox" else queue_steps(rendered)


def present(step: Step | None, rendered: RenderedFile, name: str) -> Step:
    """``step``, which the load's check guarantees where the caller needs it (a form's own
    statements): the type narrowed, or the load's error should it be missing after all."""
    if not step:
        raise RenderedFileError(
            f"{rendered.path}: has no '{name}' statement; render it again with `qgen render`"
        )
    return step
