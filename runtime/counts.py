"""What one drain() or run() did: the outcomes it settled, and the consumer's own counters."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from runtime.metrics import Metrics, call, fields

if TYPE_CHECKING:
    from runtime.delivery import Decision, Delivery

log = logging.getLogger("runtime")
#: the operations a Metrics hook hears about
_HOOKS = {
    "extended": "on_lease_extended",
    "lease_lost": "on_lease_lost",
    "conflicts": "on_conflict",
}

#: counters of the consumer's own work, not outcomes of a handler
OPERATIONS = frozenset(
    {
        "extended",  # a lease moved forward while its handler ran
        "released",  # a claimed row given back (at stop, or after a lost connection)
        # a settlement lost with its connection (lease), run again on the next one
        "resettled",
        "lease_lost",  # a delivery whose lease another claim took
        "connection_lost",  # a batch whose connection went away
        "failed_batches",  # a batch the database refused (lock wait timeout, …)
        # a claim, settlement or batch rolled back by a conflicting transaction (deadlock,
        # Galera certification, serialization failure): a race, retried
        "conflicts",
        "unknown_custom",  # custom(name) for an event the file does not declare (a retry)
        "undecodable",  # a stored payload the decoder refused (to the dead letter)
        "unsettled",  # delivered past max_attempts, never settled (to the dead letter)
        "unstorable_result",  # ack(result=…) whose result cannot be stored (a retry)
    }
)


class Counts(dict[str, int]):
    """Counts by name: outcomes (``ack``, ``drop``, ``retry``, ``retry_after``, ``dead_letter``,
    ``custom.<name>``) and operations (``OPERATIONS``), each also apart:
    ``counts.outcomes``, ``counts.operations``.

    ``counts = await consumer.drain(); counts["ack"], counts.outcomes``
    """

    #: the consumer's hooks (runtime.Metrics), and its queue's name for the log
    metrics: Metrics | None = None
    queue: str = ""

    def add(self, name: str, n: int = 1) -> None:
        self[name] = self.get(name, 0) + n
        if self.metrics is not None and name in _HOOKS:
            for _ in range(n):
                call(self.metrics, _HOOKS[name])

    def settled(self, label: str, d: Delivery) -> None:
        """A delivery settled by ``label``: counted, logged at DEBUG with its fields, and
        handed to the on_outcome hook."""
        self.add(label)
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "queue %s: message %s settled: %s",
                self.queue,
                d.message.id,
                label,
                extra=fields(self.queue, d.message.id, d.attempt, label, d.handler_s),
            )
        if self.metrics is not None:
            call(self.metrics, "on_outcome", label, d.handler_s)

    def settled_all(self, settled: Sequence[tuple[Delivery, Decision]]) -> None:
        """``settled(decision.label, d)`` for each pair: a group's settlements, as the group
        holds them, counted by label in one pass when there is no hook to call, no DEBUG line
        to write and no subclass that records each settlement (``runtime.testing``)."""
        one_by_one = type(self).settled is not Counts.settled or self.metrics is not None
        if one_by_one or log.isEnabledFor(logging.DEBUG):
            for d, decision in settled:
                self.settled(decision.label, d)
            return
        # a group's items mostly share one Decision: counted by runs of the same one (an
        # outcome's label is never one of the _HOOKS operations)
        run: Decision | None = None
        n = 0
        for _, decision in settled:
            if decision is run:
                n += 1
                continue
            if run is not None:
                self[run.label] = self.get(run.label, 0) + n
            run, n = decision, 1
        if run is not None:
            self[run.label] = self.get(run.label, 0) + n

    @property
    def outcomes(self) -> dict[str, int]:
        """How the deliveries settled, by outcome label."""
        return {k: v for k, v in self.items() if k not in OPERATIONS}

    @property
    def operations(self) -> dict[str, int]:
        """The consumer's own counters: extended, released, lease_lost, …"""
        return {k: v for k, v in self.items() if k in OPERATIONS}
