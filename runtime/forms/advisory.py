"""Advisory lock: a key per row held on the worker's connection; settlements commit on it, then unlock."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterable
from operator import attrgetter
from typing import Any

from runtime.contract.errors import LeaseLost
from runtime.contract.file_steps import present
from runtime.contract.rendered import StatementName as S
from runtime.contract.rendered import Step
from runtime.delivery import Batch, Delivery
from runtime.drivers.base import Connection, Rows
from runtime.forms.base import ClaimSettled, Form
from runtime.process_keys import release_keys, take_keys
from runtime.settle import Decision

#: a delivery's row id, the order a batch is handled in
_BY_ID = attrgetter("message.id")

log = logging.getLogger("runtime")

#: the outcomes whose rows leave the queue (deleted, marked processed, moved to a dead-letter
#: table): their keys may wait for the connection's next claim to be released. A row moved
#: to a dead-letter group stays in the table, where that group's consumers claim it under
#: the same key: it is unlocked at once.
_LEAVES = frozenset({S.ACK, S.DROP})


class AdvisoryForm(Form):
    """``pg_try_advisory_lock`` / ``GET_LOCK``; on SQLite the keys live in this process.

    The claim tries the keys of up to ``scan`` ready rows and keeps the first ``limit`` it
    gets (in one statement on a server); the take then re-checks the held rows under their
    keys and counts their attempt, in one step, so a row settled since the listing is
    skipped. On PostgreSQL the claim takes in the same statement (its file has no
    ``take``). Settlements commit before their keys are unlocked.
    """

    can_group = True
    session_holds = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the rows whose keys each worker connection holds now
        self._held: dict[Connection, set[int]] = {}
        rendered = self.queue.rendered
        #: the form's own statements (the load checked them: take unless the claim takes,
        #: unlock on a server); a file with no take has a claim that takes (PostgreSQL)
        self._take_step: Step | None = self.steps.take
        server = self.queue.dialect.server_advisory  # else the keys live in this process
        self._unlock_step: Step = present(self.steps.unlock, rendered, "unlock") if server else ()
        #: a claim that takes also releases the keys its connection's last batch finished
        #: (``release``): per connection, those keys, held until its next claim
        self._release: dict[Connection, list[int]] = {}
        if self._take_step is not None:  # ack_claim is the claim that takes, after finishing
            self._ack_claim = None
        self._leaves = _LEAVES | ({S.DEAD_LETTER} if self.queue.dead_group is None else set())

    async def claim(self, conn: Connection, limit: int, group: str | None) -> Batch:
        if self._take_step is None:
            return await self._claim_taking(conn, limit, group)
        names, listed = await self.rows(conn, self.steps.claim, self.claim_params(limit, group))
        i_id = names.index("id") if listed else 0
        if self.queue.dialect.server_advisory:
            i_held = names.index("held") if listed else 0
            held = sorted(row[i_id] for row in listed if row[i_held])
        else:
            held = take_keys(self.keyspace, self.queue.table, [row[i_id] for row in listed], limit)
        if not held:  # nothing ready, or every ready row's key is another worker's
            return Batch(contended=bool(listed))
        self._held.setdefault(conn, set()).update(held)
        try:
            taken = await self._take(conn, held, group)
            return Batch(taken, raced=not taken)  # every held row settled since the listing
        except BaseException:
            await self.unlock(conn, held)
            raise

    async def _claim_taking(self, conn: Connection, limit: int, group: str | None) -> Batch:
        """A claim that takes in the same statement (PostgreSQL): see ``_listing`` and
        ``_batch_of``."""
        return await self._batch_of(conn, await self._listing(conn, limit, group))

    async def _listing(
        self, conn: Connection, limit: int, group: str | None, finished: list[int] | None = None
    ) -> Rows:
        """The rows of a claim that takes (committed when it returns), releasing first the
        keys of the rows this connection's last batch finished (their settlements committed
        before). ``finished``: rows whose keys this connection holds, finished first in the
        same statement (``ack_claim``); their keys wait for the next claim."""
        released = self._release.pop(conn, [])
        params = self.claim_params(limit, group)
        params["release"] = json.dumps(released)
        step = self.steps.claim
        if finished is not None:
            step = present(self._ack_claim, self.queue.rendered, "ack_claim")
            params["ids"] = json.dumps(finished)
        try:
            listed = await self.rows(conn, step, params)
        except BaseException:
            with contextlib.suppress(Exception):  # released or not: unlocked either way
                await self.unlock(conn, released)
            raise
        self._forget(conn, released)
        if finished:
            self._release.setdefault(conn, []).extend(finished)
        return listed

    async def _batch_of(self, conn: Connection, listed: Rows) -> Batch:
        """A claim's rows as its batch: one per key it kept (``taken``: still claimable,
        counted), or the first candidate alone when it kept none (``held`` 0: other workers
        hold the ready rows). The kept keys whose rows were settled since the listing are
        unlocked."""
        names, rows = listed
        if not rows:
            return Batch()
        i_id, i_held, i_taken = names.index("id"), names.index("held"), names.index("taken")
        held = [row for row in rows if row[i_held]]
        if not held:
            return Batch(contended=True)
        self._held.setdefault(conn, set()).update(row[i_id] for row in held)
        taken = [row for row in held if row[i_taken]]
        delivered = await self._delivered(conn, (names, taken), [row[i_id] for row in held])
        return Batch(delivered, raced=not taken)  # every held row settled since the listing

    async def _delivered(self, conn: Connection, rows: Rows, held: list[int]) -> list[Delivery]:
        """The rows taken under keys ``conn`` holds, as deliveries in id order; the held keys
        whose rows were not taken (settled since the listing) are unlocked."""
        taken = self.deliveries(rows)
        for d in taken:
            d.conn = conn
        if len(taken) < len(held):  # the rows taken are held ones: some were not taken
            found = {d.message.id for d in taken}
            gone = [row_id for row_id in held if row_id not in found]
            try:
                await self.unlock(conn, gone)
            except BaseException:
                await self.unlock(conn, found)
                raise
        taken.sort(key=_BY_ID)
        return taken

    async def claim_settling(
        self,
        conn: Connection,
        limit: int,
        group: str | None,
        items: list[tuple[Delivery, Decision]],
    ) -> ClaimSettled:
        """``ack_claim``: the items' rows finished under their keys, then a claim, in one
        statement. An item whose key went with a connection since lost is not finished
        here: its row returns, to be delivered again (reported as lost). Once the statement
        committed its settlements stand: when its batch cannot be taken up (an unlock that
        fails), the connection is dropped, its keys with it, and the batch's rows return."""
        mine = [d.message.id for d, _ in items if d.conn is conn]
        listed = await self._listing(conn, limit, group, finished=mine)
        met = [None if d.conn is conn else self._key_gone(d) for d, _ in items]
        try:
            batch = await self._batch_of(conn, listed)
        except Exception as exc:
            log.warning(
                "queue %s: a claim's rows could not be taken up (%s); its connection is "
                "dropped and they return",
                self.queue.name,
                exc,
            )
            await conn.abort()
            batch = Batch()
        return ClaimSettled(batch, met)

    def _key_gone(self, d: Delivery) -> LeaseLost:
        d.lost = True
        return LeaseLost(
            f"queue '{self.queue.name}': message {d.message.id} was not settled: its key went "
            "with the connection that held it, so its row returns and is delivered again"
        )

    async def _take(self, conn: Connection, held: list[int], group: str | None) -> list[Delivery]:
        """Re-check and count the held rows (one step); unlock the ones gone since the claim."""
        assert self._take_step is not None  # the file has a take (claim() checked)
        params = self.claim_params(len(held), group)
        params["ids"] = json.dumps(held)
        return await self._delivered(conn, await self.rows(conn, self._take_step, params), held)

    def _forget(self, conn: Connection, ids: list[int]) -> None:
        """These keys are no longer held on ``conn``."""
        mine = self._held.get(conn)
        if mine is not None:
            mine.difference_update(ids)
            if not mine:
                del self._held[conn]

    async def unlock(self, conn: Connection | None, ids: Iterable[int]) -> None:
        """Release the keys of these rows (a row whose key is released is claimable again)."""
        ids = list(ids)
        if conn is not None:
            self._forget(conn, ids)
            waiting = self._release.get(conn)
            if waiting:  # released now, not by the next claim
                now = set(ids)
                waiting[:] = [i for i in waiting if i not in now]
                if not waiting:
                    del self._release[conn]
        if not self.queue.dialect.server_advisory:
            release_keys(self.keyspace, self.queue.table, ids)
            return
        if ids and conn is not None and not conn.closed:
            await self.run(conn, self._unlock_step, {"ids": json.dumps(ids)})

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        try:
            in_tx = self.transactional and conn.in_transaction
            if in_tx and not decision.commits_handler_writes:
                await conn.rollback()
                in_tx = False
            try:
                step = self.settle_step(decision)
                if step is not None:
                    await self.run(conn, step, self.bound(d, decision))
            except BaseException:
                if in_tx and not conn.closed:
                    await conn.rollback()
                raise
            if in_tx:
                await conn.commit()
            d.settled = True
        finally:
            await self.unlock(conn, [d.message.id])

    async def settle_group(
        self, conn: Connection, items: list[tuple[Delivery, Decision]]
    ) -> list[LeaseLost | None] | None:
        try:  # the rows whose keys it holds, in one transaction (rolled back on an error)
            await self.settle_held(conn, self.many_parts(items))
        except Exception:  # rolled back
            return None  # nothing of it committed: the caller settles them one by one
        for d, _ in items:
            d.settled = True
        if self._take_step is None:
            # the rows that left the queue keep their keys until the connection's next claim
            # releases them (they committed first, as any unlock waits for); a row that stays
            # ready (a retry) or comes back (retry_after) is unlocked now, to be claimed again
            gone = [d.message.id for d, decision in items if decision.label in self._leaves]
            self._release.setdefault(conn, []).extend(gone)
            left = set(gone)
            await self.unlock(conn, [d.message.id for d, _ in items if d.message.id not in left])
        else:
            await self.unlock(conn, [d.message.id for d, _ in items])
        return [None] * len(items)

    async def return_unstarted(self, conn: Connection | None, d: Delivery) -> bool:
        """Under its key, undo the take's count (``unclaim``), then unlock."""
        d.settled = True
        try:
            if (
                not d.started
                and conn is not None
                and not conn.closed
                and self.steps.unclaim is not None
            ):
                await self.run(conn, self.steps.unclaim, {"id": d.message.id})
        finally:
            await self.unlock(conn, [d.message.id])
        return True

    async def abort_batch(self, conn: Connection) -> None:
        """The batch cannot finish: every key its connection holds is released."""
        try:
            await super().abort_batch(conn)
        finally:
            await self.unlock(conn, self._held.get(conn, ()))

    async def give_back(self, conn: Connection | None, d: Delivery) -> None:
        """Dropped unsettled: unlock and close the key's connection (the worker stops, and
        every key of its batch goes with the connection)."""
        d.settled = True
        try:
            if conn is not None and conn.in_transaction and not conn.closed:
                await conn.rollback()
            held = self._held.get(conn, ()) if conn is not None else ()
            await self.unlock(conn, {d.message.id, *held})
        finally:
            if conn is not None and self.queue.dialect.server_advisory:
                await conn.abort()
