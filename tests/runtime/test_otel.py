"""The OpenTelemetry adapter of the consumer's metrics hooks (the ``otel`` extra), read back
through the SDK's in-memory metric reader."""

from __future__ import annotations

import subprocess
import sys

import pytest
from support.engines import run
from support.queues import make_queue

import runtime

sdk = pytest.importorskip(
    "opentelemetry.sdk.metrics",
    reason="opentelemetry-sdk is not installed (pip install -e '.[dev]' installs it)",
)
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402

from runtime.otel import OpenTelemetryMetrics  # noqa: E402


def _points(reader: InMemoryMetricReader) -> dict[str, list]:
    out: dict[str, list] = {}
    data = reader.get_metrics_data()
    for rm in data.resource_metrics if data else []:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                out[m.name] = list(m.data.data_points)
    return out


def test_consumer_outcomes_reach_opentelemetry_instruments(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=("attempt", "retry_after"))
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})

            async def handle(message, ctx):
                return runtime.drop() if message.payload["n"] == 3 else runtime.ack()

            reader = InMemoryMetricReader()
            meter = sdk.MeterProvider(metric_readers=[reader]).get_meter("test")
            hooks = OpenTelemetryMetrics("q", meter=meter)
            counts = await runtime.Consumer(qt.url, qt.queue, handle, metrics=hooks).drain()
            assert counts.outcomes == {"ack": 2, "drop": 1}
            return _points(reader)
        finally:
            await qt.drop()

    points = run(go())
    assert sum(p.value for p in points["qgen.messages.claimed"]) == 3
    assert all(p.attributes["queue"] == "q" for p in points["qgen.messages.claimed"])
    settled = {p.attributes["outcome"]: p.value for p in points["qgen.messages.settled"]}
    assert settled == {"ack": 2, "drop": 1}
    durations = {p.attributes["outcome"]: p.count for p in points["qgen.handler.duration"]}
    assert durations == {"ack": 2, "drop": 1}
    assert "qgen.lease.lost" not in points  # nothing was recorded on it


def test_the_lease_and_reconnect_hooks_count():
    reader = InMemoryMetricReader()
    hooks = OpenTelemetryMetrics(
        "q", meter=sdk.MeterProvider(metric_readers=[reader]).get_meter("t")
    )
    hooks.on_lease_extended()
    hooks.on_lease_extended()
    hooks.on_lease_lost()
    hooks.on_reconnect()
    hooks.on_outcome("retry", None)  # never ran: counted, no duration
    points = _points(reader)
    got = {k: sum(p.value for p in v) for k, v in points.items() if k != "qgen.handler.duration"}
    assert got == {
        "qgen.lease.extended": 2,
        "qgen.lease.lost": 1,
        "qgen.reconnects": 1,
        "qgen.messages.settled": 1,
    }
    assert "qgen.handler.duration" not in points


def test_import_runtime_does_not_import_opentelemetry():
    code = "import runtime, sys; print(any(m.startswith('opentelemetry') for m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
