"""A loaded queue: its rendered statements, what its header declares, and enqueue."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from functools import cached_property
from typing import Any, Generic, Unpack

import runtime.operate as operate
import runtime.wake as wake
from runtime.adapters import Adapted, adapt, adapted, run_sync
from runtime.contract.dialects import Dialect, Server
from runtime.contract.errors import (
    ConfigurationError,
    DatabaseError,
    PayloadError,
)
from runtime.contract.file_steps import QueueSteps, present, queue_steps
from runtime.contract.rendered import Kind, RenderedFile
from runtime.drivers.base import Connection, atomic
from runtime.enqueue import (
    BATCH_OPTION_NAMES,
    BatchOptions,
    EnqueueOptions,
    Options,
    check_dedupe_keys,
)
from runtime.models import PayloadModel, codec
from runtime.outcomes import delay_seconds
from runtime.payloads import Decoder, Encoder, P, decode_payload, encode_payload
from runtime.status import Status, status
from runtime.steps import run_step

__all__ = [
    "Enqueued",
    "Queue",
    "check_dialect",
    "decode_payload",
    "delay_seconds",
    "encode_payload",
]

#: a duplicate enqueue whose pending message finishes before its id is read tries again
_DEDUPE_TRIES = 5


class Enqueued(int):
    """The id enqueue returns: an ``int``, whose ``duplicate`` is True when a pending message
    already held the dedupe_key and the id is that message's (nothing was added)."""

    duplicate: bool

    def __new__(cls, id: int, duplicate: bool = False) -> Enqueued:
        self = super().__new__(cls, id)
        self.duplicate = duplicate
        return self

    def __repr__(self) -> str:
        return f"Enqueued({int(self)}, duplicate={self.duplicate})"

    def __str__(self) -> str:
        return str(int(self))


def check_dialect(rendered: RenderedFile, conn: Connection | Adapted) -> None:
    """A file rendered for one dialect runs only on the engines that accept it."""
    rendered.check_runs_on(conn.dialect)


def check_server(queue: Queue, server: Server | None) -> str | None:
    """Whether the queue's claim form is safe on the server reached (``dialects.recognise``):
    ConfigurationError, in one line naming the form to use instead, where it is not; what it
    costs there (a warning to log) where it runs with a known cost; else None."""
    if server is None:
        return None
    why = server.refusal(queue.form)
    if why is not None:
        raise ConfigurationError(
            f"queue '{queue.name}': the {queue.form} claim form is unsafe on a {server.name} "
            f'({why}); declare form = "{server.safe}" for this queue and render again'
        )
    cost = server.cost(queue.form)
    return (
        None if cost is None else f"queue '{queue.name}': {queue.form} on a {server.name}: {cost}"
    )


