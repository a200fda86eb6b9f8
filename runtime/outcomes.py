"""What a handler returns: ack, drop, retry, retry_after(delay) or custom(name)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum

from runtime.errors import InvalidArgument

#: the longest delay retry_after() and enqueue(delay=) accept: one year, in seconds
MAX_DELAY_S = 365 * 24 * 3600.0


def delay_seconds(
    delay: float | timedelta, what: str = "delay", maximum: float | None = MAX_DELAY_S
) -> float:
    """A delay as the seconds the database adds to its own clock, in milliseconds (what every
    engine keeps); ValueError for NaN, an infinity, a negative delay or one past ``maximum``.

    ``delay_seconds(timedelta(minutes=1))`` → ``60.0``
    """
    try:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    except (TypeError, ValueError):
        raise InvalidArgument(
            f"{what} must be a number of seconds or a timedelta, not {delay!r}"
        ) from None
    if math.isnan(seconds) or seconds < 0 or (maximum is not None and seconds > maximum):
        limit = "" if maximum is None else f" up to {maximum:g} s (runtime.MAX_DELAY_S)"
        raise InvalidArgument(f"{what} must be from 0{limit}, not {delay!r}")
    if math.isinf(seconds):
        raise InvalidArgument(f"{what} must be finite, not {delay!r}")
    return round(seconds, 3)


class OutcomeKind(StrEnum):
    """What a handler decided about its delivery."""

    ACK = "ack"
    DROP = "drop"
    RETRY = "retry"
    RETRY_AFTER = "retry_after"
    CUSTOM = "custom"


@dataclass(frozen=True)
class Outcome:
    """A handler's verdict on one delivery; build it with the functions below."""

    kind: OutcomeKind
    delay_s: float | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        return f"custom.{self.name}" if self.kind is OutcomeKind.CUSTOM else str(self.kind)


# an Outcome is immutable: the three without arguments are made once
_ACK, _DROP, _RETRY = (
    Outcome(OutcomeKind.ACK),
    Outcome(OutcomeKind.DROP),
    Outcome(OutcomeKind.RETRY),
)


def ack() -> Outcome:
    """The message is handled: ``return runtime.ack()``."""
    return _ACK


def drop() -> Outcome:
    """A poison message: it leaves the queue exactly as an ack would. ``return runtime.drop()``."""
    return _DROP


def retry() -> Outcome:
    """Deliver again at once (or move to the dead letter at the cap): ``return runtime.retry()``."""
    return _RETRY


def retry_after(delay: float | timedelta) -> Outcome:
    """Deliver again after a delay kept in the row: ``return runtime.retry_after(30)``.

    ValueError at the call for NaN, an infinity, a negative delay or one past MAX_DELAY_S."""
    return Outcome(OutcomeKind.RETRY_AFTER, delay_s=delay_seconds(delay, "retry_after's delay"))


def custom(name: str) -> Outcome:
    """Run the queue's own declared event instead: ``return runtime.custom("park")``."""
    return Outcome(OutcomeKind.CUSTOM, name=name)
