"""Reconnecting after the database went away: the backoff every reconnecting place uses, and the
one record of an outage a consumer keeps (so it logs one line when the database goes and one
when it is back, not one per attempt)."""

from __future__ import annotations

import logging
import random
import time

from runtime.contract.errors import InvalidArgument

log = logging.getLogger("runtime")


class Backoff:
    """Delays between attempts: the first at once, then ``first`` doubling up to ``cap``.

    Each delay but the first is drawn between half and all of the current step ("equal
    jitter"), so consumers that lost the database together do not all knock at the same
    instant when it returns. ``reset()`` once an attempt did its work.
    """

    def __init__(self, first: float, cap: float, rng: random.Random | None = None) -> None:
        if first <= 0 or cap < first:
            raise InvalidArgument(f"backoff needs 0 < first <= cap (got first={first}, cap={cap})")
        self.first = first
        self.cap = cap
        self._step = 0.0
        self._rng = rng or random.Random()

    def next(self) -> float:
        """The delay before the next attempt: 0 after a reset, then growing."""
        step = self._step
        self._step = min(step * 2, self.cap) if step else self.first
        return step / 2 + self._rng.random() * step / 2

    def reset(self) -> None:
        """The last attempt worked: the next one is at once, the ones after start again."""
        self._step = 0.0


class Outage:
    """Whether a consumer is without its database, since when, and the two log lines.

    Every worker and the lease extender report here: ``failed()`` when a connection attempt
    failed (the first one opens the outage and logs it), ``back()`` when one succeeded (the
    first one after an outage logs how long it lasted and closes it).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.since: float | None = None  # time.monotonic() of the loss, None while connected
        self.attempts = 0

    def failed(self, exc: BaseException, lost_at: float | None = None) -> None:
        """A connection attempt failed; ``lost_at`` is when the connection it replaces died."""
        self.attempts += 1
        if self.since is None:
            self.since = lost_at if lost_at is not None else time.monotonic()
            log.warning(
                "queue %s: lost the database (%s); reconnecting with backoff", self.name, exc
            )
        else:
            log.debug("queue %s: still no database (%s)", self.name, exc)

    def back(self) -> None:
        """A connection attempt succeeded."""
        if self.since is None:
            return
        gone = time.monotonic() - self.since
        log.warning(
            "queue %s: the database is back after %.1f s (%d failed connection attempts)",
            self.name,
            gone,
            self.attempts,
        )
        self.since = None
        self.attempts = 0

    def elapsed(self) -> float:
        """Seconds without the database so far (0 while connected)."""
        return 0.0 if self.since is None else time.monotonic() - self.since
