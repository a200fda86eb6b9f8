"""What every claim form does, and the parts they share: turning claimed rows into deliveries.

A form is one behaviour: claim, settle, settle several together, give back, and its own
background work and recovery (the lease form extends leases and releases them on a fresh
connection); the consumer calls these and never asks which form it has.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from runtime.backoff import Backoff, Outage
from runtime.contract.errors import LeaseLost, PayloadError
from runtime.contract.file_steps import QueueSteps, present
from runtime.contract.rendered import StatementName as S
from runtime.contract.rendered import Step
from runtime.counts import Counts
from runtime.delivery import Batch, Delivery, message_of
from runtime.drivers.base import Connection, Rows
from runtime.loaded import LoadedQueue
from runtime.params import ClaimParams, ManyParams, SettleParams
from runtime.payloads import decode_payload
from runtime.settle import Decision, params_of
from runtime.steps import StepResult, run_rows, run_rows_together, run_step

#: the largest group the next claim finishes (``Form.defer``). Measured on PostgreSQL with
#: four workers (bench/README.md): finishing a group of 10 in the next advisory claim drains
#: 20–25 % faster than finishing it on its own, one of 20 about the same, and one of 100
#: 13 % slower (that claim then holds its new batch's keys and locks longer, which the
#: other workers' claims must step past)
DEFER_MAX = 20


def finishing_as_ack(steps: QueueSteps) -> frozenset[str]:
    """The outcomes a claim that finishes rows as ``ack_many`` does (``ack_claim``) may
    settle: ack, and drop where ``drop_many`` is the very same statement (not where the
    table declares its own drop)."""
    ack_many = steps.many.get(S.ACK)
    if ack_many is None:
        return frozenset()
    return frozenset({S.ACK} | ({S.DROP} if steps.many.get(S.DROP) == ack_many else set()))


class ClaimSettled(NamedTuple):
    """What a claim that also settles (``Form.claim_settling``) did, once it committed."""

    #: the rows it claimed
    batch: Batch
    #: per item it was given: None (settled) or the LeaseLost it met
    met: list[LeaseLost | None]


@dataclass
class Upkeep:
    """What a form's background work may use: the deliveries held now, a way to open a
    connection, the consumer's outage record and backoff, and its counts."""

    held: set[Delivery]
    connect: Callable[[], Awaitable[Connection]]
    outage: Outage
    backoff: Callable[[], Backoff]
    counts: Counts


