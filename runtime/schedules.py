"""Schedules at run time: fire each slot of a queue's schedules exactly once, however many
processes and hosts run them; list, pause and resume them.

Every queue with schedules has a schedule table (rendered in its ``schema`` block) with one
row per schedule: ``horizon``, the last slot decided (fired or skipped), ``last_slot``, the
last one that fired, and ``paused``. A scheduler reads the database's clock
(``schedule_now``), works out from the horizon it read which slots fire by the schedule's
catch-up policy (``runtime.contract.schedule_slots.plan``), then in one transaction moves the row
from that horizon to the new one (``schedule_fire``, which changes no row when another
scheduler moved it first, or the schedule is paused) and enqueues one message per slot.
The row's update and the messages commit together or not at all, so a slot's message is
enqueued once whatever crashes, and a scheduler killed mid-way leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from runtime.backoff import Backoff
from runtime.connect import Opener, connect, opener
from runtime.contract.errors import BrokerError, ConfigurationError
from runtime.contract.file_steps import present
from runtime.contract.schedule_slots import Schedule, plan, slot_text
from runtime.drivers.base import Connection
from runtime.queue import Queue, check_dialect
from runtime.steps import run_step

log = logging.getLogger("runtime")

#: a scheduler looks at the schedule table at least this often (a pause or resume elsewhere)
MAX_SLEEP_S = 5.0
#: it wakes this long after a slot's time, so the database's clock has passed it
_AFTER_SLOT_S = 0.005


@dataclass(frozen=True)
class ScheduleStatus:
    """One schedule as ``qgen schedules list`` shows it (slots as epoch seconds, UTC)."""

    queue: str
    schedule: Schedule
    #: every slot up to here is decided; None: no scheduler has seen the schedule yet
    horizon: int | None
    #: the last slot that fired (None: none yet)
    last_slot: int | None
    paused: bool
    #: the first slot after the database's clock now
    next_slot: int | None

    @property
    def name(self) -> str:
        return self.schedule.name

    def as_dict(self) -> dict[str, Any]:
        """For JSON: slots as ISO-8601 UTC text."""

        def shown(slot: int | None) -> str | None:
            return None if slot is None else slot_text(slot)

        return {
            "queue": self.queue,
            "schedule": self.name,
            "every": self.schedule.cron or f"{self.schedule.every_s}s",
            "timezone": self.schedule.timezone,
            "catch_up": self.schedule.catch_up,
            "next_slot": shown(self.next_slot),
            "last_slot": shown(self.last_slot),
            "paused": self.paused,
        }


def schedules_of(queue: Queue) -> tuple[Schedule, ...]:
    return queue.rendered.header.schedules


def _named(queue: Queue, name: str) -> Schedule:
    for schedule in schedules_of(queue):
        if schedule.name == name:
            return schedule
    names = ", ".join(s.name for s in schedules_of(queue)) or "none"
    raise ConfigurationError(
        f"queue '{queue.name}' has no schedule {name!r} (its schedules: {names}); declare it "
        f"under [queues.{queue.name}.schedules.{name}] and render again"
    )


async def db_now(conn: Connection, queue: Queue) -> float:
    """The database's clock as epoch seconds."""
    rows = (
        await run_step(conn, present(queue.steps.schedule_now, queue.rendered, "schedule_now"), {})
    ).rows
    return float(rows[0]["now_s"])


async def _states(conn: Connection, queue: Queue) -> dict[str, dict[str, Any]]:
    rows = (
        await run_step(
            conn,
            present(queue.steps.schedule_state, queue.rendered, "schedule_state"),
            {"queue": queue.name},
        )
    ).rows
    return {str(r["schedule"]): r for r in rows}


async def _start(conn: Connection, queue: Queue, names: Sequence[str], now: float) -> None:
    """The state rows of schedules seen for the first time (one there already is kept)."""
    for name in names:
        params = {"queue": queue.name, "schedule": name, "horizon": math.floor(now)}
        await run_step(
            conn, present(queue.steps.schedule_start, queue.rendered, "schedule_start"), params
        )


async def _ready_states(conn: Connection, queue: Queue, now: float) -> dict[str, dict[str, Any]]:
    states = await _states(conn, queue)
    missing = [s.name for s in schedules_of(queue) if s.name not in states]
    if missing:
        await _start(conn, queue, missing, now)
        states = await _states(conn, queue)
    return states


