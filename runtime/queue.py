"""A loaded queue: its rendered statements, what its header declares, and enqueue."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any

from runtime import wake
from runtime.adapters import Adapted, adapt, run_sync
from runtime.dialects import Dialect
from runtime.drivers.base import Connection
from runtime.errors import ConfigurationError, DialectMismatch, PayloadError
from runtime.outcomes import delay_seconds
from runtime.payloads import Decoder, Encoder, decode_payload, encode_payload
from runtime.rendered import RenderedFile
from runtime.rendered import StatementName as S
from runtime.steps import run_step

__all__ = ["Queue", "check_dialect", "decode_payload", "delay_seconds", "encode_payload"]


def check_dialect(rendered: RenderedFile, conn: Connection | Adapted) -> None:
    """A file rendered for one dialect runs only on the engines that accept it."""
    d = rendered.dialect
    if conn.dialect.name not in d.runs_on:
        raise DialectMismatch(
            f"{rendered.path} was rendered for {d.name} but the connection reaches "
            f"{conn.dialect.name}; load sql/{conn.dialect.name}/… instead "
            f"(render it with `qgen render --dialect {conn.dialect.name}`)"
        )


#: a priority fits the column every engine stores it in (a 32-bit INTEGER)
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def _priority(queue: str, priority: Any) -> int | None:
    """A priority as the enqueue binds it: a whole number in PRIORITY_RANGE, or None (0)."""
    if priority is None:
        return None
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
        raise ValueError(
            f"queue '{queue}': priority {priority!r} is not a whole number from {low} to {high}"
        )
    return priority


#: a fifo_key fits the column every engine stores it in (MySQL's indexed VARCHAR(191))
FIFO_KEY_MAX = 191


def _fifo_key(queue: str, key: Any) -> str | None:
    """A fifo_key as the enqueue binds it: 1 to FIFO_KEY_MAX characters, or None."""
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= FIFO_KEY_MAX:
        raise ValueError(
            f"queue '{queue}': fifo_key {key!r} is not a string of 1 to {FIFO_KEY_MAX} characters"
        )
    return key


@dataclass
class Queue:
    """A queue loaded from its rendered file: ``queue = runtime.load("sql/sqlite/orders.sql")``.

    Its settings are the file's typed header, checked when the file was read. ``encoder`` and
    ``decoder`` widen the payload types (see runtime.payloads): the encoder turns a value
    JSON cannot carry into one it can, the decoder gets every decoded JSON object.
    """

    rendered: RenderedFile
    encoder: Encoder | None = None
    decoder: Decoder | None = None

    @cached_property
    def name(self) -> str:
        return self.rendered.header.name

    @cached_property
    def dialect(self) -> Dialect:
        return self.rendered.dialect

    @cached_property
    def form(self) -> str:
        return self.rendered.header.form or ""

    @cached_property
    def table(self) -> str:
        return self.rendered.header.table

    @cached_property
    def max_attempts(self) -> int | None:
        return self.rendered.header.max_attempts

    @cached_property
    def dead_group(self) -> str | None:
        return self.rendered.header.dead_group

    @cached_property
    def default_group(self) -> str | None:
        return self.rendered.header.default_group

    @cached_property
    def lease_s(self) -> float | None:
        return self.rendered.header.lease_s

    @cached_property
    def columns(self) -> dict[str, str]:
        return self.rendered.columns

    def _enqueue_params(
        self,
        payload: Any,
        delay: float | timedelta | None,
        group: str | None,
        values: Mapping[str, Any] | None = None,
        priority: int | None = None,
        fifo_key: str | None = None,
    ) -> dict[str, Any]:
        cols = self.columns
        if group is not None and "group" not in cols:
            raise ConfigurationError(
                f"queue '{self.name}' has no group column: enqueue without group=, or declare "
                "columns.group and render again"
            )
        if delay is not None and "retry_after" not in cols:
            raise ConfigurationError(
                f"queue '{self.name}' has no retry_after column, so it cannot delay a message: "
                "enqueue without delay=, or declare columns.retry_after and render again"
            )
        others = self.rendered.header.other_columns
        unknown = sorted(set(values or ()) - set(others))
        if unknown:
            raise ConfigurationError(
                f"queue '{self.name}' has no other column {unknown[0]!r} (declared: "
                f"{', '.join(others) or 'none'}): list it under other_columns and render again"
            )
        params = {
            "payload": encode_payload(payload, self.encoder),
            "group": group if group is not None else self.default_group,
            "delay_s": None if delay is None else delay_seconds(delay),
        }
        if "priority" in cols:
            params["priority"] = _priority(self.name, priority)
        elif priority is not None:
            raise ConfigurationError(
                f"queue '{self.name}' has no priority column: enqueue without priority=, or "
                "declare columns.priority and render again"
            )
        if "fifo_key" in cols:
            params["fifo_key"] = _fifo_key(self.name, fifo_key)
        elif fifo_key is not None:
            raise ConfigurationError(
                f"queue '{self.name}' has no fifo_key column: enqueue without fifo_key=, or "
                "declare columns.fifo_key and render again"
            )
        for col in others:  # a column not given gets NULL: list only those you set
            params[f"value_{col}"] = (values or {}).get(col)
        if self.rendered.header.channel is not None:
            params["channel"] = self.rendered.header.channel
        return params

    def _wake(self, conn: Connection | Adapted) -> None:
        """Wake this process's idle consumers of the table on an engine without LISTEN/NOTIFY
        (there the enqueue's own notification does, at commit)."""
        if not self.dialect.listen_notify:
            wake.enqueued(self.table, conn.url if isinstance(conn, Connection) else None)

    async def enqueue(
        self,
        db: Any,
        payload: Any,
        delay: float | timedelta | None = None,
        group: str | None = None,
        values: Mapping[str, Any] | None = None,
        priority: int | None = None,
        fifo_key: str | None = None,
    ) -> int:
        """Add one message on ``db``, inside its open transaction if there is one; returns the
        new message's id. ``await queue.enqueue(db, {"order": 7}, delay=30)``

        ``db`` is the runtime's connection or the service's own (psycopg 3, aiosqlite,
        SQLAlchemy AsyncConnection or AsyncSession): the statement runs on it as it is, and
        the service's commit or rollback decides. ``values`` gives the table's other columns
        (``other_columns``) their values; ``priority`` (a priority column) puts the message
        before lower ones in the claim (None: the column's default, 0); ``fifo_key`` (a fifo_key
        column) delivers it only after every earlier message of that key has finished
        (None: no ordering). A payload an engine could not keep as it is raises
        PayloadError, nothing written; a delay that is NaN, infinite, negative or past
        MAX_DELAY_S raises ValueError.

        Idle consumers wake: on PostgreSQL the statement notifies the queue's channel, sent
        when the transaction commits (a rolled-back enqueue wakes nobody); elsewhere this
        process's consumers of the table are woken right after the statement ran (before a
        transaction the caller has open commits: then they claim once, find nothing, and
        poll on)."""
        conn = adapt(db)
        check_dialect(self.rendered, conn)
        result = await run_step(
            conn,  # type: ignore[arg-type]
            self.rendered.require(S.ENQUEUE),
            self._enqueue_params(payload, delay, group, values, priority, fifo_key),
        )
        self._wake(conn)
        return int(result.rows[0]["id"])

    async def enqueue_many(
        self,
        db: Any,
        payloads: Iterable[Any],
        delay: float | timedelta | None = None,
        group: str | None = None,
        values: Mapping[str, Any] | None = None,
        priority: int | None = None,
        fifo_key: str | None = None,
    ) -> int:
        """Add many messages in one batch; returns how many. ``await queue.enqueue_many(db, items)``
        (``priority`` and ``fifo_key`` apply to every item; items of one key keep their order)

        Every payload is checked first: one that cannot be stored raises PayloadError and
        nothing of the batch is written. Consumers wake as for ``enqueue`` (PostgreSQL folds
        a transaction's notifications into one)."""
        conn = adapt(db)
        check_dialect(self.rendered, conn)
        insert = self.rendered.require(S.ENQUEUE)[0]  # the INSERT; ids are not read back here
        params = []
        for i, p in enumerate(payloads):
            try:
                params.append(self._enqueue_params(p, delay, group, values, priority, fifo_key))
            except PayloadError as exc:
                raise PayloadError(f"item {i} of the batch: {exc}") from None
        if params:
            await conn.executemany(insert, params)
            self._wake(conn)
        return len(params)

    # ----------------------------------------------------------------- operating

    async def stats(self, db: Any, group: str | None = None) -> dict[str, Any]:
        """The queue's counts by the database's clock: ``await queue.stats(db)`` →
        ``{"ready": 3, "delayed": 1, "in_flight": 0, "dead": 2, "processed": 10,
        "oldest_ready_s": 4.2}``.

        ready: claimable now (row lock, and advisory but on PostgreSQL: including rows a
        consumer holds, which SQL cannot see); delayed: retry_after in the future; in_flight:
        leases in the future (lease form), rows whose advisory key a session holds (advisory
        on PostgreSQL, from pg_locks), None otherwise; dead: in the dead letter (None without one);
        processed: kept rows marked processed (None without processed_at); oldest_ready_s:
        seconds since the first ready message in id order was enqueued (None without an
        enqueued_at column). ``group`` defaults to the queue's default_group."""
        from runtime import operate

        return await operate.stats(self, db, group)

    async def dead_list(
        self, db: Any, limit: int = 100, after_id: int | None = None, newest_first: bool = False
    ) -> list[dict[str, Any]]:
        """A page of dead messages (id, payload, attempt, …), oldest first or newest first;
        pass the last id of a page as ``after_id`` for the next.
        ``page = await queue.dead_list(db, limit=50)``"""
        from runtime import operate

        return await operate.dead_list(self, db, limit, after_id, newest_first)

    async def dead_show(self, db: Any, id: int) -> dict[str, Any] | None:
        """One dead message by id, or None. ``await queue.dead_show(db, 42)``"""
        from runtime import operate

        return await operate.dead_show(self, db, id)

    async def redrive(
        self, db: Any, ids: Iterable[int] | None = None, group: str | None = None
    ) -> int:
        """Send dead messages (``ids``, or all of them) back to the queue as first deliveries
        (attempt 1, no delay, no lease), in one transaction; returns how many. A dead-letter
        group sends them to ``group`` (default: the queue's default_group); a dead-letter
        table moves them back, ids kept. ``await queue.redrive(db, [42, 43])``"""
        from runtime import operate

        return await operate.redrive(self, db, ids, group)

    async def purge_dead(self, db: Any, ids: Iterable[int] | None = None) -> int:
        """Delete dead messages (``ids``, or all of them) for good; returns how many.
        ``await queue.purge_dead(db, [42])``"""
        from runtime import operate

        return await operate.purge_dead(self, db, ids)

    async def prune(
        self, db: Any, older_than_s: float, batch: int = 1000, group: str | None = None
    ) -> int:
        """Delete rows marked processed more than ``older_than_s`` seconds ago (the database's
        clock), ``batch`` rows per statement, each committed on its own, until a batch comes
        back short; unprocessed rows stay. Returns how many. ``await queue.prune(db, 86400)``"""
        from runtime import operate

        return await operate.prune(self, db, older_than_s, batch, group)

    @property
    def sync(self) -> SyncQueue:
        """The same enqueue for blocking code and a blocking connection (psycopg, sqlite3,
        PyMySQL, SQLAlchemy Connection or Session): ``queue.sync.enqueue(conn, {"n": 1})``."""
        return SyncQueue(self)


class SyncQueue:
    """``queue.sync``: enqueue and enqueue_many on a blocking connection, in its transaction.

    The very code of the async methods runs, over an adapter that never suspends."""

    def __init__(self, queue: Queue) -> None:
        self.queue = queue

    def enqueue(
        self,
        conn: Any,
        payload: Any,
        delay: float | timedelta | None = None,
        group: str | None = None,
        values: Mapping[str, Any] | None = None,
        priority: int | None = None,
        fifo_key: str | None = None,
    ) -> int:
        """``queue.sync.enqueue(conn, payload, …)`` → the new message's id."""
        return run_sync(
            self.queue.enqueue(
                adapt(conn, sync=True), payload, delay, group, values, priority, fifo_key
            )
        )

    def enqueue_many(
        self,
        conn: Any,
        payloads: Iterable[Any],
        delay: float | timedelta | None = None,
        group: str | None = None,
        values: Mapping[str, Any] | None = None,
        priority: int | None = None,
        fifo_key: str | None = None,
    ) -> int:
        """``queue.sync.enqueue_many(conn, payloads, …)`` → how many."""
        return run_sync(
            self.queue.enqueue_many(
                adapt(conn, sync=True), payloads, delay, group, values, priority, fifo_key
            )
        )
