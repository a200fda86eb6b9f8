"""What one drain() or run() did: the outcomes it settled, and the consumer's own counters."""

from __future__ import annotations

#: counters of the consumer's own work, not outcomes of a handler
OPERATIONS = frozenset(
    {
        "extended",  # a lease moved forward while its handler ran
        "released",  # a claimed row given back (at stop, or after a lost connection)
        "lease_lost",  # a delivery whose lease another claim took
        "connection_lost",  # a batch whose connection went away
        "failed_batches",  # a batch the database refused (deadlock, lock wait timeout, …)
        "unknown_custom",  # custom(name) for an event the file does not declare (a retry)
        "undecodable",  # a stored payload the decoder refused (to the dead letter)
    }
)


class Counts(dict[str, int]):
    """Counts by name: outcomes (``ack``, ``drop``, ``retry``, ``retry_after``, ``dead_letter``,
    ``custom.<name>``) and operations (``OPERATIONS``), each also apart:
    ``counts.outcomes``, ``counts.operations``.

    ``counts = await consumer.drain(); counts["ack"], counts.outcomes``
    """

    def add(self, name: str, n: int = 1) -> None:
        self[name] = self.get(name, 0) + n

    @property
    def outcomes(self) -> dict[str, int]:
        """How the deliveries settled, by outcome label."""
        return {k: v for k, v in self.items() if k not in OPERATIONS}

    @property
    def operations(self) -> dict[str, int]:
        """The consumer's own counters: extended, released, lease_lost, …"""
        return {k: v for k, v in self.items() if k in OPERATIONS}
