"""Observability: the hooks a consumer calls, and the structured fields its log records carry.

``Consumer(..., metrics=hooks)`` calls ``hooks`` at each point below; without hooks the
consumer only checks ``metrics is None``. Subclass ``Metrics`` and override what you need
(the defaults do nothing); a hook that raises is logged and otherwise ignored.

Log records of the consumer's handler and settlement lines carry, through ``extra=``, the
fields ``queue``, ``message_id``, ``attempt``, ``outcome`` and ``duration_s`` (the handler's
run time in seconds) where they apply: a JSON formatter picks them from the record.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger("runtime")


class Metrics:
    """The consumer's hooks; every method is called on the consumer's event loop and must not
    block (hand the number to your metrics client and return).

    ``class Prom(runtime.Metrics): def on_outcome(self, label, duration_s): …``
    """

    def on_claim(self, n: int) -> None:
        """A claim took ``n`` rows (n >= 1)."""

    def on_outcome(self, label: str, duration_s: float | None) -> None:
        """A delivery settled: ``label`` is ack, drop, retry, retry_after, dead_letter or
        custom.<name>; ``duration_s`` the handler's run time (None if it never ran)."""

    def on_lease_extended(self) -> None:
        """A running handler's lease was moved forward."""

    def on_lease_lost(self) -> None:
        """A delivery's lease was taken by another claim: its settlement did not apply."""

    def on_reconnect(self) -> None:
        """A worker opened a new connection in place of one that was lost."""

    def on_conflict(self) -> None:
        """The database rolled back a claim, a settlement or a batch because another
        transaction conflicted with it (an InnoDB deadlock, a Galera certification conflict,
        a serialization failure): a race between consumers, retried, not an outage."""


def fields(
    queue: str,
    message_id: Any = None,
    attempt: int | None = None,
    outcome: str | None = None,
    duration_s: float | None = None,
) -> dict[str, Any]:
    """The ``extra=`` of a consumer log record: ``log.info(…, extra=fields("orders", 7))``."""
    return {
        "queue": queue,
        "message_id": message_id,
        "attempt": attempt,
        "outcome": outcome,
        "duration_s": duration_s,
    }


def call(metrics: Metrics, hook: str, *args: Any) -> None:
    """Call one hook; a hook that raises is logged, never the consumer's failure."""
    try:
        getattr(metrics, hook)(*args)
    except Exception:
        log.exception("metrics hook %s raised; ignored", hook)
