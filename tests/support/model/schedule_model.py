"""Schedule slots in plain Python: which slot messages a queue holds, and what its schedule
table says, after every look of any number of schedulers (docs/howto/schedules.md).

No database, no runtime and no cron library here: the schedules the model knows fire every
``every_s`` seconds, their slots being the multiples of it since the epoch (a cron
expression with a seconds field such as ``*/3 * * * * *`` in UTC has the same slots, which
the stateful test uses to drive the cron path too). The rules:

* A schedule's state row is made the first time any scheduler (or a pause, or a resume)
  looks at its queue: every schedule of the queue gets ``horizon`` = the clock's second
  then, no last slot, not paused. No slot at or before the horizon ever fires.
* A look at the clock ``now`` (seconds, fractional) decides the slots in (horizon,
  floor(now)], each exactly once, by the schedule's catch-up policy:

  - ``latest``: the most recent of them fires;
  - ``all``: the most recent ``catch_up_limit`` of them fire, oldest first;
  - ``none``: the most recent fires if it is at most ON_TIME_S seconds old, else none.

  The horizon moves to the most recent (decided, fired or not); ``last_slot`` is the last
  slot that fired (kept when none did). Nothing due: nothing changes.
* However many schedulers look at once, at the same clock, the outcome is one look's: one
  of them moves the row and enqueues, the others find the horizon moved and do nothing.
* A scheduler acting on a state it read earlier (a stale one) acts only if the row still
  holds the horizon it read and the row is not paused (and it read it as not paused);
  it then decides from that horizon, at its clock.
* A paused schedule fires nothing. Resuming moves the horizon up to floor(now): the slots
  it was paused through never fire. Pausing (or resuming) twice changes nothing more.
* Every fired slot is one message in the queue with the schedule's payload and the slot's
  time in the slot column.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

#: catch_up = "none": a slot seen later than this after its time is skipped
ON_TIME_S = 60


@dataclass(frozen=True)
class Spec:
    """One schedule as declared, reduced to what its slots depend on."""

    name: str
    every_s: int
    catch_up: str = "latest"
    catch_up_limit: int = 10


@dataclass
class State:
    """One row of the schedule table."""

    horizon: int
    last_slot: int | None = None
    paused: bool = False


@dataclass
class ScheduleModel:
    """A queue's schedules: their state rows and the slot messages enqueued so far."""

    specs: tuple[Spec, ...]
    states: dict[str, State] = field(default_factory=dict)
    #: (schedule, slot) of every message enqueued, in the order they were enqueued
    fired: list[tuple[str, int]] = field(default_factory=list)

    def spec(self, name: str) -> Spec:
        return next(s for s in self.specs if s.name == name)

    def _start(self, now: float) -> None:
        for s in self.specs:
            if s.name not in self.states:
                self.states[s.name] = State(horizon=math.floor(now))

    def decide(self, spec: Spec, horizon: int, now: float) -> tuple[list[int], int | None]:
        """The slots that fire, and the new horizon (None: nothing due)."""
        step = spec.every_s
        due = list(range((horizon // step + 1) * step, math.floor(now) + 1, step))
        if not due:
            return [], None
        latest = due[-1]
        if spec.catch_up == "latest":
            return [latest], latest
        if spec.catch_up == "all":
            return due[-spec.catch_up_limit :], latest
        assert spec.catch_up == "none", spec
        return ([latest] if now - latest <= ON_TIME_S else []), latest

    def _act(self, spec: Spec, state: State, seen: State, now: float) -> list[int]:
        slots, horizon = self.decide(spec, seen.horizon, now)
        if horizon is None:
            return []
        state.horizon = horizon
        state.last_slot = slots[-1] if slots else seen.last_slot
        self.fired += [(spec.name, slot) for slot in slots]
        return slots

    def tick(self, now: float) -> dict[str, list[int]]:
        """Any number of schedulers look at the clock ``now`` together: the slots fired."""
        self._start(now)
        out = {}
        for spec in self.specs:
            state = self.states[spec.name]
            out[spec.name] = [] if state.paused else self._act(spec, state, state, now)
        return out

    def read(self, name: str) -> State | None:
        """What a scheduler reads of a schedule's row now (for a later, stale, fire)."""
        state = self.states.get(name)
        return copy.copy(state) if state is not None else None

    def fire_stale(self, name: str, seen: State, now: float) -> list[int]:
        """A scheduler fires from the row as it read it earlier, at the clock ``now``."""
        state = self.states[name]
        if seen.paused or state.paused or state.horizon != seen.horizon:
            return []
        return self._act(self.spec(name), state, seen, now)

    def pause(self, name: str, now: float) -> bool:
        self._start(now)
        state = self.states[name]
        was, state.paused = state.paused, True
        return not was

    def resume(self, name: str, now: float) -> bool:
        self._start(now)
        state = self.states[name]
        was, state.paused = state.paused, False
        state.horizon = max(state.horizon, math.floor(now))
        return was
