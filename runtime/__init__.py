"""qgen's runtime: load a rendered file, connect, enqueue, and consume with exact settlements.

It runs only the SQL in the rendered files (plus the driver's transaction control) and
imports neither Jinja2 nor sqlglot.
"""

from __future__ import annotations

#: the distribution this `runtime` comes from (another one ships a top-level `runtime` too)
__distribution__ = "qgen-sql"

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.apply import SchemaDiffers, SchemaObject, apply, apply_sync
    from runtime.connect import connect
    from runtime.consumer import Consumer
    from runtime.contract.errors import (
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
    from runtime.counts import Counts
    from runtime.delivery import Ctx, Message
    from runtime.loading import load
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
    from runtime.payloads import Decoder as Decoder
    from runtime.payloads import Encoder as Encoder
    from runtime.queue import Enqueued, Queue
    from runtime.status import Status

# `import runtime` loads nothing else: each public name is imported on first use (PEP 562), so
# the generator (`qgen render`), which needs only the file format and the dialect table, never
# loads the consumer, the drivers or the forms.
_LAZY: dict[str, str] = {
    "SchemaDiffers": "runtime.apply",
    "SchemaObject": "runtime.apply",
    "apply": "runtime.apply",
    "apply_sync": "runtime.apply",
    "connect": "runtime.connect",
    "Consumer": "runtime.consumer",
    "Counts": "runtime.counts",
    "Ctx": "runtime.delivery",
    "Message": "runtime.delivery",
    "BrokerError": "runtime.contract.errors",
    "ConfigurationError": "runtime.contract.errors",
    "ConnectionLost": "runtime.contract.errors",
    "DatabaseError": "runtime.contract.errors",
    "DialectMismatch": "runtime.contract.errors",
    "InvalidArgument": "runtime.contract.errors",
    "LeaseLost": "runtime.contract.errors",
    "PayloadError": "runtime.contract.errors",
    "RedriveRefused": "runtime.contract.errors",
    "RenderedFileError": "runtime.contract.errors",
    "ServerTooOld": "runtime.contract.errors",
    "UnknownCustomEvent": "runtime.contract.errors",
    "load": "runtime.loading",
    "Metrics": "runtime.metrics",
    "LAST_ERROR_MAX": "runtime.outcomes",
    "MAX_DELAY_S": "runtime.outcomes",
    "ExponentialBackoff": "runtime.outcomes",
    "Immediate": "runtime.outcomes",
    "Outcome": "runtime.outcomes",
    "OutcomeKind": "runtime.outcomes",
    "RetryPolicy": "runtime.outcomes",
    "ack": "runtime.outcomes",
    "custom": "runtime.outcomes",
    "drop": "runtime.outcomes",
    "retry": "runtime.outcomes",
    "retry_after": "runtime.outcomes",
    "Decoder": "runtime.payloads",
    "Encoder": "runtime.payloads",
    "Enqueued": "runtime.queue",
    "Queue": "runtime.queue",
    "Status": "runtime.status",
    "read_rendered": "runtime.contract.rendered",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


class _Package(types.ModuleType):
    """`runtime.connect` and `runtime.apply` name both a function and the module that defines
    it. Importing such a module makes Python set the package's attribute to the module; this
    keeps the function there, as the eager imports used to."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == value.__name__:
            self.__dict__[name] = getattr(value, name)
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package


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
