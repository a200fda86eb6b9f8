"""A running handler's progress: ``await ctx.progress(value)`` written on its row by the form.

The value is encoded by the queue's payload rules; the form's ``progress`` statement writes
it fenced as a settlement is (the lease token, the held key, the claim's row lock). The lease
form writes it on one connection of the consumer's own, opened at the first call and shared
by its workers, so that the write never waits behind the handler's transaction.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from runtime.contract.errors import ConfigurationError, PayloadError
from runtime.delivery import Delivery
from runtime.drivers.base import Connection
from runtime.forms.base import Form
from runtime.payloads import encode_payload


class ProgressWriter:
    """Writes progress for one consumer's deliveries; ``close()`` when the consumer ends."""

    def __init__(self, form: Form, connect: Callable[[], Awaitable[Connection]]) -> None:
        self.form = form
        self.connect = connect
        self._apart: Connection | None = None
        self._lock = asyncio.Lock()

    def params(self, d: Delivery, value: Any) -> dict[str, Any]:
        queue = self.form.queue
        if queue.steps.progress is None:
            raise ConfigurationError(
                f"queue '{queue.name}' has no progress column: declare columns.progress and "
                "render again, or do not call ctx.progress()"
            )
        try:
            encoded = encode_payload(value, queue.encoder)
        except PayloadError as exc:
            why = str(exc).removeprefix("payload cannot be stored: ")
            raise PayloadError(f"progress cannot be stored: {why}") from None
        return {"id": d.message.id, "progress": encoded}

    async def write(self, conn: Connection, d: Delivery, value: Any) -> None:
        """Record ``value`` as ``d``'s progress (``conn``: the delivery's worker connection)."""
        params = self.params(d, value)
        if not self.form.progress_apart:
            await self.form.progress(conn, d, params)
            return
        async with self._lock:
            if self._apart is None or self._apart.closed:
                self._apart = await self.connect()
            await self.form.progress(self._apart, d, params)

    async def close(self) -> None:
        if self._apart is not None:
            with contextlib.suppress(Exception):
                await self._apart.close()
            self._apart = None
