"""Row lock: the claim's transaction holds the rows; each settlement runs in it and COMMIT settles."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, ClassVar

from runtime.contract.errors import LeaseLost
from runtime.contract.rendered import Kind, Statement
from runtime.delivery import Batch, Delivery
from runtime.drivers.base import Connection
from runtime.forms.base import Form
from runtime.params import ClaimParams
from runtime.settle import Decision
from runtime.steps import begin_rows, run_rows

_SAVEPOINT = "qgen_delivery"
#: seconds a row counted by a claim stays not ready (its retry_after mark) while the claim
#: goes on to lock it, and after a worker that held it died; see RowLockForm
COUNT_HOLD_S = 5.0


class RowLockForm(Form):
    """``FOR UPDATE SKIP LOCKED`` (SQLite: ``BEGIN IMMEDIATE``) in one transaction per batch.

    The deliveries of a batch settle in that transaction and its COMMIT settles them all; a
    batch that cannot finish rolls back and every row of it returns. Not transactional, the
    batch's settlements wait for its end and run as one statement per outcome
    (``ack_many`` …) just before that COMMIT; transactional, each runs after its handler, in
    the handler's savepoint. Either way nothing counts as settled before the COMMIT.

    With max_attempts (the file has ``take``) a delivery must count even when it kills its
    worker or its connection, which rolls the batch back. So the claim first counts the
    rows' delivery in a statement of its own that commits, and marks them not ready for
    COUNT_HOLD_S seconds (retry_after), so that no other claim counts them too; then it
    opens the batch's transaction and ``take`` locks them. The settlements count nothing
    more and clear the mark. The cost: one more committed statement per claim; and rows
    whose worker died return after the mark (COUNT_HOLD_S), not at once.
    """

    can_group = True
    #: settlements are counted when the batch commits (end_batch), not when written
    commits_at_batch_end: ClassVar[bool] = True
    #: how long a counted row stays marked not ready (COUNT_HOLD_S; tests that compare the
    #: mark with a model lengthen it, so that it never runs out by itself mid-test)
    count_hold_s: float = COUNT_HOLD_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: per worker connection, its batch's last settlement: a statement that goes with the
        #: batch's COMMIT (``end_batch``), in one trip where the driver can
        self._with_commit: dict[Connection, tuple[Statement, Mapping[str, Any]]] = {}
        steps = self.steps
        #: the claim is the first statement of a batch's transaction, with nothing to run
        #: before it (no count of its own, no rate or slot statement), so the COMMIT of a
        #: batch may open the next one's transaction (``end_batch``)
        self.claim_opens_batch = (
            steps.take is None and steps.rate_take is None and steps.limit_slots is None
        )

    def claim_params(self, limit: int, group: str | None) -> ClaimParams:
        params = super().claim_params(limit, group)
        params["hold_s"] = self.count_hold_s
        return params

    async def claim(self, conn: Connection, limit: int, group: str | None) -> Batch:
        params = self.claim_params(limit, group)
        step = self.steps.take
        if step is not None:  # count first, committed; then lock
            counted = await self.run(conn, self.steps.claim, params)
            if not counted.rows:
                return Batch([])
            params["ids"] = json.dumps([row["id"] for row in counted.rows])
        else:
            step = self.steps.claim
        found: list[int] = []
        try:
            if conn.in_transaction:  # opened by the last batch's COMMIT (end_batch)
                rows = await run_rows(conn, step, params, found)
            else:
                rows = await begin_rows(conn, step, params, found)  # BEGIN, with the claim
            if not rows[1]:
                await conn.rollback()
            return self.deliveries(rows, found=found)
        except BaseException:
            await self.abort_batch(conn)
            raise

    async def begin_handler(self, conn: Connection, d: Delivery) -> None:
        if self.transactional:  # the handler writes inside the claim's transaction
            await conn.savepoint(_SAVEPOINT)

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        if self.transactional:
            if not decision.commits_handler_writes:
                await conn.rollback_to_savepoint(_SAVEPOINT)
            await conn.release_savepoint(_SAVEPOINT)
        step = self.settle_step(decision)
        if step is not None:
            await self.run(conn, step, self.bound(d, decision))
        d.settled = True

    async def settle_group(
        self, conn: Connection, items: list[tuple[Delivery, Decision]]
    ) -> list[LeaseLost | None] | None:
        """Every settlement of the batch in the claim's transaction: one statement per outcome
        (``ack_many`` …, the rows ids) where the file has it, one by one for the rest; the
        last of them, a single statement, waits for the batch's COMMIT and goes with it
        (``end_batch``). The rows are held until the COMMIT, so none can be lost; a statement
        that fails fails the batch (rolled back, every row returns)."""
        await self._write_waiting(conn)  # an earlier group's last statement
        statements = self.held_statements(self.many_parts(items))
        if statements:
            (step, params), last = statements[-1], len(statements) - 1
            for earlier, bound in statements[:last]:
                await self.run(conn, earlier, bound)
            if len(step) == 1 and step[0].kind is Kind.WRITES:
                self._with_commit[conn] = (step[0], params)
            else:
                await self.run(conn, step, params)
        for d, _ in items:
            d.settled = True
        return [None] * len(items)

    async def _write_waiting(self, conn: Connection) -> None:
        waiting = self._with_commit.pop(conn, None)
        if waiting is not None:
            await conn.execute(*waiting)

    async def return_unstarted(self, conn: Connection | None, d: Delivery) -> bool:
        """Nothing to write unless the claim counted the row (``unclaim``, in the batch's
        transaction): the batch's COMMIT returns it."""
        d.settled = True
        if conn is None or conn.closed or not conn.in_transaction:
            return False
        if self.steps.unclaim is None:
            return False
        await self.run(conn, self.steps.unclaim, {"id": d.message.id})
        return True

    async def give_back(self, conn: Connection | None, d: Delivery) -> None:
        # nothing to write: the rollback (or the commit, for an unstarted row) returns it
        d.settled = True

    async def end_batch(self, conn: Connection, again: bool = False) -> None:
        """COMMIT the batch, with its last settlement (in one trip where the driver can).
        When the worker claims again at once (``again``) and the driver sends a COMMIT and a
        BEGIN in one trip, that BEGIN opens the next batch's transaction: the claim that
        follows goes without one (a trip less a batch; a claim that finds nothing rolls
        it back)."""
        waiting = self._with_commit.pop(conn, None)
        if not conn.in_transaction:
            return
        if again and self.claim_opens_batch and conn.chains_transactions:
            if waiting is not None:
                await conn.execute(*waiting)
            await conn.commit_begin()
        elif waiting is None:
            await conn.commit()
        else:  # the batch's last settlement and its COMMIT
            await conn.execute_commit(*waiting)

    async def abort_batch(self, conn: Connection) -> None:
        self._with_commit.pop(conn, None)
        await super().abort_batch(conn)
