"""One message's state by id: ``await queue.status(db, id)`` → ``runtime.Status`` or None.

The queue's ``status`` statement reads the row (and its dead-letter table's, when it has
one) by the database's clock and says which state it is in; this module turns that row into
a ``Status``. What each form can tell:

* ``running``: the lease form sees a lease in the future; the advisory form on PostgreSQL
  sees the row's key held (pg_locks), and on SQLite the keys held by consumers of this
  process. A row lock's hold, and an advisory key on MySQL or MariaDB, are invisible to SQL:
  such a row reads ``pending`` while its handler runs.
* ``done``: the row is marked processed (a processed_at column). Without one an ack deletes
  the row, and status returns None, as for an id never enqueued or already pruned.
* ``cancelled``: ``queue.cancel`` finishes a row exactly as ack does, so the table keeps
  nothing that tells the two apart: a cancelled row reads ``done`` (with no result).
* ``dead``: in the dead-letter group or table.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from runtime.contract.errors import InvalidArgument, PayloadError
from runtime.loaded import LoadedQueue
from runtime.operate import _need, _run
from runtime.payloads import decode_payload, shown_payload
from runtime.process_keys import key_held

State = Literal["pending", "running", "done", "dead", "cancelled"]
#: every state a Status may be in
STATES: tuple[State, ...] = ("pending", "running", "done", "dead", "cancelled")


@dataclass(frozen=True)
class Status:
    """A message's state by id, as ``queue.status(db, id)`` reads it.

    ``state``: pending (waiting, or delayed), running, done, dead or cancelled (see
    runtime.status for what each form can tell); ``attempts``: the deliveries it had (None
    without an attempt column); ``result``: what ``ack(result=…)`` kept; ``progress``: what
    ``ctx.progress()`` last wrote; ``last_error``: why its last delivery failed;
    ``enqueued_at`` and ``processed_at`` as aware UTC datetimes. Each is None where the
    table has no such column. ``payload``: the message as enqueued, decoded as a delivered
    payload is (by the queue's decoder), or its stored text when it cannot be, with
    ``payload_error`` saying why. These two come last so that positional construction keeps
    working.
    """

    id: int
    state: State
    attempts: int | None = None
    result: Any = None
    progress: Any = None
    last_error: str | None = None
    enqueued_at: datetime | None = None
    processed_at: datetime | None = None
    payload: Any = None
    payload_error: str | None = None


def _when(value: Any) -> datetime | None:
    """A stored time as an aware UTC datetime (MySQL's DATETIME(6) and SQLite's text keep UTC
    without saying so)."""
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if not isinstance(value, datetime):
        raise PayloadError(f"a stored time is a {type(value).__name__}, not a timestamp")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _json(queue: LoadedQueue, value: Any) -> Any:
    return None if value is None else decode_payload(value, queue.decoder)


def _held_here(queue: LoadedQueue, message: int) -> bool:
    """SQLite's advisory keys live in the consumers' process: this one's are known."""
    if queue.form != "advisory" or queue.dialect.server_advisory:
        return False
    return key_held(queue.table, message)


async def status(queue: LoadedQueue, db: Any, id: int) -> Status | None:
    """Message ``id``'s Status, or None when no row has it (see ``Queue.status``)."""
    if isinstance(id, bool) or not isinstance(id, int):
        raise InvalidArgument(f"id must be a message id (a whole number), not {id!r}")
    result = await _run(
        queue,
        db,
        _need(queue, queue.steps.status, "status"),
        {"id": id, "dead_group": queue.dead_group},
    )
    if not result.rows:
        return None
    row = result.rows[0]
    state = row["state"]
    if state == "pending" and _held_here(queue, id):
        state = "running"
    attempts = row["attempts"]
    payload, payload_error = shown_payload(row["payload"], queue.decoder)
    return Status(
        id=int(row["id"]),
        state=state,
        attempts=None if attempts is None else max(int(attempts), 0),
        result=_json(queue, row["result"]),
        progress=_json(queue, row["progress"]),
        last_error=row["last_error"],
        enqueued_at=_when(row["enqueued_at"]),
        processed_at=_when(row["processed_at"]),
        payload=payload,
        payload_error=payload_error,
    )
