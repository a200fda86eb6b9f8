"""What a handler returns: ack, drop, retry, retry_after(delay) or custom(name)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta


@dataclass(frozen=True)
class Outcome:
    """A handler's verdict on one delivery; build it with the functions below."""

    kind: str  # "ack" | "drop" | "retry" | "retry_after" | "custom"
    delay_s: float | None = None
    name: str | None = None

    @property
    def label(self) -> str:
        return f"custom.{self.name}" if self.kind == "custom" else self.kind


# an Outcome is immutable: the three without arguments are made once
_ACK, _DROP, _RETRY = Outcome("ack"), Outcome("drop"), Outcome("retry")


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
    """Deliver again after a delay kept in the row: ``return runtime.retry_after(30)``."""
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    # the database adds this to its own clock; milliseconds are what every engine keeps
    return Outcome("retry_after", delay_s=round(min(max(seconds, 0.0), 1e9), 3))


def custom(name: str) -> Outcome:
    """Run the queue's own declared event instead: ``return runtime.custom("park")``."""
    return Outcome("custom", name=name)
