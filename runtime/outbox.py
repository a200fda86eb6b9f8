"""The transactional outbox: put records in the business transaction, relay them, prune.

A service writes a record with ``put`` on its own connection, inside its own transaction, so
the record commits and rolls back with the business write. A relay hands the unmarked
records to a handler in id order, a batch per transaction: the fetch holds the batch until
COMMIT (``FOR UPDATE SKIP LOCKED``; SQLite: ``BEGIN IMMEDIATE``), so two relays never hand
the same record. ack and drop mark a record in that transaction; retry leaves it unmarked
for the next relay run. A relay that dies mid-batch rolls back: the records it handed but
had not committed are handed again on restart (at-least-once delivery).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic

from runtime.adapters import adapt, adapted, run_sync
from runtime.connect import Opener, opener
from runtime.contract.dialects import Dialect
from runtime.contract.errors import ConfigurationError, InvalidArgument, PayloadError
from runtime.contract.file_steps import outbox_steps, present
from runtime.contract.rendered import RenderedFile
from runtime.delivery import Ctx, Message
from runtime.drivers.base import Connection
from runtime.handler import Invocation
from runtime.models import codec
from runtime.outcomes import Outcome, OutcomeKind, delay_seconds
from runtime.payloads import Decoder, Encoder, P, decode_payload, encode_payload
from runtime.queue import check_dialect
from runtime.steps import run_step

log = logging.getLogger("runtime")

#: outcomes that leave a record unmarked for the next relay run
_LEAVES = (OutcomeKind.RETRY, OutcomeKind.RETRY_AFTER)
#: outcomes that mark a record
_MARKS = (OutcomeKind.ACK, OutcomeKind.DROP)


@dataclass(frozen=True)
class OutboxMessage(Message[P]):
    """A record as the relay's handler sees it: ``message.id``, ``message.payload`` and, where the
    table has them, ``message.topic``, ``message.key`` and ``message.created_at`` (UTC)."""

    topic: str | None = None
    key: str | None = None
    created_at: datetime | None = None


class RelayReport(dict[str, int]):
    """What a relay run did: counts per outcome (``report["ack"]``), ``report["left"]`` (records
    left unmarked by retry) and their ids in ``report.left_ids``."""

    left_ids: tuple[int, ...] = ()


#: ``async def handle(message, ctx)``, or a plain ``def`` run in a worker thread; it returns
#: an Outcome, or None for ack()
Handler = Callable[[OutboxMessage[P], Ctx], Awaitable[Outcome | None] | Outcome | None]


@dataclass(eq=False)
class _Relaying:
    """One relay call's state: how it calls the handler, what it must not hand again, what
    it did, and a KeyboardInterrupt or SystemExit a handler raised (the relay stops)."""

    name: str
    handle: Handler[Any]
    handler_timeout: float | None
    batch: int
    stop: asyncio.Event | None
    #: remember marked records too (a run that ends), not only those left unmarked
    remember_marked: bool
    report: RelayReport = dataclasses.field(default_factory=lambda: RelayReport(left=0))
    #: records this run must not hand again: those it left unmarked (retry, custom) and, in
    #: a run that ends, the marked ones too (a mark override that does not mark cannot loop
    #: it); a relay that polls forever relies on the fetch to skip marked records
    seen: set[int] = dataclasses.field(default_factory=set)
    left: list[int] = dataclasses.field(default_factory=list)
    fatal: BaseException | None = None
    #: calls the handler (runtime.handler: sync handlers, the timeout, …)
    invoke: Invocation = dataclasses.field(init=False)

    def __post_init__(self) -> None:
        self.invoke = Invocation(
            self.handle,
            self.handler_timeout,
            unit="outbox",
            name=self.name,
            noun="record",
            owner="relay",
            on_fatal=self.handler_stopped,
        )

    def stopped(self) -> bool:
        return self.fatal is not None or (self.stop is not None and self.stop.is_set())

    def handler_stopped(self, exc: BaseException) -> None:
        if self.fatal is None:
            self.fatal = exc


def _utc(value: Any) -> datetime | None:
    """A database timestamp as an aware UTC datetime (SQLite keeps ISO text, MySQL naive UTC)."""
    if value is None:
        return None
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode()
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    return None


class Outbox(Generic[P]):
    """A loaded outbox file: ``outbox = runtime.load("sql/sqlite/outbox.sql")``.

    ``runtime.load(path, payload=Event)`` checks each record's payload as a queue's
    (runtime.models) and hands the relay's handler an ``Event``; typed as ``Outbox[Event]``
    when built as ``Outbox(runtime.read_rendered(path), model=Event)``."""

    def __init__(
        self,
        rendered: RenderedFile,
        encoder: Encoder | None = None,
        decoder: Decoder | None = None,
        model: type[P] | None = None,
    ) -> None:
        self.rendered = rendered
        #: the file's steps, checked when it was loaded (a missing one: RenderedFileError)
        self.steps = outbox_steps(rendered)
        #: payload hooks, as a Queue's (runtime.payloads)
        self.encoder = encoder
        self.decoder = decoder
        #: the payload model and its codec, as a Queue's (runtime.models)
        self.model = model
        self.codec = codec(model, encoder, decoder)

    def __repr__(self) -> str:
        return f"<Outbox {self.name} table={self.table} dialect={self.dialect.name}>"

    @property
    def name(self) -> str:
        return self.rendered.header.name

    @property
    def dialect(self) -> Dialect:
        return self.rendered.dialect

    @property
    def table(self) -> str:
        return self.rendered.header.table

    @property
    def columns(self) -> dict[str, str]:
        return self.rendered.columns

    # ------------------------------------------------------------------ writing

    def _put_params(self, payload: Any, topic: str | None, key: str | None) -> dict[str, Any]:
        for field, value in (("topic", topic), ("key", key)):
            if value is not None and field not in self.columns:
                raise ConfigurationError(
                    f"outbox '{self.name}' has no {field} column: put without {field}=, or "
                    f"declare columns.{field} under [outbox] and render again"
                )
        return {
            "payload": encode_payload(payload, self.encoder, self.codec),
            "topic": topic,
            "record_key": key,
        }

    async def put(
        self,
        db: Any,
        payload: P | Mapping[str, Any],
        topic: str | None = None,
        key: str | None = None,
    ) -> int:
        """Add one record on the caller's connection (the runtime's or the service's own:
        psycopg 3, asyncpg, aiosqlite, SQLAlchemy AsyncConnection/AsyncSession), inside its open
        transaction: the record commits or rolls back with the business write. Returns its id.
        ``await outbox.put(db, {"order": 7}, topic="orders")``"""
        conn = await adapted(db)
        check_dialect(self.rendered, conn)
        result = await run_step(
            conn,  # type: ignore[arg-type]  # Adapted: always in a transaction, never begins
            self.steps.put,
            self._put_params(payload, topic, key),
        )
        return int(result.rows[0]["id"])

    async def put_many(
        self,
        db: Any,
        payloads: Iterable[P | Mapping[str, Any]],
        topic: str | None = None,
        key: str | None = None,
    ) -> int:
        """Add many records in one batch on the caller's connection; returns how many.
        ``await outbox.put_many(db, events, topic="orders")``"""
        conn = await adapted(db)
        check_dialect(self.rendered, conn)
        insert = self.steps.put[0]  # the INSERT; ids are not read back here
        params = [self._put_params(p, topic, key) for p in payloads]
        if params:
            await conn.executemany(insert, params)
        return len(params)

    @property
    def sync(self) -> SyncOutbox[P]:
        """put and put_many for blocking code on a blocking connection (psycopg, sqlite3,
        PyMySQL, SQLAlchemy Connection or Session, Django's connection):
        ``outbox.sync.put(conn, event)``."""
        return SyncOutbox(self)

    async def prune(self, db: Connection, age_s: float) -> int:
        """Delete the records marked more than ``age_s`` seconds ago (the database's clock);
        unmarked records stay. Returns how many it deleted. ``await outbox.prune(db, 86400)``"""
        check_dialect(self.rendered, db)
        result = await run_step(
            db,
            present(self.steps.prune, self.rendered, "prune"),
            {"age_s": delay_seconds(age_s, "age_s", maximum=None)},
        )
        return result.rowcount or 0

    # ----------------------------------------------------------------- relaying

    async def relay(
        self,
        db: str | Opener,
        handle: Handler[P],
        batch: int = 100,
        until_empty: bool = True,
        poll_interval: float = 0.5,
        stop: asyncio.Event | None = None,
        *,
        handler_timeout: float | None = None,
    ) -> RelayReport:
        """Hand the unmarked records to ``handle(message, ctx)`` in id order and settle each by
        its outcome; return the counts.

        ack and drop mark the record (a handler that returns None acks); retry and
        retry_after leave it unmarked and it is not handed again in this run
        (``report["left"]``, ``report.left_ids``); custom(name) runs the declared SQL; a
        handler that raises, or returns something that is not an outcome, is a retry. Each
        batch is one transaction: a relay that dies mid-batch marks nothing of it, and a
        restart hands it again.
        With ``until_empty`` it returns once a pass over the table hands nothing new;
        otherwise it polls every ``poll_interval`` seconds until ``stop`` is set (or the task
        is cancelled). ``report = await outbox.relay(url, handle)``

        The handler is called as the consumer calls its own (``runtime.handler``): a plain
        ``def`` runs in a worker thread; one that runs past ``handler_timeout`` seconds is a
        retry; KeyboardInterrupt or SystemExit from it is a retry too, and stops the relay:
        the batch's marks so far commit, and it is raised again.
        """
        if batch < 1:
            raise InvalidArgument("batch must be at least 1")
        r = _Relaying(self.name, handle, handler_timeout, batch, stop, until_empty)
        conn = await opener(db)()
        try:
            check_dialect(self.rendered, conn)
            while not r.stopped():
                if await self._pass(conn, r):
                    # another pass from the start: a business transaction that committed late
                    # may have written a record below the ids this pass went past
                    continue
                if until_empty:
                    break
                await self._poll_wait(stop, poll_interval)
        finally:
            # an open batch rolls back here: its records stay unmarked for the next relay
            await conn.close()
        return self._reported(r)

    @staticmethod
    async def _poll_wait(stop: asyncio.Event | None, poll_interval: float) -> None:
        if stop is None:
            await asyncio.sleep(poll_interval)
        else:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), poll_interval)

    def _reported(self, r: _Relaying) -> RelayReport:
        """The run's report, the records it left logged; a KeyboardInterrupt or SystemExit a
        handler raised is raised again here."""
        report, left = r.report, r.left
        report["left"] = len(left)
        report.left_ids = tuple(left)
        if left:
            log.warning(
                "outbox %s: the relay left %d records unmarked for its next run: ids %s",
                self.name,
                len(left),
                ", ".join(map(str, left)),
            )
        if r.fatal is not None:
            raise r.fatal
        return report

    async def _pass(self, conn: Connection, r: _Relaying) -> int:
        """One pass over the table in id order, a batch per transaction; returns how many
        records it handed."""
        after_id, handed = 0, 0
        while not r.stopped():
            await conn.begin(immediate=True)  # SQLite: the write lock serialises relays
            result = await run_step(
                conn, self.steps.fetch, {"limit": r.batch, "after_id": after_id}
            )
            if not result.rows:
                await conn.rollback()
                break
            for row in result.rows:
                after_id = max(after_id, int(row["id"]))
                if row["id"] in r.seen:
                    continue
                handed += 1
                await self._record(conn, r, row)
                if r.fatal is not None:  # a handler stopped the relay: commit what it did
                    break
            await conn.commit()
        return handed

    async def _record(self, conn: Connection, r: _Relaying, row: dict[str, Any]) -> None:
        """Hand one fetched record and count its outcome."""
        message = self._message(row)
        if message is None:
            label = "retry"
        else:
            label = await self._hand(conn, r.invoke, message, row["payload"])
        r.report[label] = r.report.get(label, 0) + 1
        if label in _LEAVES:
            r.left.append(row["id"])
        if r.remember_marked or label not in _MARKS:
            r.seen.add(row["id"])

    def _message(self, row: dict[str, Any]) -> OutboxMessage[P] | None:
        """The record as the handler sees it; None (logged, left unmarked) when its payload
        cannot be decoded: it never fails the batch."""
        try:
            payload = decode_payload(row["payload"], self.decoder, self.codec)
        except PayloadError as exc:
            log.error(
                "outbox %s: record %s cannot be decoded (%s): left unmarked",
                self.name,
                row["id"],
                exc,
            )
            return None
        return OutboxMessage(
            id=row["id"],
            payload=payload,
            topic=row.get("topic"),
            key=row.get("key"),
            created_at=_utc(row.get("created_at")),
        )

    async def _hand(
        self, conn: Connection, invoke: Invocation, message: OutboxMessage, stored: Any
    ) -> str:
        """Hand one record to the handler and run its outcome's statement; returns the label."""
        outcome = await invoke(message, Ctx(attempt=None, db=None, queue=self.name))
        params = {
            "id": message.id,
            "payload": stored,
            "topic": message.topic,
            "record_key": message.key,
        }
        if outcome.kind in _MARKS:
            await run_step(conn, self.steps.mark, params)
        elif outcome.kind is OutcomeKind.CUSTOM:
            statements = self.steps.custom.get(outcome.name or "")
            if not statements:
                declared = list(self.steps.custom)
                log.error(
                    "outbox %s declares no custom event %r (declared: %s); add "
                    "[outbox.custom.%s] to qgen.toml and render again: record %s taken "
                    "as retry()",
                    self.name,
                    outcome.name,
                    ", ".join(declared) or "none",
                    outcome.name,
                    message.id,
                )
                return "retry"
            await run_step(conn, statements, params)
        return outcome.label


class SyncOutbox(Generic[P]):
    """``outbox.sync``: put and put_many on a blocking connection, in its transaction."""

    def __init__(self, outbox: Outbox[P]) -> None:
        self.outbox = outbox

    def put(
        self,
        conn: Any,
        payload: P | Mapping[str, Any],
        topic: str | None = None,
        key: str | None = None,
    ) -> int:
        """``outbox.sync.put(conn, payload, topic=…)`` → the record's id."""
        return run_sync(self.outbox.put(adapt(conn, sync=True), payload, topic, key))

    def put_many(
        self,
        conn: Any,
        payloads: Iterable[P | Mapping[str, Any]],
        topic: str | None = None,
        key: str | None = None,
    ) -> int:
        """``outbox.sync.put_many(conn, payloads, topic=…)`` → how many."""
        return run_sync(self.outbox.put_many(adapt(conn, sync=True), payloads, topic, key))

    def apply(self, db: Any) -> list[Any]:
        """``outbox.sync.apply(db)`` → the table and index it created (see runtime.apply):
        ``db`` a database URL or a blocking connection."""
        from runtime.apply import apply_sync

        return apply_sync(db, self.outbox)
