"""Schedules as data, and their slots: which instants a schedule fires at, and which of the
slots since the last one decided fire now under its catch-up policy. Pure: no database.

Both sides read it: the generator checks a declaration's schedules with ``parse_schedule``
(so ``qgen render`` refuses a bad cron expression or time zone) and writes them into the
rendered file's header; the runtime reads them back with the same function.

A slot is a whole second since the Unix epoch (UTC). A cron expression is evaluated in the
schedule's time zone by ``cronsim`` (it follows Debian's cron at DST changes: a time in the
hour skipped in spring fires at the change; a time in the hour repeated in autumn fires
once; expressions finer than an hour fire in both passes of the repeated hour, as those
are distinct instants); ``every`` slots are multiples of the interval since the epoch.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

#: catch_up: what fires of the slots that passed while no scheduler ran (or ran late)
CATCH_UPS = ("none", "latest", "all")
#: catch_up = "none": a slot seen later than this after its time is skipped
ON_TIME_S = 60
#: catch_up_limit: at most this many missed slots fire at once under catch_up = "all"
CATCH_UP_LIMIT_RANGE = (1, 1000)
#: every: from one second to a year
EVERY_RANGE = (1, 366 * 86_400)
_EVERY = re.compile(r"\s*(\d+)\s*(s|m|h|d)\s*")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
SCHEDULE_KEYS: tuple[str, ...] = ("cron", "every", "timezone", "payload", "group", "catch_up")
SCHEDULE_KEYS += ("catch_up_limit", "slot_column")


class ScheduleError(ValueError):
    """A schedule that cannot run: ``key`` is the schedule's key at fault, ``fix`` how to mend it."""

    def __init__(self, key: str, problem: str, fix: str) -> None:
        self.key, self.problem, self.fix = key, problem, fix
        super().__init__(f"{key}: {problem}; fix: {fix}")


