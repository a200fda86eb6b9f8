"""Schedules against their model: random sequences of clock moves, racing schedulers, stale
schedulers, pauses and resumes on a real queue and schedule table, compared with
tests/support/model/schedule_model.py after every step, on every engine.

The schedulers are the runtime's own (``runtime.schedules.tick``, what ``Scheduler.run``
loops over), each on its own connection; a step runs up to four of them at once with
``asyncio.gather``, so their statements interleave on the server. The clock they compute
slots from is pinned by the test (``tick(..., now=...)``, which reaches the statements
only as bound horizons) and moved by steps of a quarter second to several minutes, so
catch-up after downtime is exercised without sleeping. After every step the schedule
table's rows (horizon, last_slot, paused) and every message in the queue (its schedule and
slot) are read back with plain SQL and compared with the model: a slot fired twice, one
missed beyond the policy, or one fired while paused shows as a difference.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from datetime import UTC, datetime
from typing import Any, TypeVar

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support.engines import Engine
from support.model.profiles import model_settings
from support.model.schedule_model import ScheduleModel, Spec, State
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.contract.errors import BrokerError
from runtime.drivers.base import Connection
from runtime.payloads import decode_payload
from runtime.schedules import _states, fire, pause, resume, tick

pytestmark = pytest.mark.model

T = TypeVar("T")

#: the queue's schedules as declared, and as the model knows them ("*/3 * * * * *" in UTC
#: fires on the multiples of 3 seconds since the epoch, as every 3 seconds does)
DECLARED: dict[str, dict[str, Any]] = {
    "each": {"every": "1s"},
    "cron3": {"cron": "*/3 * * * * *", "catch_up": "all", "catch_up_limit": 4},
    "ten": {"every": "10s", "catch_up": "none"},
    "two": {"every": "2s", "catch_up": "all", "catch_up_limit": 2},
}
SPECS = (
    Spec("each", 1, "latest"),
    Spec("cron3", 3, "all", 4),
    Spec("ten", 10, "none"),
    Spec("two", 2, "all", 2),
)
NAMES = [s.name for s in SPECS]
#: schedulers, each on its own connection
SCHEDULERS = 4
#: the clock's start: 2026-01-01T00:00:00Z plus what an example draws
EPOCH = 1_767_225_600
#: clock moves, in seconds (exact binary fractions, so the sums are exact): within a slot,
#: across a few, and outages beyond catch_up = "none"'s 60 seconds
STEPS = st.sampled_from([0.25, 0.5, 1.0, 1.75, 3.0, 6.5, 59.75, 61.0, 250.0])

#: the schedule examples: fewer than the outcome model's (each step is up to 20 statements)
SCHEDULE_EXAMPLES = {"ci": 25, "thorough": 300}


def slot_text(slot: int) -> str:
    return datetime.fromtimestamp(slot, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Rig:
    """What the examples of one test share: a loop, the queue and its tables, connections."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.loop = asyncio.new_event_loop()
        self.qt: QueueUnderTest = self.run(self._make())
        self.conns = [self.run(runtime.connect(engine.url)) for _ in range(SCHEDULERS + 1)]

    async def _make(self) -> QueueUnderTest:
        schedules = {
            name: {"payload": {"job": name}, "slot_column": "slot"} | spec
            for name, spec in DECLARED.items()
        }
        return await make_queue(
            self.engine,
            "lease",
            columns=("attempt", "processed_at"),
            extra={"other_columns": ["slot"], "schedules": schedules},
        )

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    @property
    def db(self) -> Connection:
        return self.conns[-1]

    @property
    def schedule_table(self) -> str:
        return self.qt.queue.rendered.header.schedule_table or ""

    async def empty(self) -> None:
        q = self.qt.q
        await self.db.execute(f"DELETE FROM {q(self.qt.table)}")
        await self.db.execute(f"DELETE FROM {q(self.schedule_table)}")

    def close(self) -> None:
        try:
            for c in self.conns:
                self.run(c.close())
            self.run(self.qt.drop())
        finally:
            self.loop.close()


