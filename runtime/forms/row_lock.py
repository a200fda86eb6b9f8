"""Row lock: the claim's transaction holds the rows; each settlement runs in it and COMMIT settles."""

from __future__ import annotations

from runtime.delivery import Batch, Delivery
from runtime.drivers.base import Connection
from runtime.forms.base import Form
from runtime.rendered import StatementName as S
from runtime.settle import Decision

_SAVEPOINT = "qgen_delivery"


class RowLockForm(Form):
    """``FOR UPDATE SKIP LOCKED`` (SQLite: ``BEGIN IMMEDIATE``) in one transaction per batch.

    The deliveries of a batch settle in that transaction, one after another, and its COMMIT
    settles them all; a batch that cannot finish rolls back and every row of it returns.
    """

    async def claim(self, conn: Connection, limit: int, group: str | None) -> Batch:
        await conn.begin(immediate=True)
        try:
            result = await self.run(conn, S.CLAIM, self.claim_params(limit, group))
        except BaseException:
            await self.abort_batch(conn)
            raise
        if not result.rows:
            await conn.rollback()
        return Batch([self.delivery(row) for row in result.rows])

    async def begin_handler(self, conn: Connection, d: Delivery) -> None:
        if self.transactional:  # the handler writes inside the claim's transaction
            await conn.savepoint(_SAVEPOINT)

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        if self.transactional:
            if not decision.commits_handler_writes:
                await conn.rollback_to_savepoint(_SAVEPOINT)
            await conn.release_savepoint(_SAVEPOINT)
        if decision.step is not None:
            await self.run(conn, decision.step, decision.params)
        d.settled = True

    async def give_back(self, conn: Connection | None, d: Delivery) -> None:
        # nothing to write: the rollback (or the commit, for an unstarted row) returns it
        d.settled = True

    async def end_batch(self, conn: Connection) -> None:
        if conn.in_transaction:
            await conn.commit()