@dataclass
class Queue(Generic[P]):
    """A queue loaded from its rendered file: ``queue = runtime.load("sql/sqlite/orders.sql")``.

    Its settings are the file's typed header, checked when the file was read. ``encoder`` and
    ``decoder`` widen the payload types (see runtime.payloads): the encoder turns a value
    JSON cannot carry into one it can, the decoder gets every decoded JSON object. ``model``
    (``runtime.load(path, payload=Order)``: a ``Queue[Order]``) is a dataclass, pydantic
    model or msgspec Struct each payload must be, checked at enqueue and decoded for the
    handler (runtime.models); it takes no encoder or decoder.
    """

    rendered: RenderedFile
    encoder: Encoder | None = None
    decoder: Decoder | None = None
    model: type[P] | None = None
    #: the model's codec (None without one)
    codec: PayloadModel[P] | None = field(init=False, repr=False, compare=False)

    #: the file's steps, checked when it was loaded (a missing one: RenderedFileError)
    steps: QueueSteps = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.steps = queue_steps(self.rendered)
        self.codec = codec(self.model, self.encoder, self.decoder)

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

    def _wake(self, conn: Connection | Adapted) -> None:
        """Wake this process's idle consumers of the table on an engine without LISTEN/NOTIFY
        (there the enqueue's own notification does, at commit)."""
        if not self.dialect.listen_notify:
            wake.enqueued(self.table, conn.url if isinstance(conn, Connection) else None)

    async def _enqueue(self, conn: Any, params: dict[str, Any]) -> Enqueued:
        """Run the enqueue step; a key a pending message holds gives that message's id.

        A keyed enqueue that InnoDB picks as a deadlock's victim (a consumer finishing the
        pending message of that key at the same moment) is tried again on the runtime's own
        connection outside a transaction; in the caller's transaction, that transaction was
        rolled back whole: the DatabaseError (``.deadlock``) goes to the caller."""
        own = not conn.in_transaction
        for n in range(_DEDUPE_TRIES):
            try:
                result = await run_step(conn, self.steps.enqueue, params)
            except BaseException as exc:
                await self._unlock_key(conn, params)
                deadlock = isinstance(exc, DatabaseError) and exc.deadlock
                if not (deadlock and own and params.get("dedupe_key")) or n == _DEDUPE_TRIES - 1:
                    raise
                continue
            new = result.rows[0]["id"] if result.rows else None
            if new or params.get("dedupe_key") is None:
                if new is None:
                    raise DatabaseError(
                        f"queue '{self.name}': the database added no row to '{self.table}' and "
                        "returned no id (a trigger or rule on that table skipped the insert); "
                        "nothing was enqueued: let inserts into the queue table through"
                    )
                return Enqueued(int(new))
            existing = present(self.steps.enqueue_existing, self.rendered, "enqueue_existing")
            found = await run_step(conn, existing, params)
            if found.rows:
                return Enqueued(int(found.rows[0]["id"]), duplicate=True)
        raise DatabaseError(
            f"queue '{self.name}': dedupe_key {params['dedupe_key']!r} kept colliding with "
            f"messages that finished before their id was read ({_DEDUPE_TRIES} tries)"
        )

    async def _unlock_key(self, conn: Any, params: dict[str, Any]) -> None:
        """MySQL and MariaDB: give back the key's named lock a failed enqueue may still hold
        (a rollback keeps it); as best it can, the enqueue's own error is the one to raise."""
        unlock = self.steps.enqueue_unlock
        if not unlock or conn.closed:
            return
        with contextlib.suppress(Exception):
            await run_step(conn, unlock, params)

    async def enqueue(
        self, db: Any, payload: P | Mapping[str, Any], **options: Unpack[Options]
    ) -> Enqueued:
        """Add one message on ``db``, inside its open transaction if there is one; returns the
        new message's id. ``await queue.enqueue(db, {"order": 7}, delay=30)``

        ``dedupe_key`` (a queue with a dedupe_key column): when a pending message (not
        processed, not dead) already holds the key, nothing is added and its id comes back,
        with ``.duplicate`` True (``Enqueued`` is an ``int``). Once that message finishes the
        key is free again.

        ``db`` is the runtime's connection or the service's own (psycopg 3, asyncpg or a
        pool's connection, aiosqlite, SQLAlchemy AsyncConnection or AsyncSession, also over
        postgresql+asyncpg): the statement runs on it as it is, and
        the service's commit or rollback decides. ``values`` gives the table's other columns
        (``other_columns``) their values; ``priority`` (a priority column) puts the message
        before lower ones in the claim (None: the column's default, 0); ``fifo_key`` (a fifo_key
        column) delivers it only after every earlier message of that key has finished
        (None: no ordering); ``concurrency_key`` (a concurrency_key column) counts it against
        its key's concurrency_limit (None: not limited). A payload an engine could not keep as it is raises
        PayloadError, nothing written; so does, on a queue loaded with ``payload=Model``, one
        that is neither a valid ``Model`` nor a dict that validates as one; a delay that is NaN, infinite, negative or past
        MAX_DELAY_S raises ValueError. The options are keyword-only and checked against the
        queue's file before the payload is encoded (``runtime.enqueue.EnqueueOptions``): a bad
        one raises one error naming it and its fix, nothing written.

        Idle consumers wake: on PostgreSQL the statement notifies the queue's channel, sent
        when the transaction commits (a rolled-back enqueue wakes nobody); elsewhere this
        process's consumers of the table are woken right after the statement ran (before a
        transaction the caller has open commits: then they claim once, find nothing, and
        poll on)."""
        conn = await adapted(db)
        check_dialect(self.rendered, conn)
        checked = EnqueueOptions.of(self.rendered.header, options)
        params = checked.params(encode_payload(payload, self.encoder, self.codec))
        id_ = await self._enqueue(conn, params)
        self._wake(conn)
        return id_

    async def enqueue_many(
        self,
        db: Any,
        payloads: Iterable[P | Mapping[str, Any]],
        *,
        dedupe_keys: Iterable[str | None] | None = None,
        **options: Unpack[BatchOptions],
    ) -> Any:
        """Add many messages in one batch; returns how many. ``await queue.enqueue_many(db, items)``
        (``priority`` and ``fifo_key`` apply to every item; items of one key keep their order)

        Every payload is checked first: one that cannot be stored raises PayloadError and
        nothing of the batch is written. Consumers wake as for ``enqueue`` (PostgreSQL folds
        a transaction's notifications into one). With ``dedupe_keys`` (one key or None per
        payload) it returns the list of ``Enqueued`` ids instead, in order: ``[i for i in ids
        if i.duplicate]`` are the ones a pending message already held. The batch runs in one
        transaction (the caller's if one is open): all of it is written or none."""
        conn = await adapted(db)
        check_dialect(self.rendered, conn)
        header = self.rendered.header
        checked = EnqueueOptions.of(header, options, "enqueue_many", BATCH_OPTION_NAMES)
        items = list(payloads)
        keys = None if dedupe_keys is None else check_dedupe_keys(header, dedupe_keys, len(items))
        params = []
        for i, p in enumerate(items):
            try:
                text = encode_payload(p, self.encoder, self.codec)
            except PayloadError as exc:
                raise PayloadError(f"item {i} of the batch: {exc}") from None
            params.append(
                checked.params(text) if keys is None else checked.keyed_params(text, keys[i])
            )
        if dedupe_keys is not None:
            return await self._enqueue_each(conn, params)
        # the step's INSERT (MySQL reads the id, a keyed one takes a lock, in statements of
        # their own around it); ids are not read back here
        insert = next(st for st in self.steps.enqueue if st.kind is not Kind.READS)
        if params:
            # one transaction for the batch (the caller's if one is open): on an autocommit
            # connection each row would otherwise commit alone and a failure leave a part
            async with atomic(conn):
                await conn.executemany(insert, params)
            self._wake(conn)
        return len(params)

    async def _enqueue_each(self, conn: Any, params: list[dict[str, Any]]) -> list[Enqueued]:
        async with atomic(conn):
            return [await self._enqueue(conn, p) for p in params]

    # ----------------------------------------------------------------- operating

    async def stats(
        self,
        db: Any,
        group: str | None = None,
        processed_cap: int | None = 10_000,
        count_cap: int | None = None,
    ) -> dict[str, Any]:
        """The queue's counts by the database's clock: ``await queue.stats(db)`` →
        ``{"ready": 3, "delayed": 1, "in_flight": 0, "dead": 2, "processed": 10,
        "processed_capped": False, "capped": [], "oldest_ready_s": 4.2}``.

        ready: claimable now (row lock, and advisory but on PostgreSQL: including rows a
        consumer holds, which SQL cannot see); delayed: retry_after in the future; in_flight:
        leases in the future (lease form), rows whose advisory key a session holds (advisory
        on PostgreSQL, from pg_locks), None otherwise; dead: in the dead letter (None without one);
        processed: kept rows marked processed (None without processed_at), counted up to
        ``processed_cap`` (None: all of them; the count reads the rows, so an uncapped one
        slows as kept rows pile up), and ``processed_capped`` is True when there are more;
        oldest_ready_s: seconds since the first ready message in id order was enqueued (None
        without an enqueued_at column); paused (with a pause table): whether a pause holds the
        queue or the group, its ready messages waiting. ``group`` defaults to the queue's
        default_group. ``count_cap`` (None: no bound) bounds the rest as ``processed_cap``
        does processed: the counts read at most that many dead rows, and at most that many
        unfinished rows, the oldest in id order (past that, ready, delayed and in_flight
        count those only); ``capped`` lists the keys whose count stopped at its cap (each at
        least what it says), processed among them when ``processed_capped``."""
        return await operate.stats(self, db, group, processed_cap, count_cap)

    async def dead_list(
        self, db: Any, limit: int = 100, after_id: int | None = None, newest_first: bool = False
    ) -> list[dict[str, Any]]:
        """A page of dead messages (id, payload, attempt, …), oldest first or newest first;
        pass the last id of a page as ``after_id`` for the next.
        ``page = await queue.dead_list(db, limit=50)``"""
        return await operate.dead_list(self, db, limit, after_id, newest_first)

    async def dead_show(self, db: Any, id: int) -> dict[str, Any] | None:
        """One dead message by id, or None. ``await queue.dead_show(db, 42)``"""
        return await operate.dead_show(self, db, id)

    async def redrive(
        self, db: Any, ids: Iterable[int] | None = None, group: str | None = None
    ) -> int:
        """Send dead messages (``ids``, or all of them) back to the queue as first deliveries
        (attempt 1, no delay, no lease), in one transaction; returns how many. A dead-letter
        group sends them to ``group`` (default: the queue's default_group); a dead-letter
        table moves them back, ids kept. ``await queue.redrive(db, [42, 43])``"""
        return await operate.redrive(self, db, ids, group)

    async def redrive_group(self, db: Any, group: str) -> int:
        """Send every dead message of ``group`` (the group it was claimed from) back as
        redrive does, in one transaction; returns how many. For a dead-letter table with a
        group column, which several queues or groups may share: the others' dead messages
        stay. ``await queue.redrive_group(db, "emails")``"""
        return await operate.redrive_group(self, db, group)

    async def purge_dead(self, db: Any, ids: Iterable[int] | None = None) -> int:
        """Delete dead messages (``ids``, or all of them) for good; returns how many.
        ``await queue.purge_dead(db, [42])``"""
        return await operate.purge_dead(self, db, ids)

    async def groups(self, db: Any) -> dict[str, int]:
        """The unfinished rows of each group of the queue's table (a table with a group
        column): ``await queue.groups(db)`` → ``{"orders": 12, "orders_dead": 1}``."""
        return await operate.groups(self, db)

    async def regroup(self, db: Any, from_group: str, group: str | None = None) -> int:
        """Move the unfinished rows of ``from_group`` into ``group`` (default: this queue's
        default_group), e.g. what a renamed queue left behind; returns how many moved.
        ``await queue.regroup(db, "orders")``"""
        return await operate.regroup(self, db, from_group, group)

    async def prune(
        self, db: Any, older_than_s: float, batch: int = 1000, group: str | None = None
    ) -> int:
        """Delete rows marked processed more than ``older_than_s`` seconds ago (the database's
        clock), ``batch`` rows per statement, each committed on its own, until a batch comes
        back short; unprocessed rows stay. Returns how many. ``await queue.prune(db, 86400)``"""
        return await operate.prune(self, db, older_than_s, batch, group)

    async def status(self, db: Any, id: int) -> Status | None:
        """Message ``id``'s state by the database's clock, or None when no row has it (never
        enqueued, deleted by an ack on a table without processed_at, pruned or purged):
        ``s = await queue.status(db, 42)`` → ``Status(id=42, state="done", attempts=1,
        result={"rows": 3}, …)``. See runtime.Status for the fields and what each form can
        tell (a row lock's hold reads pending; a cancelled row reads done)."""
        return await status(self, db, id)

    async def cancel(self, db: Any, id: int) -> bool:
        """Finish message ``id`` as ack would (delete it, or mark it processed) if it is
        pending (ready or delayed) and not in flight; True if it did. False: a consumer holds
        it now (a lease in the future, a claim's row lock, an advisory key), or it is already
        finished, dead, or unknown. It never goes to the dead letter. ``await queue.cancel(db, 42)``"""
        return await operate.cancel(self, db, id)

    async def pending_list(
        self, db: Any, limit: int = 100, after_id: int | None = None, group: str | None = None
    ) -> list[dict[str, Any]]:
        """A page of pending messages (not finished, not dead: ready, delayed or in flight),
        oldest first: id, payload, attempt, … and ``due_s``, the seconds until a delayed one
        is claimable (0 when it is, None without a retry_after column); pass the last id of a
        page as ``after_id`` for the next. ``rows = await queue.pending_list(db)``"""
        return await operate.pending_list(self, db, limit, after_id, group)

    async def advance(self, db: Any, seconds: float | timedelta, group: str | None = None) -> int:
        """Bring every delayed message (a delayed enqueue, a retry_after) ``seconds`` nearer, as
        if that much time had passed; returns how many it moved. Tests travel in time with it
        instead of sleeping (``runtime.testing``). ``await queue.advance(db, 60)``"""
        return await operate.advance(self, db, seconds, group)

    async def pause(self, db: Any, group: str | None = None) -> bool:
        """Pause the queue (its table: every queue declared on it), or only ``group``: no
        consumer, in any process on any host, claims its messages until ``resume``; a
        delivery already claimed runs and settles as usual, and enqueue goes on. The pause
        is a row of the pause table, so it outlives restarts. True if it paused, False if it
        was paused already. ``await queue.pause(db)``, ``await queue.pause(db, group="eu")``"""
        return await operate.pause(self, db, group)

    async def resume(self, db: Any, group: str | None = None) -> bool:
        """Lift the pause of the queue (``group`` None) or of one group: the next claim takes
        its messages again (an idle consumer, at its next poll). Each scope is resumed on its
        own: resuming the queue leaves a group paused on its own paused. True if a pause was
        lifted. ``await queue.resume(db)``"""
        return await operate.resume(self, db, group)

    async def paused(self, db: Any) -> list[str | None]:
        """The paused scopes of the queue's table: ``None`` for the whole queue, then each
        paused group. ``await queue.paused(db)`` → ``[None, "eu"]`` (``[]``: none)."""
        return await operate.paused(self, db)

    @property
    def sync(self) -> SyncQueue[P]:
        """The same enqueue for blocking code and a blocking connection (psycopg, sqlite3,
        PyMySQL, SQLAlchemy Connection or Session, Django's ``django.db.connection``):
        ``queue.sync.enqueue(conn, {"n": 1})``."""
        return SyncQueue(self)