class ScheduleMachine(RuleBasedStateMachine):
    def __init__(self, rig: Rig) -> None:
        super().__init__()
        self.rig = rig
        self.queue = rig.qt.queue
        self.schedules = {s.name: s for s in self.queue.rendered.header.schedules}
        self.model = ScheduleModel(SPECS)
        self.now = float(EPOCH)
        #: each scheduler's earlier reading of a schedule's row: (as read, the model's)
        self.read: dict[tuple[int, str], tuple[dict[str, Any], State]] = {}
        self.retried = 0
        rig.run(rig.empty())

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.rig.run(coro)

    @initialize(second=st.integers(0, 59), fraction=st.sampled_from([0.0, 0.25, 0.5, 0.75]))
    def start(self, second: int, fraction: float) -> None:
        self.now = EPOCH + second + fraction

    @rule(seconds=STEPS)
    def advance(self, seconds: float) -> None:
        """Time passes: no scheduler looks meanwhile (an outage, when long)."""
        self.now += seconds

    async def _tick(self, scheduler: int, now: float) -> dict[str, int]:
        """One scheduler's look, retried once as Scheduler.run retries a failed one (a
        deadlock between racers on MySQL/MariaDB): a failed look committed nothing."""
        conn = self.rig.conns[scheduler]
        try:
            fired, _ = await tick(conn, [self.queue], now=now)
        except BrokerError:
            if conn.in_transaction:
                await conn.rollback()
            self.retried += 1
            fired, _ = await tick(conn, [self.queue], now=now)
        return fired

    @rule(racers=st.integers(1, SCHEDULERS), behind=st.sampled_from([0.0, 0.0, 0.5, 2.0]))
    def tick(self, racers: int, behind: float) -> None:
        """``racers`` schedulers look at once, at the clock ``now`` (less ``behind``: their
        reading is late). Together they fire what one look fires."""
        now = self.now - behind

        async def race() -> list[dict[str, int]]:
            return list(await asyncio.gather(*(self._tick(i, now) for i in range(racers))))

        got = self.run(race())
        want = self.model.tick(now)
        for name in NAMES:
            fired = sum(g.get(f"{self.queue.name}.{name}", 0) for g in got)
            assert fired == len(want[name]), (
                f"{racers} scheduler(s) at {now}: {name} fired {fired} slot(s) together, the "
                f"model says {want[name]}"
            )

    @precondition(lambda self: self.model.states)
    @rule(scheduler=st.integers(0, SCHEDULERS - 1), name=st.sampled_from(NAMES))
    def read_state(self, scheduler: int, name: str) -> None:
        """A scheduler reads a schedule's row, to act on it later (by then maybe stale)."""
        row = self.run(_states(self.rig.conns[scheduler], self.queue))[name]
        seen = self.model.read(name)
        assert seen is not None
        self.read[scheduler, name] = (row, seen)

    @precondition(lambda self: self.read)
    @rule(data=st.data())
    def fire_stale(self, data: st.DataObject) -> None:
        """A scheduler fires from the row it read earlier: only if the row still holds that
        horizon and is not paused; else another scheduler decided those slots."""
        scheduler, name = data.draw(st.sampled_from(sorted(self.read)))
        row, seen = self.read[scheduler, name]
        conn = self.rig.conns[scheduler]
        got = self.run(fire(conn, self.queue, self.schedules[name], row, self.now))
        want = self.model.fire_stale(name, seen, self.now)
        assert list(got) == want, f"{name} fired {got} from a stale read, the model says {want}"

    @rule(name=st.sampled_from(NAMES), paused=st.booleans())
    def pause_or_resume(self, name: str, paused: bool) -> None:
        """Pause (the schedule fires nothing) or resume (the paused slots never fire)."""
        if paused:
            got = self.run(pause(self.rig.db, self.queue, name, now=self.now))
            want = self.model.pause(name, self.now)
        else:
            got = self.run(resume(self.rig.db, self.queue, name, now=self.now))
            want = self.model.resume(name, self.now)
        verb = "pause" if paused else "resume"
        assert got is want, f"{verb}({name}) returned {got}, the model says {want}"

    @invariant()
    def tables_match_the_model(self) -> None:
        rows, messages = self.run(self._read())
        want_rows = {
            name: (s.horizon, s.last_slot, s.paused) for name, s in self.model.states.items()
        }
        assert rows == want_rows, f"schedule rows {rows}, the model says {want_rows}"
        want_messages = sorted((name, slot_text(slot)) for name, slot in self.model.fired)
        if messages != want_messages:
            extra = sorted(set(messages) - set(want_messages))
            missing = sorted(set(want_messages) - set(messages))
            twice = sorted({m for m in messages if messages.count(m) > 1})
            raise AssertionError(
                f"messages differ from the model: fired twice {twice}, not in the model "
                f"{extra}, missing {missing}"
            )

    async def _read(self) -> tuple[dict[str, tuple[Any, ...]], list[tuple[str, str]]]:
        q, db = self.rig.qt.q, self.rig.db
        found = await db.fetchall(
            f"SELECT {q('schedule')} AS s, {q('horizon')} AS h, {q('last_slot')} AS l, "
            f"{q('paused')} AS p FROM {q(self.rig.schedule_table)} "
            f"WHERE {q('queue')} = {self.rig.qt.p('queue')}",
            {"queue": self.queue.name},
        )
        rows = {
            str(r["s"]): (int(r["h"]), None if r["l"] is None else int(r["l"]), bool(r["p"]))
            for r in found
        }
        msgs = await db.fetchall(
            f"SELECT {q('payload')} AS payload, {q('slot')} AS slot FROM {q(self.rig.qt.table)}"
        )
        messages = sorted((decode_payload(m["payload"])["job"], str(m["slot"])) for m in msgs)
        return rows, messages


def test_schedule_model(engine: Engine) -> None:
    """Racing, stale and late schedulers, pauses, resumes and outages: every slot fires once
    by its policy, and the schedule table says what the model says, after every step."""
    rig = Rig(engine)
    chosen = model_settings()
    examples = SCHEDULE_EXAMPLES["thorough" if chosen.max_examples > 120 else "ci"]
    try:
        run_state_machine_as_test(
            lambda: ScheduleMachine(rig), settings=settings(chosen, max_examples=examples)
        )
    finally:
        rig.close()
