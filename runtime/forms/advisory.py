"""Advisory lock: a key per row held on the worker's connection; settlements commit on it, then unlock."""

from __future__ import annotations

import logging
from typing import ClassVar

from runtime.delivery import Delivery, Message
from runtime.drivers.base import Connection
from runtime.forms.base import Form
from runtime.settle import Decision

log = logging.getLogger("runtime")


class AdvisoryForm(Form):
    """``pg_try_advisory_lock`` / ``GET_LOCK``; on SQLite the keys live in this process.

    The claim only lists candidates; ``acquire`` takes a key without waiting and re-checks
    the row under it (``take``), so a row settled meanwhile is skipped.
    """

    #: SQLite's keys: (database, table, id) held by a consumer of this process
    _process_keys: ClassVar[set[tuple[str, str, int]]] = set()

    async def claim(self, conn: Connection, limit: int, group: str | None) -> list[Delivery]:
        result = await self.run(conn, "claim", self.claim_params(limit, group))
        return [
            Delivery(message=Message(id=row["id"], payload=None), attempt=None)
            for row in result.rows
        ]

    async def _lock(self, conn: Connection, row_id: int) -> bool:
        if not self.queue.dialect.server_advisory:
            key = (self.keyspace, self.queue.table, row_id)
            if key in self._process_keys:
                return False
            self._process_keys.add(key)
            return True
        result = await self.run(conn, "lock", {"id": row_id})
        return bool(result.rows and result.rows[0]["locked"])

    async def _unlock(self, conn: Connection | None, row_id: int) -> None:
        if not self.queue.dialect.server_advisory:
            self._process_keys.discard((self.keyspace, self.queue.table, row_id))
            return
        if conn is not None and not conn.closed:
            await self.run(conn, "unlock", {"id": row_id})

    async def acquire(self, conn: Connection, d: Delivery, group: str | None) -> Delivery | None:
        row_id = d.message.id
        if not await self._lock(conn, row_id):
            return None
        try:
            params = self.claim_params(1, group) | {"id": row_id}
            result = await self.run(conn, "take", params)
        except BaseException:
            await self._unlock(conn, row_id)
            raise
        if not result.rows:  # settled or moved since the claim listed it
            await self._unlock(conn, row_id)
            return None
        taken = self.delivery(result.rows[0])
        taken.conn = conn
        return taken

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        try:
            in_tx = self.transactional and conn.in_transaction
            if in_tx and not decision.commits_handler_writes:
                await conn.rollback()
                in_tx = False
            try:
                if decision.step is not None:
                    await self.run(conn, decision.step, decision.params)
            except BaseException:
                if in_tx and not conn.closed:
                    await conn.rollback()
                raise
            if in_tx:
                await conn.commit()
            d.settled = True
        finally:
            await self._unlock(conn, d.message.id)

    async def give_back(self, conn: Connection | None, d: Delivery) -> None:
        """Dropped unsettled: unlock and close the key's connection (the worker reconnects)."""
        d.settled = True
        try:
            if conn is not None and conn.in_transaction and not conn.closed:
                await conn.rollback()
            await self._unlock(conn, d.message.id)
        finally:
            if conn is not None and self.queue.dialect.server_advisory:
                await conn.abort()