async def fire(
    conn: Connection, queue: Queue, schedule: Schedule, state: Mapping[str, Any], now: float
) -> tuple[int, ...]:
    """Fire what is due of one schedule, from its ``state`` row as read; returns the slots
    whose messages this call enqueued (none when another scheduler was first)."""
    if int(state["paused"]):
        return ()
    seen = int(state["horizon"])
    decided = plan(schedule, seen, now)
    if decided.horizon is None:
        return ()
    last = decided.fire[-1] if decided.fire else state["last_slot"]
    params = {
        "queue": queue.name,
        "schedule": schedule.name,
        "horizon": decided.horizon,
        "last_slot": None if last is None else int(last),
        "seen": seen,
    }
    await conn.begin(immediate=True)
    try:
        moved = await run_step(
            conn, present(queue.steps.schedule_fire, queue.rendered, "schedule_fire"), params
        )
        if moved.rowcount != 1:
            await conn.rollback()
            return ()
        for slot in decided.fire:
            values = {schedule.slot_column: slot_text(slot)} if schedule.slot_column else None
            await queue.enqueue(conn, schedule.payload, group=schedule.group, values=values)
        await conn.commit()
    except BaseException:
        if not conn.closed:
            await conn.rollback()
        raise
    if decided.skipped:
        log.warning(
            "queue %s: schedule %s skipped %s%d missed slot(s) (catch_up = %s)",
            queue.name,
            schedule.name,
            "at least " if schedule.catch_up != "none" else "",
            decided.skipped,
            schedule.catch_up,
        )
    for slot in decided.fire:
        log.info("queue %s: schedule %s fired slot %s", queue.name, schedule.name, slot_text(slot))
    return decided.fire


async def tick(
    conn: Connection, queues: Sequence[Queue], now: float | None = None
) -> tuple[dict[str, int], float]:
    """One look at every schedule of ``queues``: fire what is due; returns the number of
    slots fired per ``queue.schedule`` and the seconds until the next slot.

    ``now`` pins the clock the slots are computed from (epoch seconds; tests drive the
    schedules with it); None reads the database's (``schedule_now``). Either way it reaches
    the statements only as bound values (the horizons)."""
    fired: dict[str, int] = {}
    wait = MAX_SLEEP_S
    pinned = now
    for queue in queues:
        if not schedules_of(queue):
            continue
        now = pinned if pinned is not None else await db_now(conn, queue)
        states = await _ready_states(conn, queue, now)
        for schedule in schedules_of(queue):
            slots = await fire(conn, queue, schedule, states[schedule.name], now)
            fired[f"{queue.name}.{schedule.name}"] = len(slots)
            upcoming = schedule.next_slot(now)
            if upcoming is not None:
                wait = min(wait, upcoming - now)
    return fired, max(wait, 0.0) + _AFTER_SLOT_S


