"""What every claim form does, and the parts they share: turning claimed rows into deliveries."""

from __future__ import annotations

from typing import Any

from runtime.delivery import Delivery, Message
from runtime.drivers.base import Connection
from runtime.queue import Queue, decode_payload
from runtime.settle import Decision
from runtime.steps import StepResult, run_step


class Form:
    """Claims rows and settles deliveries on one worker connection; subclasses per form."""

    def __init__(self, queue: Queue, transactional: bool = False, keyspace: str = "") -> None:
        self.queue = queue
        self.transactional = transactional
        self.keyspace = keyspace

    # -- helpers shared by the forms
    async def run(self, conn: Connection, step: str, params: dict[str, Any]) -> StepResult:
        return await run_step(conn, self.queue.rendered.require(step), params)

    def claim_params(self, limit: int, group: str | None) -> dict[str, Any]:
        return {
            "limit": limit,
            "group": group if group is not None else self.queue.default_group,
            "lease_s": self.queue.lease_s,
        }

    @staticmethod
    def delivery(row: dict[str, Any], token: Any = None) -> Delivery:
        attempt = row.get("attempt")
        return Delivery(
            message=Message(
                id=row["id"], payload=decode_payload(row["payload"]), group=row.get("group")
            ),
            attempt=int(attempt) if attempt is not None else None,
            token=token,
        )

    # -- the form's own steps
    async def claim(self, conn: Connection, limit: int, group: str | None) -> list[Delivery]:
        raise NotImplementedError

    async def acquire(self, conn: Connection, d: Delivery, group: str | None) -> Delivery | None:
        """Take what the claim only listed (advisory); the other forms hold rows already."""
        return d

    async def begin_handler(self, conn: Connection, d: Delivery) -> None:
        """Open what the handler's writes go into (transactional mode)."""
        if self.transactional:
            await conn.begin()

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        raise NotImplementedError

    async def give_back(self, conn: Connection | None, d: Delivery) -> None:
        """A delivery that will not be settled: return its row at once."""

    async def end_batch(self, conn: Connection) -> None:
        """After the last delivery of a claim (row lock: COMMIT)."""

    async def abort_batch(self, conn: Connection) -> None:
        """The batch cannot finish (row lock: ROLLBACK)."""
        if conn.in_transaction and not conn.closed:
            await conn.rollback()