@dataclass(frozen=True)
class Schedule:
    """One schedule of a queue, as declared under ``[queues.Q.schedules.NAME]``."""

    name: str
    #: a cron expression (5 fields, or 6 with seconds first), or None with ``every_s``
    cron: str | None
    every_s: int | None
    timezone: str
    #: the message each slot enqueues (any JSON value)
    payload: Any
    group: str | None = None
    catch_up: str = "latest"
    catch_up_limit: int = 10
    #: an other column that gets the slot's time (ISO-8601 UTC text) in each message
    slot_column: str | None = None

    def as_header(self) -> dict[str, Any]:
        """What the rendered file's header keeps of it (defaults written out)."""
        out: dict[str, Any] = {"cron": self.cron} if self.cron else {"every_s": self.every_s}
        out |= {"timezone": self.timezone, "payload": self.payload}
        if self.group is not None:
            out["group"] = self.group
        out |= {"catch_up": self.catch_up, "catch_up_limit": self.catch_up_limit}
        if self.slot_column is not None:
            out["slot_column"] = self.slot_column
        return out

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    def slots_after(self, start: int) -> Iterator[int]:
        """The slots after ``start`` (epoch seconds), in order."""
        if self.every_s is not None:
            step = self.every_s
            slot = (start // step + 1) * step
            while True:
                yield slot
                slot += step
        from cronsim import CronSim

        after = start
        it = CronSim(self.cron or "", datetime.fromtimestamp(start, self.zone))
        while True:
            try:
                at = next(it)
            except StopIteration:  # no match within cronsim's search horizon (50 years)
                return
            slot = int(at.timestamp())
            # cronsim may yield an instant at or before the start in the repeated hour of an
            # autumn change (it avoids running a job twice by local time): slots only rise
            if slot > after:
                after = slot
                yield slot

    def next_slot(self, now: float) -> int | None:
        """The first slot after ``now``."""
        return next(self.slots_after(math.floor(now)), None)


@dataclass(frozen=True)
class Plan:
    """What one look at a schedule decides: the slots to fire (oldest first) and the new
    horizon (every slot up to it is decided), or nothing to do (``horizon`` None)."""

    fire: tuple[int, ...] = ()
    horizon: int | None = None
    #: missed slots the policy skipped (at least this many; exact up to a bound)
    skipped: int = 0


def due(schedule: Schedule, horizon: int, now: float, keep: int) -> tuple[list[int], bool]:
    """The last ``keep`` slots in (horizon, now], oldest first, and whether there were more.

    The work is bounded by the slots of a window that grows from the end back to the
    horizon until it holds ``keep`` of them, so a long outage costs no more than a short one.
    """
    end = math.floor(now)
    window = 64 * (schedule.every_s or 1)
    while True:
        start = max(horizon, end - window)
        found: deque[int] = deque(maxlen=keep + 1)
        for slot in schedule.slots_after(start):
            if slot > end:
                break
            found.append(slot)
        if len(found) > keep or start == horizon:
            more = len(found) > keep or (start > horizon)
            slots = list(found)[-keep:]
            return slots, more
        window *= 4


def plan(schedule: Schedule, horizon: int, now: float) -> Plan:
    """Which slots fire now, by the catch-up policy, when every slot up to ``horizon`` is
    decided and the database's clock reads ``now``.

    - ``latest``: the most recent due slot fires (one message, however long the outage);
    - ``none``: it fires only if it is at most ON_TIME_S seconds late, else it is skipped;
    - ``all``: every missed slot fires, the most recent ``catch_up_limit`` of them.
    """
    keep = schedule.catch_up_limit if schedule.catch_up == "all" else 1
    slots, more = due(schedule, horizon, now, keep)
    if not slots:
        return Plan()
    latest = slots[-1]
    if schedule.catch_up == "none" and now - latest > ON_TIME_S:
        return Plan(fire=(), horizon=latest, skipped=len(slots) + int(more))
    return Plan(fire=tuple(slots), horizon=latest, skipped=int(more))


def slot_text(slot: int) -> str:
    """A slot as ISO-8601 UTC text: ``2025-03-30T01:00:00Z``."""
    return datetime.fromtimestamp(slot, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def every_seconds(value: Any) -> int:
    """``every`` as whole seconds: ``"10s"``, ``"5m"``, ``"1h"``, ``"1d"``, or a number of seconds."""
    if isinstance(value, bool):
        raise ValueError(value)
    if isinstance(value, int):
        seconds = value
    elif isinstance(value, str) and (m := _EVERY.fullmatch(value)):
        seconds = int(m.group(1)) * _UNIT_S[m.group(2)]
    else:
        raise ValueError(value)
    low, high = EVERY_RANGE
    if not low <= seconds <= high:
        raise ValueError(value)
    return seconds


def parse_schedule(name: str, raw: Mapping[str, Any], from_header: bool = False) -> Schedule:
    """Check one schedule's settings (a qgen.toml table, or a rendered file's header entry);
    raises ScheduleError naming the key. Checking a declaration's cron expression needs
    ``cronsim``; a rendered file's was checked by render (its seal keeps it so)."""
    unknown = [k for k in raw if k not in (*SCHEDULE_KEYS, "every_s")]
    if unknown or (not from_header and "every_s" in raw):
        bad = (unknown or ["every_s"])[0]
        raise ScheduleError(bad, "unknown key", f"the keys here are: {', '.join(SCHEDULE_KEYS)}")
    every_raw = raw.get("every_s" if from_header else "every")
    cron = raw.get("cron")
    if (cron is None) == (every_raw is None):
        raise ScheduleError(
            "cron",
            "give exactly one of cron or every",
            'write cron = "0 3 * * *" (or six fields, seconds first), or every = "10s"',
        )
    every_s = None
    if every_raw is not None:
        try:
            every_s = every_seconds(every_raw)
        except ValueError:
            raise ScheduleError(
                "every",
                f"{every_raw!r} is not an interval",
                'write every = "10s", "5m", "1h" or "1d" (1 second to 366 days)',
            ) from None
    timezone = raw.get("timezone", "UTC")
    zone = _zone(timezone)
    if cron is not None and not from_header:  # a sealed file holds what render checked
        _check_cron(cron, zone)
    elif cron is not None and (not isinstance(cron, str) or len(cron.split()) not in (5, 6)):
        raise ScheduleError("cron", f"{cron!r} is not a cron expression", "render again")
    if "payload" not in raw:
        raise ScheduleError("payload", "missing", 'write payload = { kind = "nightly" }')
    catch_up = raw.get("catch_up", "latest")
    if catch_up not in CATCH_UPS:
        raise ScheduleError(
            "catch_up", f"unknown policy {catch_up!r}", f"use one of {', '.join(CATCH_UPS)}"
        )
    limit = raw.get("catch_up_limit", 10)
    low, high = CATCH_UP_LIMIT_RANGE
    if isinstance(limit, bool) or not isinstance(limit, int) or not low <= limit <= high:
        raise ScheduleError(
            "catch_up_limit",
            f"{limit!r} is not a whole number from {low} to {high}",
            "write catch_up_limit = 10",
        )
    if "catch_up_limit" in raw and catch_up != "all" and not from_header:
        raise ScheduleError(
            "catch_up_limit",
            f'catch_up_limit applies to catch_up = "all", not {catch_up!r}',
            'remove catch_up_limit, or write catch_up = "all"',
        )
    group, slot_column = raw.get("group"), raw.get("slot_column")
    for key, value in (("group", group), ("slot_column", slot_column)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise ScheduleError(key, f"{value!r} is not a name", f'write {key} = "…"')
    return Schedule(
        name=name,
        cron=cron,
        every_s=every_s,
        timezone=timezone,
        payload=raw["payload"],
        group=group,
        catch_up=catch_up,
        catch_up_limit=limit,
        slot_column=slot_column,
    )


def _zone(name: Any) -> ZoneInfo:
    try:
        if not isinstance(name, str) or not name or name != name.strip():
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            "timezone",
            f"unknown time zone {name!r}",
            'use an IANA name such as "UTC" or "Europe/Paris" (the tzdata package supplies '
            "them where the system has none)",
        ) from None


def _check_cron(cron: Any, zone: ZoneInfo) -> None:
    try:
        from cronsim import CronSim, CronSimError
    except ImportError:
        raise ScheduleError(
            "cron",
            "cron expressions need the cronsim package",
            "pip install 'qgen-sql[schedules]'",
        ) from None
    fix = (
        'write five fields (minute hour day month weekday, e.g. "0 3 * * *") or six with '
        'seconds first (e.g. "*/10 * * * * *")'
    )
    if not isinstance(cron, str) or not cron.strip() or not cron.isprintable():
        raise ScheduleError("cron", f"{cron!r} is not a cron expression", fix)
    if len(cron.split()) not in (5, 6):
        raise ScheduleError("cron", f"{cron!r} has {len(cron.split())} fields", fix)
    try:
        it = CronSim(cron, datetime.now(zone))
    except CronSimError as exc:
        raise ScheduleError("cron", f"{cron!r} is not a cron expression ({exc})", fix) from None
    try:
        next(it)
    except StopIteration:
        raise ScheduleError(
            "cron", f"{cron!r} matches no time in the next 50 years", "check its day and month"
        ) from None
