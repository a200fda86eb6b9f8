"""The consumer's metrics hooks as OpenTelemetry instruments (the ``otel`` extra).

``import runtime`` never imports OpenTelemetry; this module does, when a service uses it::

    from runtime.otel import OpenTelemetryMetrics
    consumer = runtime.Consumer(url, queue, handle, metrics=OpenTelemetryMetrics("orders"))

The instruments come from the meter given, or from the global MeterProvider's meter
``qgen.runtime``; each measurement carries the attribute ``queue``:

* ``qgen.messages.claimed`` (counter, {message}): rows claimed
* ``qgen.messages.settled`` (counter, {message}; attribute ``outcome``: ack, drop, retry,
  retry_after, dead_letter, custom.<name>): settled deliveries
* ``qgen.handler.duration`` (histogram, s; attribute ``outcome``): the handler's run time
* ``qgen.lease.extended``, ``qgen.lease.lost``, ``qgen.reconnects``, ``qgen.conflicts``
  (counters)
"""

from __future__ import annotations

import importlib
from typing import Any

from runtime.contract.errors import ConfigurationError
from runtime.metrics import Metrics

__all__ = ["OpenTelemetryMetrics"]


def _otel_metrics() -> Any:
    try:
        return importlib.import_module("opentelemetry.metrics")
    except ImportError:
        raise ConfigurationError(
            "OpenTelemetryMetrics needs opentelemetry-api; install with: "
            "pip install 'qgen-sql[otel]'"
        ) from None


class OpenTelemetryMetrics(Metrics):
    """``runtime.Metrics`` recorded on OpenTelemetry counters and a histogram, per queue.

    ``OpenTelemetryMetrics("orders", meter=provider.get_meter("svc"))``; one per consumer.
    """

    def __init__(self, queue: str, meter: Any = None) -> None:
        if meter is None:
            meter = _otel_metrics().get_meter("qgen.runtime")
        self.attributes = {"queue": queue}
        self._by_outcome: dict[str, dict[str, str]] = {}
        self.claimed = meter.create_counter(
            "qgen.messages.claimed", unit="{message}", description="Rows claimed"
        )
        self.settled = meter.create_counter(
            "qgen.messages.settled", unit="{message}", description="Deliveries settled"
        )
        self.duration = meter.create_histogram(
            "qgen.handler.duration", unit="s", description="The handler's run time"
        )
        self.extended = meter.create_counter(
            "qgen.lease.extended", description="Leases moved forward"
        )
        self.lost = meter.create_counter(
            "qgen.lease.lost", description="Leases taken by another claim"
        )
        self.reconnects = meter.create_counter(
            "qgen.reconnects", description="Lost worker connections replaced"
        )
        self.conflicts = meter.create_counter(
            "qgen.conflicts",
            description="Claims and settlements a conflicting transaction rolled back (retried)",
        )

    def _outcome(self, label: str) -> dict[str, str]:
        attrs = self._by_outcome.get(label)
        if attrs is None:
            attrs = self._by_outcome[label] = {**self.attributes, "outcome": label}
        return attrs

    def on_claim(self, n: int) -> None:
        self.claimed.add(n, self.attributes)

    def on_outcome(self, label: str, duration_s: float | None) -> None:
        attrs = self._outcome(label)
        self.settled.add(1, attrs)
        if duration_s is not None:
            self.duration.record(duration_s, attrs)

    def on_lease_extended(self) -> None:
        self.extended.add(1, self.attributes)

    def on_lease_lost(self) -> None:
        self.lost.add(1, self.attributes)

    def on_reconnect(self) -> None:
        self.reconnects.add(1, self.attributes)

    def on_conflict(self) -> None:
        self.conflicts.add(1, self.attributes)
