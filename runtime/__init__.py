"""qgen's runtime: load a rendered file, connect, enqueue, and consume with exact settlements.

It runs only the SQL in the rendered files (plus the driver's transaction control) and
imports neither Jinja2 nor sqlglot.
"""

from __future__ import annotations

from pathlib import Path

from runtime.connect import connect
from runtime.consumer import Consumer
from runtime.delivery import Ctx, Message
from runtime.errors import (
    BrokerError,
    ConfigurationError,
    ConnectionLost,
    DialectMismatch,
    LeaseLost,
    RenderedFileError,
    ServerTooOld,
    UnknownCustomEvent,
)
from runtime.outcomes import Outcome, ack, custom, drop, retry, retry_after
from runtime.queue import Queue
from runtime.rendered import read_rendered


def load(path: str | Path) -> Queue:
    """Load a rendered file: ``queue = runtime.load("sql/postgres/orders.sql")``.

    An outbox file gives an Outbox (``put``, ``relay``) instead of a Queue.
    """
    rendered = read_rendered(path)
    if rendered.header.kind == "outbox":
        from runtime.outbox import Outbox

        return Outbox(rendered)  # type: ignore[return-value]
    return Queue(rendered)


__all__ = [
    "BrokerError",
    "ConfigurationError",
    "ConnectionLost",
    "Consumer",
    "Ctx",
    "DialectMismatch",
    "LeaseLost",
    "Message",
    "Outcome",
    "Queue",
    "RenderedFileError",
    "ServerTooOld",
    "UnknownCustomEvent",
    "ack",
    "connect",
    "custom",
    "drop",
    "load",
    "retry",
    "retry_after",
]
