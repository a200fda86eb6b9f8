"""``runtime.load``: a rendered file read and loaded as a Queue, or an Outbox (the package
exports it; runtime modules import it from here, never from the package)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar, overload

from runtime.contract.rendered import read_rendered
from runtime.payloads import Decoder, Encoder
from runtime.queue import Queue

_M = TypeVar("_M")


@overload
def load(
    path: str | Path,
    encoder: Encoder | None = None,
    decoder: Decoder | None = None,
    *,
    payload: type[_M],
) -> Queue[_M]: ...


@overload
def load(
    path: str | Path,
    encoder: Encoder | None = None,
    decoder: Decoder | None = None,
    *,
    payload: None = None,
) -> Queue[Any]: ...


def load(
    path: str | Path,
    encoder: Encoder | None = None,
    decoder: Decoder | None = None,
    *,
    payload: type[Any] | None = None,
) -> Queue[Any]:
    """Load a rendered file: ``queue = runtime.load("sql/postgres/orders.sql")``.

    An outbox file gives an Outbox (``put``, ``relay``) instead of a Queue. Payloads are JSON
    values; ``encoder`` turns any other value into one (called for each value JSON cannot
    carry, e.g. ``lambda v: {"$dt": v.isoformat()}``) and ``decoder`` is called with every
    decoded JSON object (dict) and returns what stands for it, on enqueue and delivery alike.

    ``payload=Order`` (a dataclass, a pydantic v2 model or a msgspec Struct) types the queue
    (``Queue[Order]``): enqueue takes an ``Order`` or a dict that validates as one and raises
    PayloadError naming the field otherwise, nothing written; handlers get ``message.payload``
    as an ``Order`` (runtime.models). It does not combine with ``encoder``/``decoder``
    (ConfigurationError).
    """
    rendered = read_rendered(path)
    if rendered.header.kind == "outbox":
        from runtime.outbox import Outbox

        # load() is typed as returning a Queue (its public signature, what most callers load)
        return Outbox(rendered, encoder=encoder, decoder=decoder, model=payload)  # type: ignore[return-value]
    return Queue(rendered, encoder=encoder, decoder=decoder, model=payload)
