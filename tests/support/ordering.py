"""Claims held and settled by hand, for tests of the claim's order."""

from __future__ import annotations

from typing import Any

from runtime.forms import form_for
from runtime.settle import decide
from support.engines import Engine
from support.queues import QueueUnderTest


async def hold(qt: QueueUnderTest, db: Any, limit: int = 10) -> list[Any]:
    """Claim on ``db`` and keep the deliveries open (in flight)."""
    return list(await form_for(qt.queue, keyspace=qt.url).claim(db, limit, None))


async def settle(qt: QueueUnderTest, db: Any, outcomes: list[tuple[Any, Any]]) -> None:
    """Settle held deliveries, each with its outcome, and end their batch."""
    form = form_for(qt.queue, keyspace=qt.url)
    for d, outcome in outcomes:
        await form.settle(db, d, decide(qt.queue, d, outcome))
    await form.end_batch(db)


def serial(engine: Engine, form: str) -> bool:
    """SQLite's row lock holds the database's write lock: no second claim while one is open."""
    return engine.name == "sqlite" and form == "row_lock"
