"""Random operation sequences on a real queue table, compared with the outcome model at every step.

Each example draws a table shape (optional columns, dead letter as a group or a table or
none, max_attempts 1..3, renamed columns, transactional or not), renders its declaration with
qgen from the templates as they are on disk now, creates the table on the engine (once per
shape and test: later examples find it emptied, tests/support/model/session.py), and then runs
enqueues, claims, settlements, give-backs, lease extensions and expiries, commits and
rollbacks, dedupe-keyed enqueues and cancels through the runtime's own form objects (the code the Consumer loops over). After every step the whole table, its dead-letter table and the handler's
committed writes are read back with plain SQL and compared with tests/support/model/outcome_model.py.
A failure prints the shrunk sequence of steps (``state.settle(delivery=deliveries_0, ...)``).

Times are compared as states: NULL, due/expired (at or before the database's now) or future.
The test makes a delay or a lease run out by moving the column into the past with its own
SQL; nothing sleeps.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support.engines import Engine
from support.model.outcome_model import (
    DEFAULT_GROUP,
    Delivery,
    OutcomeModel,
    Row,
    Settlement,
    Shape,
)
from support.model.profiles import model_settings, profile_name
from support.model.session import Session
from support.model.tables import AN_HOUR_AGO, BACK_BY, NOW, REFILL_S

from runtime.contract.errors import LeaseLost
from runtime.delivery import Delivery as RuntimeDelivery
from runtime.drivers.base import Connection
from runtime.forms import Form, form_for
from runtime.forms.row_lock import RowLockForm
from runtime.outcomes import Outcome, ack, drop, outcome_of, retry, retry_after
from runtime.queue import Queue, decode_payload
from runtime.settle import Decision, decide

pytestmark = pytest.mark.model

T = TypeVar("T")

#: the delay of retry_after "future" (and of a delayed enqueue); "due" is 0 seconds
FUTURE_S = 3600
OTHER_GROUP = "other"

#: outcomes as the steps print them → (the model's outcome, its delay state, what the
#: handler returns: None is a handler without a return, which acks); each failure says
#: why (a quote, a percent sign, non-ASCII), which last_error keeps
OUTCOMES: dict[str, tuple[str, str, Outcome | None]] = {
    "ack": ("ack", "due", ack()),
    "ack result": ("ack", "due", ack(result={"said": "it's 100% ✓", "n": [1, 2.5]})),
    "None": ("none", "due", None),
    "drop": ("drop", "due", drop()),
    "retry": ("retry", "due", retry(reason="it's 100% down")),
    "retry_after 0s": ("retry_after", "due", retry_after(0, reason="soon ✓")),
    "retry_after 1h": ("retry_after", "future", retry_after(FUTURE_S, reason="later")),
}
#: the outcomes one Consumer round returns for the deliveries of its claim, in order
ROUND = st.lists(st.sampled_from(list(OUTCOMES)), min_size=3, max_size=3)
#: messages enqueued when the table is created, so that the first claims find work
PREFILL = st.integers(0, 4)
#: what an enqueue draws for the ordering roles (used where the table has the column)
PRIORITIES = st.sampled_from([None, 0, 1, 5, -2])
FIFO_KEYS = st.sampled_from([None, "a", "b", "a"])
#: payload texts: quotes, a percent sign (pyformat drivers) and non-ASCII must survive every step
TEXTS = ["", "a", "it's 100%", 'say "hi"', "zürich ✓"]
#: dedupe keys: few, so that enqueues meet pending ones; a quote and non-ASCII among them
KEYS = ["a", "it's", "ü"]
#: concurrency keys (used where the queue has a concurrency_limit): few, so that they meet
CONCURRENCY_KEYS = st.sampled_from([None, "c", "d", "c"])


@st.composite
def table_shapes(draw: st.DrawFn, form: str, limited: bool = False) -> Shape:
    """A table for ``form``; shrinks towards the smallest one (no optional column, no limit).
    ``limited``: at least one of concurrency_limit, max_in_flight (not advisory), rate_limit."""
    dead_letter = draw(st.sampled_from([None, "group", "table"]))
    attempt = dead_letter is not None or draw(st.booleans())
    # row lock with max_attempts counts each delivery at the claim, committed, and marks the
    # row not ready in retry_after until ``take`` locks it: render asks for the column, and
    # refuses max_in_flight beside it
    counts_at_claim = form == "row_lock" and dead_letter is not None
    retry_after = counts_at_claim or draw(st.booleans())
    processed_at = draw(st.booleans())
    limits = draw(limit_settings(form, limited, counts_at_claim))
    return Shape(
        form=form,
        attempt=attempt,
        retry_after=retry_after,
        processed_at=processed_at,
        group=dead_letter == "group" or draw(st.booleans()),
        dead_letter=dead_letter,
        max_attempts=draw(st.integers(1, 3)) if dead_letter else None,
        priority=draw(st.booleans()),
        fifo_key=draw(st.booleans()),
        dedupe_key=draw(st.booleans()),
        last_error=draw(st.booleans()),
        result=processed_at and draw(st.booleans()),
        **limits,
    )


@st.composite
def limit_settings(
    draw: st.DrawFn, form: str, limited: bool, counts_at_claim: bool = False
) -> dict[str, int | None]:
    """concurrency_limit, max_in_flight and rate_limit's burst, each small or none
    (max_in_flight neither on the advisory form nor beside row lock's count at the claim)."""
    small = st.none() | st.integers(1, 3)
    in_flight = form != "advisory" and not counts_at_claim
    limits = {
        "concurrency_limit": draw(small),
        "max_in_flight": draw(small) if in_flight else None,
        "rate_burst": draw(small),
    }
    if limited and not any(limits.values()):
        which = draw(st.sampled_from([k for k in limits if in_flight or k[0] != "m"]))
        limits[which] = draw(st.integers(1, 3))
    return limits


@dataclass(eq=False)
class Held:
    """A delivery in the steps: the model's and the runtime's view of it."""

    model: Delivery
    runtime: RuntimeDelivery

    def __repr__(self) -> str:
        return f"{self.model.name}(row {self.model.id}, worker {self.model.worker})"


class _Warnings(logging.Filter):
    """Takes the runtime's warnings (the cap, retry_after without its column) for the step to
    check, instead of the log: they are expected here."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.records.append(record)
        return False


class QueueMachine(RuleBasedStateMachine):
    """What every form shares: the table, enqueues, the test's own SQL and the comparison.

    Subclasses add the form's claims and settlements, and an ``initialize`` step that draws
    the table shape.
    """

    deliveries = Bundle("deliveries")
    rows = Bundle("rows")

    def __init__(self, session: Session) -> None:
        super().__init__()
        self.session = session
        self.dialect = session.dialect
        self.shape: Shape | None = None
        self.model: OutcomeModel
        self.queue: Queue
        self.form: Form
        self.transactional = False
        self.by_number: dict[int, Held] = {}
        self.warnings = _Warnings()
        logging.getLogger("runtime").addFilter(self.warnings)

    # ------------------------------------------------------------ plumbing

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.session.run(coro)

    @property
    def sqlite(self) -> bool:
        return self.dialect == "sqlite"

    @property
    def db(self) -> Connection:
        """The test's own connection: enqueues, its own SQL, reading the tables back."""
        return self.run(self.session.conn("db"))

    def q(self, name: str) -> str:
        return self.queue.dialect.quote_ident(name)

    def col(self, role: str) -> str:
        return self.q(self.queue.columns[role])

    def p(self, name: str) -> str:
        return self.queue.dialect.placeholder(name)

    async def worker_conn(self, worker: int) -> Connection:
        return await self.session.conn(f"w{worker}")

    def setup_queue(self, shape: Shape, renamed: bool, transactional: bool, prefill: int) -> None:
        self.shape = shape
        self.model = OutcomeModel(shape)
        self.transactional = transactional
        tables = self.run(self.session.queue_tables(shape, renamed))
        self.queue = tables.queue
        self.dead_table = tables.dead_table
        self.sides = self.session.sides
        self.form = form_for(
            self.queue, transactional=transactional, keyspace=self.session.engine.url
        )
        if isinstance(self.form, RowLockForm):
            # the mark of a row a row-lock claim counted (max_attempts): "future" until the
            # test makes it due, as a slow step must not run it out (the model has no clock)
            self.form.count_hold_s = FUTURE_S
        for n in range(prefill):
            text = TEXTS[n % len(TEXTS)]
            self._enqueue(text, None, None, n % 3 or None, "ab"[n % 2], None, "cd"[n % 2])

    def teardown(self) -> None:
        logging.getLogger("runtime").removeFilter(self.warnings)
        self.run(self.session.release())  # an open row-lock batch rolls back, keys are freed

    def outside_writes_allowed(self) -> bool:
        """SQLite's row-lock batch holds the database's write lock: the test's own writes would
        wait for it, so they happen only between batches there."""
        return self.shape is not None and not (self.sqlite and self.model.batches_open)

    # ------------------------------------------------------------ enqueue

    def _enqueue(
        self,
        text: str,
        group: str | None,
        delay: str | None,
        priority: int | None = None,
        fifo_key: str | None = None,
        key: str | None = None,
        ckey: str | None = None,
    ) -> int:
        """Enqueue on the runtime and the model; the optional roles where the table has them."""
        assert self.shape is not None
        priority = priority if self.shape.priority else None
        fifo_key = fifo_key if self.shape.fifo_key else None
        ckey = ckey if self.shape.concurrency_limit else None
        payload = {"n": self.model.next_id, "text": text}
        delay_s = {None: None, "due": 0, "future": FUTURE_S}[delay]
        returned = self.run(
            self.queue.enqueue(
                self.db,
                payload,
                delay=delay_s,
                group=group,
                priority=priority,
                fifo_key=fifo_key,
                dedupe_key=key,
                concurrency_key=ckey,
            )
        )
        row_id = self.model.enqueue(
            payload,
            group=group,
            delay=delay,
            priority=priority,
            fifo_key=fifo_key,
            key=key,
            concurrency_key=ckey,
        )
        assert returned == row_id, f"enqueue returned id {returned}, the model says {row_id}"
        assert returned.duplicate == self.model.duplicate, (
            f"enqueue of key {key!r}: duplicate={returned.duplicate}, the model says "
            f"{self.model.duplicate}"
        )
        return row_id

    @precondition(outside_writes_allowed)
    @rule(
        target=rows,
        text=st.sampled_from(TEXTS),
        priority=PRIORITIES,
        key=FIFO_KEYS,
        ckey=CONCURRENCY_KEYS,
    )
    def enqueue(self, text: str, priority: int | None, key: str | None, ckey: str | None) -> int:
        return self._enqueue(text, None, None, priority, key, None, ckey)

    @precondition(lambda self: self.outside_writes_allowed() and self.shape.retry_after)
    @rule(
        target=rows,
        text=st.sampled_from(TEXTS),
        delay=st.sampled_from(["due", "future"]),
        key=FIFO_KEYS,
    )
    def enqueue_delayed(self, text: str, delay: str, key: str | None) -> int:
        return self._enqueue(text, None, delay, None, key)

    @precondition(lambda self: self.outside_writes_allowed() and self.shape.group)
    @rule(
        target=rows,
        text=st.sampled_from(TEXTS),
        priority=PRIORITIES,
        key=FIFO_KEYS,
        ckey=CONCURRENCY_KEYS,
    )
    def enqueue_other_group(
        self, text: str, priority: int | None, key: str | None, ckey: str | None
    ) -> int:
        return self._enqueue(text, OTHER_GROUP, None, priority, key, None, ckey)

    def can_enqueue_keyed(self) -> bool:
        """A key enqueue checks the unique index, which waits for an open row-lock batch that
        changed the row holding the key: only between batches."""
        return (
            self.outside_writes_allowed() and self.shape.dedupe_key and not self.model.batches_open
        )

    @precondition(can_enqueue_keyed)
    @rule(
        target=rows,
        text=st.sampled_from(TEXTS),
        key=st.sampled_from(KEYS),
        other_group=st.booleans(),
        delay=st.sampled_from([None, "future"]),
    )
    def enqueue_keyed(self, text: str, key: str, other_group: bool, delay: str | None) -> int:
        """A key a pending row holds returns that row's id; a finished or dead one's is free."""
        group = OTHER_GROUP if other_group and self.shape.group else None
        return self._enqueue(text, group, delay if self.shape.retry_after else None, key=key)

    def can_update_rows(self) -> bool:
        """Whether the test's own UPDATE of a row no batch claimed would go through now.

        Not while a row-lock batch is open on SQLite (its write lock) nor on MySQL/MariaDB:
        there the claim's FOR UPDATE SKIP LOCKED, reading through the group or processed_at
        index, also keeps locks on rows it read but did not claim (a future retry_after), so
        an UPDATE of such a row waits for the batch's COMMIT. PostgreSQL locks only the rows
        the claim returns.
        """
        if not self.outside_writes_allowed():
            return False
        return not (self.model.batches_open and self.dialect in ("mysql", "mariadb"))

    @precondition(lambda self: self.can_update_rows() and self.shape.retry_after)
    @rule(row=rows)
    def make_due(self, row: int) -> None:
        """Time passes beyond the row's retry_after (only a future one, on a row no batch locks)."""
        r = self.model.rows.get(row)
        if r is None or r.retry_after != "future" or self.model.locked_by_batch(row):
            return
        self.run(self._set_past("retry_after", row))
        self.model.make_due(row)

    @precondition(lambda self: self.can_update_rows())
    @rule(row=rows)
    def cancel(self, row: int) -> None:
        """queue.cancel: a pending row no delivery holds finishes as ack would; else False."""
        got = self.run(self.queue.cancel(self.db, row))
        want = self.model.cancel(row)
        assert got is want, f"cancel(row {row}) returned {got}, the model says {want}"

    def can_pause(self) -> bool:
        return self.outside_writes_allowed() and self.queue.rendered.header.pause_table is not None

    @precondition(lambda self: self.can_pause())
    @rule(scope=st.sampled_from(["queue", "group", "other"]), on=st.booleans())
    def pause_or_resume(self, scope: str, on: bool) -> None:
        """Pause (or resume) the whole queue, its group or the other group: a paused queue or
        group claims nothing, what is held still settles, resume restores. The pause table
        says the same scopes as the model."""
        group = None if scope == "queue" or not self.shape.group else DEFAULT_GROUP
        if scope == "other" and self.shape.group:
            group = OTHER_GROUP
        changed = self.run((self.queue.pause if on else self.queue.resume)(self.db, group))
        was = (group or "") in self.model.paused
        (self.model.pause if on else self.model.resume)(group)
        assert changed is (on is not was), f"{'pause' if on else 'resume'}({group}): {changed}"
        got = {g or "" for g in self.run(self.queue.paused(self.db))}
        assert got == self.model.paused, f"paused scopes: table {got}, model {self.model.paused}"

    async def _set_past(self, role: str, row: int) -> None:
        sql = (
            f"UPDATE {self.q(self.queue.table)} SET {self.col(role)} = {AN_HOUR_AGO[self.dialect]} "
            f"WHERE {self.col('id')} = {self.p('id')}"
        )
        db = await self.session.conn("db")
        assert await db.execute(sql, {"id": row}) == 1

    @precondition(lambda self: self.outside_writes_allowed() and self.shape.rate_burst)
    @rule(tokens=st.integers(1, 3), other_group=st.booleans())
    def refill(self, tokens: int, other_group: bool) -> None:
        """Time passes for the rate limit's bucket: its refilled_at moves back by the seconds
        that refill ``tokens`` (the database's clock does the rest, in rate_take's SQL)."""
        group = OTHER_GROUP if other_group and self.shape.group else DEFAULT_GROUP
        back = BACK_BY[self.dialect].format(c=self.q("refilled_at"), s=self.p("s"))
        sql = (
            f"UPDATE {self.q(self.queue.table + '_limits')} SET {self.q('refilled_at')} = {back} "
            f"WHERE {self.q('bucket')} = {self.p('bucket')} AND {self.q('slot')} = 0"
        )
        self.run(self.db.execute(sql, {"s": tokens * REFILL_S, "bucket": group}))
        self.model.refill(group, tokens)

    def claim_rows(self, worker: int, limit: int, group: str | None) -> Any:
        """A claim as the Consumer makes it: held to the queue's limits."""
        conn = self.run(self.worker_conn(worker))
        return self.run(self.form.claim_within_rate(conn, limit, group))

    @invariant()
    def the_model_keeps_the_limits(self) -> None:
        """The model never has more in flight than the declaration allows (a check of the
        model itself; the comparison checks the table against it)."""
        if self.shape is None:
            return
        m, s = self.model, self.shape
        held = m.held()
        if s.concurrency_limit:
            per_key: dict[Any, int] = {}
            for r in held:
                if r.concurrency_key is not None:
                    k = (r.group, r.concurrency_key)
                    per_key[k] = per_key.get(k, 0) + 1
            assert max(per_key.values(), default=0) <= s.concurrency_limit, per_key
        if s.max_in_flight:
            groups = {r.group for r in held}
            for g in groups:
                assert sum(r.group == g for r in held) <= s.max_in_flight, held

    # ------------------------------------------------------------ claims and settlements

    def check_claimed(self, got: list[RuntimeDelivery], expected: list[Delivery]) -> list[Held]:
        """The runtime claimed the rows the model says, with the same attempt, payload, group."""

        runtime = sorted(
            (d.message.id, d.message.payload, d.message.group, d.attempt)  # decoded at the claim
            for d in got
        )
        model = sorted((d.id, d.payload, d.group, d.attempt) for d in expected)
        assert runtime == model, (
            f"claimed (id, payload, group, attempt) {runtime}, the model says {model}"
        )
        by_id = {d.message.id: d for d in got}
        held = [Held(m, by_id[m.id]) for m in expected]
        for h in held:
            self.by_number[h.model.number] = h
        return held

    async def handler_writes(self, conn: Connection, h: Held) -> None:
        """Transactional mode: the handler's own write, through ctx.db (the worker's connection)."""
        await self.form.begin_handler(conn, h.runtime)
        if self.transactional:
            await conn.execute(
                f"INSERT INTO {self.q(self.sides[h.model.worker])} (delivery, msg_id) "
                f"VALUES ({self.p('delivery')}, {self.p('msg_id')})",
                {"delivery": h.model.number, "msg_id": h.model.id},
            )

    def _decide(self, h: Held, outcome: str) -> tuple[Decision, Settlement]:
        """Run the handler (its write, in transactional mode) and decide, as the Consumer
        does; the model settles alongside, and the labels and warnings must agree."""
        kind, delay, runtime_outcome = OUTCOMES[outcome]
        conn = self.run(self.worker_conn(h.model.worker))
        self.run(self.handler_writes(conn, h))
        self.warnings.records.clear()
        # what the Consumer does with a handler's return value, then its settlement
        settled_as = outcome_of(runtime_outcome)
        decision = decide(self.queue, h.runtime, settled_as)
        logged = [r for r in self.warnings.records if r.levelno >= logging.WARNING]
        expected = self.model.settle(
            h.model,
            kind,
            delay,
            handler_wrote=self.transactional,
            error=settled_as.reason,
            result=settled_as.result,
        )
        assert decision.label == expected.label, (
            f"{h!r}: the runtime settles {outcome} as {decision.label}, the model as "
            f"{expected.label}"
        )
        assert len(logged) == len(expected.warnings), (
            f"{h!r}: warnings {[r.getMessage() for r in logged]}, the model expects "
            f"{list(expected.warnings)}"
        )
        for record, why in zip(logged, expected.warnings, strict=True):
            text = record.getMessage()
            said = {"cap": "dead letter", "result_without_column": "result is not kept"}
            assert said.get(why, "taken as retry()") in text, text
        return decision, expected

    def settle_delivery(self, h: Held, outcome: str) -> None:
        """As the Consumer does: run the handler, decide, settle."""
        decision, expected = self._decide(h, outcome)
        conn = self.run(self.worker_conn(h.model.worker))
        try:
            self.run(self.form.settle(conn, h.runtime, decision))
            lost = False
        except LeaseLost:
            lost = True
        assert lost == expected.lease_lost, (
            f"{h!r}: settling {outcome} {'raised' if lost else 'did not raise'} LeaseLost; "
            f"the model says it {'does' if expected.lease_lost else 'does not'}"
        )

    def settle_together(self, held: list[Held], outcomes: list[str]) -> None:
        """As the Consumer does for quick handlers (not transactional): each handler runs and
        decides, then their settlements commit together in one transaction."""
        assert not self.transactional and held
        decided = [self._decide(h, outcome) for h, outcome in zip(held, outcomes, strict=True)]
        conn = self.run(self.worker_conn(held[0].model.worker))
        items = [(h.runtime, decision) for h, (decision, _) in zip(held, decided, strict=True)]
        met = self.run(self.form.settle_group(conn, items))
        assert met is not None, "the group's transaction failed"
        lost = [m is not None for m in met]
        want = [expected.lease_lost for _, expected in decided]
        assert lost == want, f"{held!r}: LeaseLost per delivery {lost}, the model says {want}"

    # ------------------------------------------------------------ the comparison

    @invariant()
    def table_matches_model(self) -> None:
        if self.shape is None:
            return
        rows, dead, writes = self.model.committed()
        got_rows, got_dead, got_writes, tokens = self.run(self._read())
        problems = []
        if got_rows != _expected(rows):
            problems.append(_diff("queue table", got_rows, _expected(rows)))
        if self.dead_table is not None and got_dead != _expected(dead):
            problems.append(_diff("dead-letter table", got_dead, _expected(dead)))
        if got_writes != sorted(writes):
            problems.append(
                f"handler writes (deliveries): read {got_writes}, model {sorted(writes)}"
            )
        for row in rows.values():
            if row.lease == "held":
                token = self.by_number[row.holder].runtime.token  # type: ignore[index]
                # the row holds the token when the settlements' guard matches it, compared
                # as the database compares them (the token may be the expiry's text)
                if not self.run(self._holds(row.id, token)):
                    problems.append(
                        f"row {row.id}: locked_until {tokens[row.id]!r} is not the token "
                        f"{token!r} of d{row.holder}, which holds the lease"
                    )
        assert not problems, "\n".join(problems)

    async def _holds(self, row_id: int, token: Any) -> bool:
        """Whether row ``row_id`` holds lease ``token``, by the guard every lease statement
        carries (``locked_until = token``)."""
        db = await self.session.conn("db")
        found = await db.fetchall(
            f"SELECT {self.col('id')} AS id FROM {self.q(self.queue.table)} "
            f"WHERE {self.col('id')} = {self.p('id')} "
            f"AND {self.col('locked_until')} = {self.p('token')}",
            {"id": row_id, "token": token},
        )
        return bool(found)

    async def _read(self) -> tuple[list[tuple], list[tuple], list[int], dict[int, Any]]:
        db = await self.session.conn("db")
        rows, tokens = await self._read_table(self.queue.table)
        dead: list[tuple] = []
        if self.dead_table is not None:
            dead, _ = await self._read_table(self.dead_table)
        side = [
            int(r["delivery"])
            for table in self.sides
            for r in await db.fetchall(f"SELECT delivery FROM {self.q(table)}")
        ]
        return rows, dead, sorted(side), tokens

    async def _read_table(self, table: str) -> tuple[list[tuple], dict[int, Any]]:
        cols = self.queue.columns
        now = NOW[self.dialect]

        def when(role: str, past: str, future: str) -> str:
            c = self.col(role)
            return (
                f"CASE WHEN {c} IS NULL THEN 'none' WHEN {c} <= {now} THEN '{past}' "
                f"ELSE '{future}' END"
            )

        select = [f"{self.col('id')} AS id", f"{self.col('payload')} AS payload"]
        if "group" in cols:
            select.append(f"{self.col('group')} AS grp")
        if "attempt" in cols:
            select.append(f"{self.col('attempt')} AS attempt")
        if "retry_after" in cols:
            select.append(f"{when('retry_after', 'due', 'future')} AS retry_after")
        if "locked_until" in cols:
            # lease_free in the claim is "locked_until < now": at or before now is expired
            select.append(f"{when('locked_until', 'expired', 'held')} AS lease")
            select.append(f"{self.col('locked_until')} AS token")
        if "processed_at" in cols:
            select.append(
                f"CASE WHEN {self.col('processed_at')} IS NULL THEN 0 ELSE 1 END AS processed"
            )
        for role in ("priority", "fifo_key"):
            if role in cols:
                select.append(f"{self.col(role)} AS {self.q('qgen_' + role)}")
        if "dedupe_key" in cols:
            select.append(f"{self.col('dedupe_key')} AS dkey")
        if "last_error" in cols:
            select.append(f"{self.col('last_error')} AS why")
        if "result" in cols:
            select.append(f"{self.col('result')} AS res")
        if "concurrency_key" in cols:
            select.append(f"{self.col('concurrency_key')} AS ckey")
        found = await (await self.session.conn("db")).fetchall(
            f"SELECT {', '.join(select)} FROM {self.q(table)} ORDER BY {self.col('id')}"
        )
        out = [
            (
                int(r["id"]),
                decode_payload(r["payload"]),
                r.get("grp"),
                int(r["attempt"]) if r.get("attempt") is not None else None,
                r.get("retry_after"),
                r.get("lease"),
                bool(r["processed"]) if "processed" in r else None,
                int(r["qgen_priority"]) if "qgen_priority" in r else None,
                r.get("qgen_fifo_key"),
                r.get("dkey"),
                r.get("why"),
                decode_payload(r["res"]) if r.get("res") is not None else None,
                r.get("ckey"),
            )
            for r in found
        ]
        return out, {int(r["id"]): r.get("token") for r in found}


def _expected(rows: dict[int, Row]) -> list[tuple]:
    return [
        (
            r.id,
            r.payload,
            r.group,
            r.attempt,
            r.retry_after,
            r.lease,
            r.processed,
            r.priority,
            r.fifo_key,
            r.key,
            r.last_error,
            r.result,
            r.concurrency_key,
        )
        for _, r in sorted(rows.items())
    ]


_FIELDS = (
    "id",
    "payload",
    "group",
    "attempt",
    "retry_after",
    "lease",
    "processed",
    "priority",
    "fifo_key",
    "key",
    "last_error",
    "result",
    "concurrency_key",
)


def _diff(what: str, got: list[tuple], want: list[tuple]) -> str:
    lines = [f"{what} differs from the model ({', '.join(_FIELDS)}):"]
    got_by, want_by = {r[0]: r for r in got}, {r[0]: r for r in want}
    for row_id in sorted(set(got_by) | set(want_by)):
        g, w = got_by.get(row_id), want_by.get(row_id)
        if g != w:
            lines.append(f"  row {row_id}: read {g}, model {w}")
    return "\n".join(lines)


# ---------------------------------------------------------------- row lock


class RowLockMachine(QueueMachine):
    """Row lock: a claim opens its worker's transaction, settlements run in it, COMMIT ends it.

    Two workers hold batches at once (SKIP LOCKED between them) except on SQLite, whose
    ``BEGIN IMMEDIATE`` makes batches take turns.
    """

    @initialize(
        shape=table_shapes("row_lock"),
        renamed=st.booleans(),
        transactional=st.booleans(),
        prefill=PREFILL,
    )
    def create_queue(self, shape: Shape, renamed: bool, transactional: bool, prefill: int) -> None:
        self.setup_queue(shape, renamed, transactional, prefill)

    def _can_claim(self, worker: int) -> bool:
        if self.model.open_batch(worker):
            return False  # a worker claims again only after its batch ends
        return not (self.sqlite and self.model.batches_open)  # SQLite: one batch at a time

    def _claim(self, worker: int, limit: int, group: str | None) -> Any:
        if not self._can_claim(worker):
            return multiple()
        got = self.claim_rows(worker, limit, group)
        return multiple(*self.check_claimed(got, self.model.claim(worker, limit, group)))

    @precondition(lambda self: self.shape is not None)
    @rule(target=QueueMachine.deliveries, worker=st.sampled_from([0, 1]), limit=st.integers(1, 3))
    def claim(self, worker: int, limit: int) -> Any:
        return self._claim(worker, limit, None)

    @precondition(lambda self: self.shape is not None and self.shape.group)
    @rule(target=QueueMachine.deliveries, worker=st.sampled_from([0, 1]), limit=st.integers(1, 3))
    def claim_other_group(self, worker: int, limit: int) -> Any:
        return self._claim(worker, limit, OTHER_GROUP)

    @precondition(lambda self: self.shape is not None)
    @rule(limit=st.integers(1, 3), outcomes=ROUND, together=st.booleans())
    def consume(self, limit: int, outcomes: list[str], together: bool) -> None:
        """One Consumer round on a free worker: claim, settle each delivery in turn or (not
        transactional) all of them at the batch's end, one statement per outcome, COMMIT."""
        worker = next((w for w in (0, 1) if self._can_claim(w)), None)
        if worker is None:
            return
        held = list(self._claim(worker, limit, None).values)[: len(outcomes)]
        if together and held and not self.transactional:
            self.settle_together(held, outcomes[: len(held)])
        else:
            for h, outcome in zip(held, outcomes, strict=False):
                self.settle_delivery(h, outcome)
        if self.model.open_batch(worker):
            self.run(self.form.end_batch(self.run(self.worker_conn(worker))))
            self.model.end_batch(worker)

    @rule(delivery=consumes(QueueMachine.deliveries), outcome=st.sampled_from(list(OUTCOMES)))
    def settle(self, delivery: Held, outcome: str) -> None:
        if delivery.model.state != "open":
            return  # its batch ended: it was given back at the COMMIT or the rollback
        self.settle_delivery(delivery, outcome)

    @rule(delivery=consumes(QueueMachine.deliveries))
    def give_back(self, delivery: Held) -> None:
        """A delivery the worker will not start (the Consumer stopping): its row returns as it
        was."""
        if delivery.model.state != "open":
            return
        conn = self.run(self.worker_conn(delivery.model.worker))
        self.run(self.form.give_back(conn, delivery.runtime))
        self.model.give_back(delivery.model)

    @precondition(lambda self: self.shape is not None and self.model.batches_open)
    @rule(worker=st.sampled_from([0, 1]))
    def end_batch(self, worker: int) -> None:
        """COMMIT: every settlement of the batch becomes visible; unsettled rows return."""
        if not self.model.open_batch(worker):
            return
        conn = self.run(self.worker_conn(worker))
        self.run(self.form.end_batch(conn))
        self.model.end_batch(worker)

    @precondition(lambda self: self.shape is not None and self.model.batches_open)
    @rule(worker=st.sampled_from([0, 1]))
    def roll_back_batch(self, worker: int) -> None:
        """The batch cannot finish (a crash mid-batch): ROLLBACK undoes all its settlements."""
        if not self.model.open_batch(worker):
            return
        conn = self.run(self.worker_conn(worker))
        self.run(self.form.abort_batch(conn))
        self.model.abort_batch(worker)


# ---------------------------------------------------------------- lease


class LeaseMachine(QueueMachine):
    """Lease: the claim writes each row's lease (the token); every settlement carries it."""

    WORKER = 0  # leases need no per-worker state: one connection claims and settles

    @initialize(
        shape=table_shapes("lease"),
        renamed=st.booleans(),
        transactional=st.booleans(),
        prefill=PREFILL,
    )
    def create_queue(self, shape: Shape, renamed: bool, transactional: bool, prefill: int) -> None:
        self.setup_queue(shape, renamed, transactional, prefill)

    def _claim(self, limit: int, group: str | None) -> Any:
        got = self.claim_rows(self.WORKER, limit, group)
        return multiple(*self.check_claimed(got, self.model.claim(self.WORKER, limit, group)))

    @precondition(lambda self: self.shape is not None)
    @rule(target=QueueMachine.deliveries, limit=st.integers(1, 3))
    def claim(self, limit: int) -> Any:
        return self._claim(limit, None)

    @precondition(lambda self: self.shape is not None and self.shape.group)
    @rule(target=QueueMachine.deliveries, limit=st.integers(1, 3))
    def claim_other_group(self, limit: int) -> Any:
        return self._claim(limit, OTHER_GROUP)

    @precondition(lambda self: self.shape is not None)
    @rule(limit=st.integers(1, 3), outcomes=ROUND, together=st.booleans())
    def consume(self, limit: int, outcomes: list[str], together: bool) -> None:
        """One Consumer round: claim, then settle each delivery in turn, or (quick handlers,
        not transactional) all of them in one transaction."""
        held = list(self._claim(limit, None).values)[: len(outcomes)]
        if together and held and not self.transactional:
            self.settle_together(held, outcomes[: len(held)])
            return
        for h, outcome in zip(held, outcomes, strict=False):
            self.settle_delivery(h, outcome)

    @rule(delivery=consumes(QueueMachine.deliveries), outcome=st.sampled_from(list(OUTCOMES)))
    def settle(self, delivery: Held, outcome: str) -> None:
        """A stale delivery (its lease expired) must raise LeaseLost and change nothing."""
        self.settle_delivery(delivery, outcome)

    @precondition(lambda self: self.shape is not None and not self.transactional)
    @rule(
        target=QueueMachine.deliveries,
        limit=st.integers(2, 3),
        outcomes=ROUND,
        stale=st.integers(0, 2),
        reclaim=st.booleans(),
    )
    def consume_with_a_lost_lease(
        self, limit: int, outcomes: list[str], stale: int, reclaim: bool
    ) -> Any:
        """Quick handlers settle together (one window) while one of them has lost its lease
        (it ran out, and maybe another claim took the row): that one alone is LeaseLost and
        changes nothing, the others settle. The other claim's deliveries stay to be settled."""
        held = list(self._claim(limit, None).values)[: len(outcomes)]
        if not held:
            return multiple()
        self.expire_lease(held[stale % len(held)])
        taken = self._claim(1, None) if reclaim else multiple()
        self.settle_together(held, outcomes[: len(held)])
        return taken

    @rule(delivery=consumes(QueueMachine.deliveries))
    def give_back(self, delivery: Held) -> None:
        """Dropped unsettled (after the handler wrote): the lease is released at once."""
        conn = self.run(self.worker_conn(self.WORKER))
        self.run(self.handler_writes(conn, delivery))
        delivery.runtime.started = True  # a handler ran: the count stays
        self.run(self.form.give_back(conn, delivery.runtime))
        # the Consumer re-raises the cancellation, and the batch's cleanup rolls back
        self.run(self.form.abort_batch(conn))
        self.model.give_back(delivery.model)

    @rule(delivery=QueueMachine.deliveries)
    def extend(self, delivery: Held) -> None:
        """The runtime moves a held lease forward; the new token must settle it later."""
        conn = self.run(self.worker_conn(self.WORKER))
        got = self.run(self.form.extend(conn, delivery.runtime))
        want = delivery.model.state == "open" and self.model.extend(delivery.model)
        assert got == want, f"extend({delivery!r}) returned {got}, the model says {want}"

    @rule(delivery=QueueMachine.deliveries)
    def expire_lease(self, delivery: Held) -> None:
        """Time passes beyond the delivery's lease (only while its delivery still holds it)."""
        row = self.model.rows.get(delivery.model.id)
        if row is None or row.holder != delivery.model.number:
            return
        self.run(self._set_past("locked_until", row.id))
        self.model.expire_lease(row.id)
        if self.sqlite:
            # Tokens there are milliseconds: the next claim must not write this very token
            # again. A real lease runs out only after lease_s, so a new token is always later.
            self.run(asyncio.sleep(0.003))


# ---------------------------------------------------------------- advisory


class AdvisoryMachine(QueueMachine):
    """Advisory lock: a claim takes the keys of the first free rows among its candidates and
    takes each row under its key.

    Two workers, each on its own connection, as two Consumer workers are: a key one holds is
    refused to the other, and a worker claims again only when it holds nothing.
    """

    @initialize(
        shape=table_shapes("advisory"),
        renamed=st.booleans(),
        transactional=st.booleans(),
        prefill=PREFILL,
    )
    def create_queue(self, shape: Shape, renamed: bool, transactional: bool, prefill: int) -> None:
        self.setup_queue(shape, renamed, transactional, prefill)

    def _open(self, worker: int) -> list[Delivery]:
        return [d for d in self.model._keys.values() if d.worker == worker]

    def _claim(self, worker: int, limit: int, group: str | None) -> list[Held]:
        if self._open(worker):
            return []  # the Consumer claims again only after it worked through its batch
        got = self.claim_rows(worker, limit, group)
        want = self.model.claim(worker, limit, group, spread=self.form.spread)
        assert got.contended == self.model.contended, (
            f"claim on worker {worker}: contended {got.contended}, the model says "
            f"{self.model.contended}"
        )
        return self.check_claimed(got, want)

    @precondition(lambda self: self.shape is not None)
    @rule(target=QueueMachine.deliveries, worker=st.sampled_from([0, 1]), limit=st.integers(1, 3))
    def claim(self, worker: int, limit: int) -> Any:
        return multiple(*self._claim(worker, limit, None))

    @precondition(lambda self: self.shape is not None and self.shape.group)
    @rule(target=QueueMachine.deliveries, worker=st.sampled_from([0, 1]), limit=st.integers(1, 3))
    def claim_other_group(self, worker: int, limit: int) -> Any:
        return multiple(*self._claim(worker, limit, OTHER_GROUP))

    @precondition(lambda self: self.shape is not None)
    @rule(
        worker=st.sampled_from([0, 1]),
        limit=st.integers(1, 3),
        outcomes=st.lists(st.sampled_from(list(OUTCOMES)), min_size=0, max_size=3),
        together=st.booleans(),
    )
    def consume(self, worker: int, limit: int, outcomes: list[str], together: bool) -> None:
        """One Consumer round on an idle worker: claim, settle what the outcomes cover (one by
        one, or together), then return the rest unstarted (as a stopping Consumer does)."""
        held = self._claim(worker, limit, None)
        handled, rest = held[: len(outcomes)], held[len(outcomes) :]
        if together and handled and not self.transactional:
            self.settle_together(handled, outcomes[: len(handled)])
        else:
            for h, outcome in zip(handled, outcomes, strict=False):
                self.settle_delivery(h, outcome)
        conn = self.run(self.worker_conn(worker))
        for h in rest:
            self.run(self.form.return_unstarted(conn, h.runtime))
            self.model.return_unstarted(h.model)

    @rule(delivery=consumes(QueueMachine.deliveries), outcome=st.sampled_from(list(OUTCOMES)))
    def settle(self, delivery: Held, outcome: str) -> None:
        if delivery.model.state == "open":  # else: given back with its worker's connection
            self.settle_delivery(delivery, outcome)

    @rule(delivery=consumes(QueueMachine.deliveries))
    def give_back(self, delivery: Held) -> None:
        """Dropped unsettled (after the handler wrote): unlocked, its connection closed; the
        Consumer's worker stops there, so every key of its batch goes with the connection."""
        if delivery.model.state != "open":
            return
        worker = delivery.model.worker
        conn = self.run(self.worker_conn(worker))
        self.run(self.handler_writes(conn, delivery))
        delivery.runtime.started = True  # a handler ran: the count stays
        self.run(self.form.give_back(conn, delivery.runtime))
        self.run(self.form.abort_batch(conn))
        for d in self._open(worker):
            self.model.give_back(d)


MACHINES: dict[str, type[QueueMachine]] = {
    "row_lock": RowLockMachine,
    "lease": LeaseMachine,
    "advisory": AdvisoryMachine,
}


@pytest.mark.parametrize("form", list(MACHINES))
def test_outcome_model(engine: Engine, form: str) -> None:
    """The table, its dead letter and the handler's writes match the model after every step."""
    machine, session = MACHINES[form], Session(engine)
    try:
        run_state_machine_as_test(lambda: machine(session), settings=model_settings())
    finally:
        session.close()


def limited(machine: type[QueueMachine], form: str) -> type[QueueMachine]:
    """``machine`` on tables that declare at least one limit (concurrency_limit,
    max_in_flight, rate_limit), with or without the other optional columns."""

    class Limited(machine):  # type: ignore[valid-type,misc]
        @initialize(
            shape=table_shapes(form, limited=True),
            renamed=st.booleans(),
            transactional=st.booleans(),
            prefill=PREFILL,
        )
        def create_queue(
            self, shape: Shape, renamed: bool, transactional: bool, prefill: int
        ) -> None:
            self.setup_queue(shape, renamed, transactional, prefill)

    Limited.__name__ = f"Limited{machine.__name__}"
    return Limited


#: the limits' own run: fewer examples than the outcome model's (its shapes draw limits too)
LIMITS_EXAMPLES = {"ci": 25, "thorough": 400}


@pytest.mark.parametrize("form", list(MACHINES))
def test_limits_model(engine: Engine, form: str) -> None:
    """Claims held to concurrency_limit, max_in_flight and rate_limit take the rows the model
    says, and the table matches it after every step."""
    machine, session = limited(MACHINES[form], form), Session(engine)
    chosen = model_settings()
    examples = LIMITS_EXAMPLES[profile_name()]
    try:
        run_state_machine_as_test(
            lambda: machine(session), settings=settings(chosen, max_examples=examples)
        )
    finally:
        session.close()