class Scheduler:
    """Runs the schedules of ``queues`` until ``stop()``: ``await Scheduler(url, [queue]).run()``.

    Any number of schedulers (processes, hosts) may run the same schedules: each slot's
    message is enqueued once (see the module). ``Consumer(..., schedules=True)`` and
    ``qgen worker --schedules`` run one beside the consumer; ``qgen schedules run`` runs only
    this. A lost database is logged and retried with backoff; the slots missed meanwhile
    fire by each schedule's catch_up policy when it returns.
    """

    def __init__(self, db: str | Opener, queues: Sequence[Queue]) -> None:
        self.open = opener(db)
        self.queues = [q for q in queues if schedules_of(q)]
        if not self.queues:
            names = ", ".join(q.name for q in queues) or "none"
            raise ConfigurationError(
                f"no schedules to run: the queues given ({names}) declare none; add "
                "[queues.NAME.schedules.X] to qgen.toml and render again"
            )
        self._stopping = asyncio.Event()
        #: slots fired since run() started, per ``queue.schedule``
        self.fired: dict[str, int] = {}

    def stop(self) -> None:
        """Ask run() to return (a fire under way finishes first)."""
        self._stopping.set()

    async def run(self) -> dict[str, int]:
        """Fire every slot as it comes until stop(); returns the slots fired per schedule."""
        backoff = Backoff(0.5, MAX_SLEEP_S)
        conn: Connection | None = None
        checked = False
        try:
            while not self._stopping.is_set():
                try:
                    if conn is None or conn.closed:
                        conn = await self._connect(checked)
                        checked = True
                    fired, wait = await tick(conn, self.queues)
                    backoff.reset()
                except ConfigurationError:
                    raise
                except (BrokerError, OSError) as exc:
                    wait = backoff.next()
                    log.warning("schedules: %s; trying again in %.1fs", exc, wait)
                    if conn is not None:
                        with contextlib.suppress(Exception):
                            await conn.close()
                    conn, fired = None, {}
                for key, n in fired.items():
                    self.fired[key] = self.fired.get(key, 0) + n
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), wait)
        finally:
            self._stopping.clear()
            if conn is not None:
                with contextlib.suppress(Exception):
                    await conn.close()
        return self.fired

    async def _connect(self, checked: bool) -> Connection:
        conn = await self.open()
        try:
            for queue in self.queues:
                check_dialect(queue.rendered, conn)
                if not checked:  # the schedule table must exist: say how to make it
                    try:
                        await _states(conn, queue)
                    except BrokerError as exc:
                        if conn.in_transaction:
                            await conn.rollback()
                        raise ConfigurationError(
                            f"queue '{queue.name}': the schedule table "
                            f"'{queue.rendered.header.schedule_table}' cannot be read ({exc}); "
                            "create it with the file's schema statements: run `qgen apply "
                            "--db URL`"
                        ) from None
        except BaseException:
            await conn.close()
            raise
        return conn


async def _on(db: Any, work: Any) -> Any:
    """Run ``work(conn)`` on a URL's own connection, or on the runtime connection given."""
    if isinstance(db, str):
        async with await connect(db) as conn:
            return await work(conn)
    return await work(db)


async def status(db: Any, queue: Queue) -> list[ScheduleStatus]:
    """Each schedule of ``queue`` with its next and last slot and whether it is paused:
    ``await runtime.schedules.status(url, queue)`` (what ``qgen schedules list`` prints)."""

    async def work(conn: Connection) -> list[ScheduleStatus]:
        check_dialect(queue.rendered, conn)
        now = await db_now(conn, queue)
        states = await _states(conn, queue)
        out = []
        for schedule in schedules_of(queue):
            row = states.get(schedule.name)
            last = row["last_slot"] if row else None
            out.append(
                ScheduleStatus(
                    queue=queue.name,
                    schedule=schedule,
                    horizon=int(row["horizon"]) if row else None,
                    last_slot=None if last is None else int(last),
                    paused=bool(row and int(row["paused"])),
                    next_slot=schedule.next_slot(now),
                )
            )
        return out

    result: list[ScheduleStatus] = await _on(db, work)
    return result


async def pause(db: Any, queue: Queue, name: str, now: float | None = None) -> bool:
    """Pause one schedule: no slot fires until ``resume``; True if it was not paused.
    ``now``: a pinned clock, as for ``tick``."""
    return await _set_paused(db, queue, name, paused=True, pinned=now)


async def resume(db: Any, queue: Queue, name: str, now: float | None = None) -> bool:
    """Resume a paused schedule: the slots it was paused through never fire (its horizon
    moves to the database's clock, or ``now`` when pinned, as for ``tick``); True if it was
    paused."""
    return await _set_paused(db, queue, name, paused=False, pinned=now)


async def _set_paused(
    db: Any, queue: Queue, name: str, paused: bool, pinned: float | None = None
) -> bool:
    _named(queue, name)

    async def work(conn: Connection) -> bool:
        check_dialect(queue.rendered, conn)
        now = pinned if pinned is not None else await db_now(conn, queue)
        was = (await _ready_states(conn, queue, now))[name]
        params = {
            "queue": queue.name,
            "schedule": name,
            "paused": int(paused),
            "horizon": 0 if paused else math.floor(now),
        }
        await run_step(
            conn, present(queue.steps.schedule_pause, queue.rendered, "schedule_pause"), params
        )
        changed = bool(int(was["paused"])) != paused
        if changed:
            log.info(
                "queue %s: schedule %s %s", queue.name, name, "paused" if paused else "resumed"
            )
        return changed

    result: bool = await _on(db, work)
    return result


__all__ = ["ScheduleStatus", "Scheduler", "fire", "pause", "resume", "status", "tick"]