class SyncQueue(Generic[P]):
    """``queue.sync``: enqueue and enqueue_many on a blocking connection, in its transaction.

    The very code of the async methods runs, over an adapter that never suspends."""

    def __init__(self, queue: Queue[P]) -> None:
        self.queue = queue

    def enqueue(
        self, conn: Any, payload: P | Mapping[str, Any], **options: Unpack[Options]
    ) -> Enqueued:
        """``queue.sync.enqueue(conn, payload, …)`` → the new message's id (see enqueue)."""
        return run_sync(self.queue.enqueue(adapt(conn, sync=True), payload, **options))

    def enqueue_many(
        self,
        conn: Any,
        payloads: Iterable[P | Mapping[str, Any]],
        *,
        dedupe_keys: Iterable[str | None] | None = None,
        **options: Unpack[BatchOptions],
    ) -> Any:
        """``queue.sync.enqueue_many(conn, payloads, …)`` → how many (the ids with dedupe_keys)."""
        return run_sync(
            self.queue.enqueue_many(
                adapt(conn, sync=True), payloads, dedupe_keys=dedupe_keys, **options
            )
        )

    def cancel(self, conn: Any, id: int) -> bool:
        """``queue.sync.cancel(conn, 42)`` → True if it finished the message (see cancel)."""
        return run_sync(self.queue.cancel(adapt(conn, sync=True), id))

    def status(self, conn: Any, id: int) -> Status | None:
        """``queue.sync.status(conn, 42)`` → the message's Status, or None (see status)."""
        return run_sync(self.queue.status(adapt(conn, sync=True), id))

    def pause(self, conn: Any, group: str | None = None) -> bool:
        """``queue.sync.pause(conn)`` or ``(conn, group="eu")`` → True if it paused (see pause)."""
        return run_sync(self.queue.pause(adapt(conn, sync=True), group))

    def resume(self, conn: Any, group: str | None = None) -> bool:
        """``queue.sync.resume(conn)`` → True if it lifted a pause (see resume)."""
        return run_sync(self.queue.resume(adapt(conn, sync=True), group))

    def paused(self, conn: Any) -> list[str | None]:
        """``queue.sync.paused(conn)`` → the paused scopes, None the whole queue (see paused)."""
        return run_sync(self.queue.paused(adapt(conn, sync=True)))

    def apply(self, db: Any) -> list[Any]:
        """``queue.sync.apply(db)`` → the tables and indexes it created (see runtime.apply):
        ``db`` a database URL or a blocking connection."""
        from runtime.apply import apply_sync

        return apply_sync(db, self.queue)
