"""qgen's runtime: load a rendered file, connect, enqueue, and consume with exact settlements.

It runs only the SQL in the rendered files (plus the driver's transaction control) and
imports neither Jinja2 nor sqlglot.
"""

from __future__ import annotations

#: the distribution this `runtime` comes from (another one ships a top-level `runtime` too)
__distribution__ = "qgen-sql"

from pathlib import Path

from runtime.apply import SchemaDiffers, SchemaObject, apply, apply_sync
from runtime.connect import connect
from runtime.consumer import Consumer
from runtime.counts import Counts
from runtime.delivery import Ctx, Message
from runtime.errors import (
    BrokerError,
    ConfigurationError,
    ConnectionLost,
    DatabaseError,
    DialectMismatch,
    InvalidArgument,
    LeaseLost,
    PayloadError,
    RedriveRefused,
    RenderedFileError,
    ServerTooOld,
    UnknownCustomEvent,
)
from runtime.metrics import Metrics
from runtime.outcomes import (
    LAST_ERROR_MAX,
    MAX_DELAY_S,
    ExponentialBackoff,
    Immediate,
    Outcome,
    OutcomeKind,
    RetryPolicy,
    ack,
    custom,
    drop,
    retry,
    retry_after,
)
from runtime.payloads import Decoder, Encoder
from runtime.queue import Enqueued, Queue
from runtime.rendered import read_rendered
from runtime.status import Status


def load(path: str | Path, encoder: Encoder | None = None, decoder: Decoder | None = None) -> Queue:
    """Load a rendered file: ``queue = runtime.load("sql/postgres/orders.sql")``.

    An outbox file gives an Outbox (``put``, ``relay``) instead of a Queue. Payloads are JSON
    values; ``encoder`` turns any other value into one (called for each value JSON cannot
    carry, e.g. ``lambda v: {"$dt": v.isoformat()}``) and ``decoder`` is called with every
    decoded JSON object (dict) and returns what stands for it, on enqueue and delivery alike.
    """
    rendered = read_rendered(path)
    if rendered.header.kind == "outbox":
        from runtime.outbox import Outbox

        # load() is typed as returning a Queue (its public signature, what most callers load)
        return Outbox(rendered, encoder=encoder, decoder=decoder)  # type: ignore[return-value]
    return Queue(rendered, encoder=encoder, decoder=decoder)


__all__ = [
    "LAST_ERROR_MAX",
    "MAX_DELAY_S",
    "BrokerError",
    "ConfigurationError",
    "ConnectionLost",
    "Consumer",
    "Counts",
    "Ctx",
    "DatabaseError",
    "DialectMismatch",
    "Enqueued",
    "ExponentialBackoff",
    "Immediate",
    "InvalidArgument",
    "LeaseLost",
    "Message",
    "Metrics",
    "Outcome",
    "OutcomeKind",
    "PayloadError",
    "Queue",
    "RedriveRefused",
    "RenderedFileError",
    "RetryPolicy",
    "SchemaDiffers",
    "SchemaObject",
    "ServerTooOld",
    "Status",
    "UnknownCustomEvent",
    "ack",
    "apply",
    "apply_sync",
    "connect",
    "custom",
    "drop",
    "load",
    "retry",
    "retry_after",
]