class Form:
    """Claims rows and settles deliveries on one worker connection; subclasses per form."""

    def __init__(
        self, queue: LoadedQueue, transactional: bool = False, keyspace: str = "", spread: int = 4
    ) -> None:
        self.queue = queue
        #: the file's steps, checked when it was loaded
        self.steps = queue.steps
        self.transactional = transactional
        self.keyspace = keyspace
        #: workers claiming side by side (advisory: how far past its batch a claim looks)
        self.spread = spread
        #: the groups whose max_in_flight slot rows this form made sure of (limit_slots)
        self._slots_made: set[str | None] = set()
        #: a claim that first finishes the connection's last batch as ack_many does
        #: (PostgreSQL advisory), and the outcomes it may finish
        self._ack_claim: Step | None = self.steps.ack_claim
        self._finishing = finishing_as_ack(self.steps)
        #: the next claim can finish the connection's last batch (``claim_settling``)
        self.settles_in_claim = self._ack_claim is not None

    # -- helpers shared by the forms
    async def run(self, conn: Connection, step: Step, params: Mapping[str, Any]) -> StepResult:
        return await run_step(conn, step, params)

    async def rows(
        self,
        conn: Connection,
        step: Step,
        params: Mapping[str, Any],
        found: list[int] | None = None,
    ) -> Rows:
        """The rows ``step`` returns, as tuples with their column names (``run_rows``;
        ``found``: how many rows each of its row-returning statements found)."""
        return await run_rows(conn, step, params, found)

    def settle_step(self, decision: Decision) -> Step | None:
        """The statement a decision runs (None: none, e.g. a row-lock retry without an
        attempt column)."""
        return None if decision.step is None else self.steps.settle[decision.step]

    def claim_params(self, limit: int, group: str | None) -> ClaimParams:
        return {
            "limit": limit,
            # how far past its batch a claim looks: the rows the other workers hold
            "scan": limit * self.spread,
            "group": group if group is not None else self.queue.default_group,
            "lease_s": self.queue.lease_s,
        }

    def deliveries(self, rows: Rows, tokens: bool = False, found: list[int] | None = None) -> Batch:
        """A claim's rows (``run_rows``: column names, tuples) as its batch of deliveries;
        ``tokens``: each row's ``token`` column is its delivery's token (lease). ``found``:
        what each statement of a claim that lists ready rows, then locks them (MariaDB),
        found: none locked after a listing that found some is ``contended`` (others locked
        or leased every listed row in between), not "nothing claimable".

        Each payload is decoded here, once: a stored payload the decoder refuses never fails
        the claim, and with it the batch; its delivery keeps the stored text and why
        (``undecodable``), and is never handled."""
        names, values = rows
        if not values:
            return Batch(contended=any(found or ()))
        where = {name: i for i, name in enumerate(names)}
        i_id, i_payload = where["id"], where["payload"]
        i_attempt, i_group = where.get("attempt"), where.get("group")
        i_token = where["token"] if tokens else None
        queue = self.queue
        decoder, codec = queue.decoder, queue.codec
        batch = Batch()
        add = batch.append
        for row in values:  # the claim's hot loop: one Delivery a row, nothing called twice
            stored = row[i_payload]
            try:
                payload, problem = decode_payload(stored, decoder, codec), None
            except PayloadError as exc:
                payload, problem = stored, exc
            attempt = None if i_attempt is None else row[i_attempt]
            d = Delivery(
                message_of(row[i_id], payload, None if i_group is None else row[i_group]),
                None if attempt is None else int(attempt),
                None if i_token is None else row[i_token],
            )
            if problem is not None:
                d.undecodable = problem
            add(d)
        return batch

    def bound(self, d: Delivery, decision: Decision) -> SettleParams:
        """What ``decision``'s statement binds for ``d`` (``runtime.settle.params_of``)."""
        return params_of(self.queue, d, decision)

    def many_parts(
        self, items: list[tuple[Delivery, Decision]]
    ) -> list[tuple[Step | None, list[tuple[int, Delivery, Decision]]]]:
        """A group cut into what one statement settles: ``(step, part)``, the deliveries of
        one outcome (and delay) whose file has its ``<outcome>_many`` statement, or one
        delivery alone (``None``: its own statement; a declared override, a custom event and
        a move into a dead table have no ``_many``). Each item keeps its index in ``items``.
        With a last_error column, only deliveries of the same error text share a statement:
        a broken deploy's identical errors still settle as one."""
        unique = len({d.message.id for d, _ in items}) == len(items)  # one statement cannot
        # tell two tokens of a row apart
        many_of = self.steps.many
        if unique and items:
            first = items[0][1]
            step = many_of.get(first.step) if first.step is not None else None
            if step is not None and all(decision is first for _, decision in items):
                # one shared Decision (runtime.settle.decide): one part of all, no key to make
                return [(step, [(i, d, first) for i, (d, _) in enumerate(items)])]
        many: dict[tuple[str, Any, Any], list[tuple[int, Delivery, Decision]]] = {}
        alone: list[tuple[Step | None, list[tuple[int, Delivery, Decision]]]] = []
        last_key: tuple[str, Any, Any] | None = None
        last: list[tuple[int, Delivery, Decision]] = []
        for i, (d, decision) in enumerate(items):
            name = decision.step
            if unique and name is not None and name in many_of:
                key = (name, decision.delay_s, decision.error)
                if key != last_key:  # most items share the one before's key: no look-up
                    last_key, last = key, many.setdefault(key, [])
                last.append((i, d, decision))
            else:
                alone.append((None, [(i, d, decision)]))
        return [*((many_of[name], part) for (name, _, _), part in many.items()), *alone]

    def many_params(self, part: list[tuple[int, Delivery, Decision]]) -> ManyParams:
        """What a ``_many`` statement binds besides its rows: the part's delay and error, the
        dead group."""
        decision = part[0][2]
        return {
            "delay_s": decision.delay_s,
            "error": decision.error,
            "dead_group": self.queue.dead_group,
        }

    @staticmethod
    def needs_transaction(
        parts: list[tuple[Step | None, list[tuple[int, Delivery, Decision]]]],
    ) -> bool:
        """Whether a group's parts take more than one statement, so that they need a
        transaction of their own to commit together (one statement commits on its own, and
        saves the BEGIN and COMMIT round trips)."""
        return sum(step is not None or part[0][2].step is not None for step, part in parts) > 1

    def held_statements(
        self, parts: list[tuple[Step | None, list[tuple[int, Delivery, Decision]]]]
    ) -> list[tuple[Step, Mapping[str, Any]]]:
        """What settles ``many_parts`` of a group of rows this connection holds, in order:
        one statement per outcome, by ids, where the file has it; each other delivery's own
        (none for a decision without one)."""
        statements: list[tuple[Step, Mapping[str, Any]]] = []
        for step, part in parts:
            if step is not None:
                params = self.many_params(part)
                params["ids"] = json.dumps([d.message.id for _, d, _ in part])
                statements.append((step, params))
                continue
            ((_, d, decision),) = part
            one = self.settle_step(decision)
            if one is not None:
                statements.append((one, self.bound(d, decision)))
        return statements

    async def settle_held(
        self,
        conn: Connection,
        parts: list[tuple[Step | None, list[tuple[int, Delivery, Decision]]]],
    ) -> None:
        """Settle rows this connection holds (row lock: its transaction; advisory: their keys),
        ``many_parts`` of a group (``held_statements``), in one transaction when there are
        several (the caller's when one is open): one script (``run_rows_together``)."""
        await run_rows_together(conn, self.held_statements(parts))

    #: progress is written on a connection of its own, not the worker's (lease: the worker's
    #: may hold the handler's transaction, and the row lock with it)
    progress_apart: ClassVar[bool] = False

    async def progress(self, conn: Connection, d: Delivery, params: dict[str, Any]) -> None:
        """Write a running handler's progress (``params``: id, progress) on the row the
        worker's connection holds (row lock: in the claim's transaction; advisory: under
        the key, on its own unless the handler's transaction is open)."""
        await self.run(conn, present(self.steps.progress, self.queue.rendered, "progress"), params)

    # -- the form's own steps
    async def claim_within_rate(self, conn: Connection, limit: int, group: str | None) -> Batch:
        """``claim``, held to the queue's rate limit when its file has one (and, before the
        first, max_in_flight's slot rows made once, ``limit_slots``): first the bucket
        grants up to ``limit`` tokens (``rate_take``, a transaction of its own), the claim
        takes at most that many, and the tokens it did not use go back (``rate_refund``).
        Nothing granted: an empty batch, ``contended`` (others took the tokens for now)."""
        steps = self.steps
        if group not in self._slots_made and steps.limit_slots is not None:
            await self.run(conn, steps.limit_slots, self.claim_params(limit, group))
            self._slots_made.add(group)
        take = steps.rate_take
        if take is None:
            return await self.claim(conn, limit, group)
        params = self.claim_params(limit, group)
        rows = (await run_step(conn, take, params)).rows
        granted = int(rows[0]["limit"]) if rows else 0
        if granted <= 0:
            return Batch(contended=True)
        batch = await self.claim(conn, granted, group)
        unused = granted - len(batch)
        # a row-lock batch holds its transaction: its unused tokens stay spent (fewer starts,
        # never more), so the bucket's row is never held for a batch
        if unused > 0 and not conn.in_transaction:
            params["unused"] = unused
            await self.run(
                conn, present(steps.rate_refund, self.queue.rendered, "rate_refund"), params
            )
        return batch

    async def claim(self, conn: Connection, limit: int, group: str | None) -> Batch:
        raise NotImplementedError

    async def begin_handler(self, conn: Connection, d: Delivery) -> None:
        """Open what the handler's writes go into (transactional mode)."""
        if self.transactional:
            await conn.begin()

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        raise NotImplementedError

    #: the form can commit several settlements in one transaction (``settle_group``)
    can_group: ClassVar[bool] = False
    #: settlements commit with the batch (row lock): counted after ``end_batch``, not when
    #: their statement ran, and grouped for the whole batch rather than a time window
    commits_at_batch_end: ClassVar[bool] = False

    #: what the form holds lives in the connection's session (advisory keys), so a statement
    #: that failed part-way may leave some held: the consumer replaces the connection
    session_holds: ClassVar[bool] = False

    #: what holds a row outlives the worker's connection (lease: the token in the row), so a
    #: connection opened after it was lost can still settle or give back the rows it held
    #: (row lock's transaction and advisory's keys end with the connection: their rows are
    #: free at once)
    holds_outlive_connection: ClassVar[bool] = False

    def retries_settlement(self) -> bool:
        """Whether a settlement a conflicting transaction rolled back may simply run again: its
        statement is guarded so a second run touches only a row this delivery still holds
        (lease's token), and no handler write went with it (not transactional)."""
        return False

    def groups_settlements(self) -> bool:
        """Whether settlements of quick handlers may commit together: not in transactional
        mode, where each commits its handler's writes."""
        return self.can_group and not self.transactional

    async def settle_group(
        self, conn: Connection, items: list[tuple[Delivery, Decision]]
    ) -> list[LeaseLost | None] | None:
        """Settle several deliveries in one transaction, each by its own statement and guard.

        Returns, per delivery, None when it settled or the LeaseLost it met; or None for the
        whole group when its transaction failed and nothing committed (settle them one by one).
        """
        raise NotImplementedError

    def defer(self, items: list[tuple[Delivery, Decision]]) -> bool:
        """Whether the connection's next claim settles these (``claim_settling``), in the
        same statement (or, on SQLite's lease form, the same trip and transaction), rather
        than a statement of their own now. True only where the form can (the file's
        ``ack_claim``, ``settles_in_claim``), not transactional, a group of at most
        ``DEFER_MAX``, and every item finishes its row as ``ack_many`` does, each row once;
        from then on they count as settled (nothing else writes them), and they are counted
        once that claim has committed."""
        if not self.settles_in_claim or self.transactional or len(items) > DEFER_MAX:
            return False
        finishing = self._finishing
        ids = set()
        for d, decision in items:  # one pass: the group is at most DEFER_MAX
            if decision.step not in finishing:
                return False
            ids.add(d.message.id)
        if len(ids) != len(items):  # one statement, one row once
            return False
        for d, _ in items:
            d.settled = True
        return True

    async def claim_settling(
        self,
        conn: Connection,
        limit: int,
        group: str | None,
        items: list[tuple[Delivery, Decision]],
    ) -> ClaimSettled:
        """``claim``, settling in the same statement the items ``defer`` kept. When it
        raises, nothing of it committed (the items wait for the next claim)."""
        raise NotImplementedError

    async def return_unstarted(self, conn: Connection | None, d: Delivery) -> bool:
        """A claimed delivery whose handler never started (the consumer stops): return its row;
        True when that took a statement (row lock: the batch's COMMIT returns it)."""
        d.settled = True
        return False

    async def give_back(self, conn: Connection | None, d: Delivery) -> None:
        """A delivery that will not be settled: return its row at once."""

    async def end_batch(self, conn: Connection, again: bool = False) -> None:
        """After the last delivery of a claim (row lock: COMMIT); ``again``: the worker
        claims again at once on ``conn``."""

    async def abort_batch(self, conn: Connection) -> None:
        """The batch cannot finish (row lock: ROLLBACK)."""
        if conn.in_transaction and not conn.closed:
            await conn.rollback()

    async def maintain(self, upkeep: Upkeep) -> None:
        """The form's background work while the consumer runs (cancelled when it stops);
        none for row lock and advisory, whose hold ends with the connection."""

    async def release_elsewhere(
        self, connect: Callable[[], Awaitable[Connection]], deliveries: list[Delivery]
    ) -> int:
        """Give back, on a fresh connection, rows whose worker connection is gone; how many
        took a statement (row lock rolled back and advisory unlocked with the connection)."""
        return 0
