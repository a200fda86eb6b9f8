"""Lease: the claim writes an expiry that is the delivery's token; every settlement carries it."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Iterable
from operator import itemgetter
from typing import Any, cast

from runtime.contract.errors import ConnectionLost, DatabaseError, LeaseLost
from runtime.contract.file_steps import present
from runtime.contract.rendered import StatementName as S
from runtime.contract.rendered import Step
from runtime.delivery import Batch, Delivery
from runtime.drivers.base import NOTHING, Connection, Rows, atomic
from runtime.forms.base import ClaimSettled, Form, Upkeep
from runtime.loaded import LoadedQueue
from runtime.settle import Decision
from runtime.steps import run_rows_together

log = logging.getLogger("runtime")


def _ack_before_claim(queue: LoadedQueue) -> bool:
    """Whether the lease form's next claim can run after the last batch's ``ack_many``, as
    one script: the dialect runs them so (``Dialect.lease_ack_before_claim``), the file
    finishes acks with ``ack_many``, and its claim is one statement with no limit's statements
    before it (a rate limit or ``max_in_flight``, which such a claim would step around)."""
    steps = queue.steps
    return (
        queue.dialect.lease_ack_before_claim
        and S.ACK in steps.many
        and len(steps.claim) == 1
        and steps.rate_take is None
        and steps.limit_slots is None
    )


class LeaseForm(Form):
    """``locked_until`` guards the row; zero rows touched means another claim holds it now."""

    can_group = True
    holds_outlive_connection = True

    def __init__(self, queue: LoadedQueue, *args: Any, **kwargs: Any) -> None:
        super().__init__(queue, *args, **kwargs)
        steps, rendered = self.steps, queue.rendered
        # the form's own statements, which the load checked every lease file holds
        self._extend = present(steps.extend, rendered, "extend")
        self._retry = present(steps.retry, rendered, "retry")
        self._release = present(steps.release, rendered, "release")
        self._unclaim = present(steps.unclaim, rendered, "unclaim")
        #: no ``ack_claim`` in the file, but the dialect runs ``ack_many`` then the claim as
        #: one script (one transaction, one trip): only a plain claim, with no limit's
        #: statements to run before it
        self._ack_then_claim = self._ack_claim is None and _ack_before_claim(queue)
        if self._ack_then_claim:
            self.settles_in_claim = True

    def _settle_step(self, decision: Decision) -> Step:
        """A decision's statement; none decided is the plain retry (the lease cleared)."""
        return self._retry if decision.step is None else self.steps.settle[decision.step]

    def retries_settlement(self) -> bool:
        return not self.transactional

    async def claim(self, conn: Connection, limit: int, group: str | None) -> Batch:
        found: list[int] = []
        rows = await self.rows(conn, self.steps.claim, self.claim_params(limit, group), found)
        return self.deliveries(rows, tokens=True, found=found)

    def _lost(self, d: Delivery, what: str) -> LeaseLost:
        d.lost = True
        return LeaseLost(
            f"queue '{self.queue.name}': message {d.message.id} is no longer held by this "
            f"delivery ({what} touched no row): its lease expired and another claim took it"
        )

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        async with d.lock:
            d.settled = True  # no extension after this point
            params = {**self.bound(d, decision), "token": d.token}
            in_tx = self.transactional and conn.in_transaction
            if in_tx and not decision.commits_handler_writes:
                await conn.rollback()
                in_tx = False
            try:
                result = await self.run(conn, self._settle_step(decision), params)
                if not result.rowcount:
                    raise self._lost(d, decision.label)
            except LeaseLost:
                if in_tx and not conn.closed:
                    await conn.rollback()
                raise
            except BaseException:
                d.settled = False  # not settled after all: it can still be given back
                if in_tx and not conn.closed:
                    await conn.rollback()
                raise
            if in_tx:
                await conn.commit()

    async def settle_group(
        self, conn: Connection, items: list[tuple[Delivery, Decision]]
    ) -> list[LeaseLost | None] | None:
        """One statement per outcome (``ack_many`` …, guarded per row by its id and token)
        where the file has it; one by one for the rest (dead letter, custom events, a
        declared override). Rows it did not touch lost their lease."""
        lost: list[int] = []  # the items whose rows no longer held their tokens
        parts = self.many_parts(items)
        many = [(step, part) for step, part in parts if step is not None]
        alone = [part for step, part in parts if step is None]
        # the _many statements alone (most groups) take a transaction of their own only when
        # there are several, and run as one script (run_rows_together)
        own_tx = bool(alone) and self.needs_transaction(parts)
        try:
            async with atomic(conn) if own_tx else NOTHING:
                if many:
                    async with _fenced(_part_delivery(item) for _, part in many for item in part):
                        each = await run_rows_together(
                            conn, [(step, self._many_bound(part)) for step, part in many]
                        )
                    for (_, part), rows in zip(many, each, strict=True):
                        lost += _not_held(part, rows)
                for part in alone:
                    async with _fenced(map(_part_delivery, part)):
                        lost += await self._settle_alone(conn, part)
        except Exception:  # rolled back (atomic): nothing of the group committed
            for d, _ in items:
                d.settled = False  # nothing committed: they can still be settled or given back
            return None
        met: list[LeaseLost | None] = [None] * len(items)
        for i in lost:
            d, decision = items[i]
            met[i] = self._lost(d, decision.label)
        return met

    async def claim_settling(
        self,
        conn: Connection,
        limit: int,
        group: str | None,
        items: list[tuple[Delivery, Decision]],
    ) -> ClaimSettled:
        """``ack_claim``: the items' rows finished by their tokens, then a claim, in one
        statement and one commit (where the file has none, ``ack_many`` and the claim in one
        script: one transaction, one trip). An item whose row no longer held its token (its
        lease expired and another claim took the row) met LeaseLost. When it raises, nothing
        of it committed: the items wait for the next claim, or are written on their own."""
        params: dict[str, Any] = dict(self.claim_params(limit, group))
        deliveries = [d for d, _ in items]
        if self._ack_then_claim:
            async with _fenced(deliveries):  # the tokens bound once it is up
                acked, claimed = await run_rows_together(
                    conn,
                    [
                        (self.steps.many[S.ACK], {"pairs": _pairs(deliveries)}),
                        (self.steps.claim, params),
                    ],
                )
            names, rows = acked  # ack_many returns the ids it finished, each once
            i_done = names.index("id") if rows else 0
            done = [row[i_done] for row in rows]
            return ClaimSettled(self.deliveries(claimed, tokens=True), self._met(items, done))
        assert self._ack_claim is not None  # defer() checked: the file has it
        async with _fenced(deliveries):
            params["pairs"] = _pairs(deliveries)
            names, rows = await self.rows(conn, self._ack_claim, params)
        i_id, i_finished = names.index("id"), names.index("finished")
        finished = json.loads(rows[0][i_finished]) if rows else []
        leased = [row for row in rows if row[i_id] is not None]  # a row of NULLs: none leased
        return ClaimSettled(
            self.deliveries((names, leased), tokens=True), self._met(items, finished)
        )

    def _met(
        self, items: list[tuple[Delivery, Decision]], finished: list[Any]
    ) -> list[LeaseLost | None]:
        """Per item, None when its row is among the ``finished`` ids (each row once), else the
        LeaseLost it met: every row finished, mostly, and nothing to look up."""
        if len(finished) == len(items):  # the items' ids are distinct (``defer``): all held
            return [None] * len(items)
        done = set(finished)
        return [None if d.message.id in done else self._lost(d, "ack") for d, _ in items]

    async def _settle_alone(
        self, conn: Connection, part: list[tuple[int, Delivery, Decision]]
    ) -> list[int]:
        """Run a part of one delivery by its own statement; its index when its row no longer
        held its token."""
        ((i, d, decision),) = part
        params = {**self.bound(d, decision), "token": d.token}
        result = await self.run(conn, self._settle_step(decision), params)
        return [] if result.rowcount else [i]

    def _many_bound(self, part: list[tuple[int, Delivery, Decision]]) -> dict[str, Any]:
        """What a part's ``_many`` statement binds: its rows' ids and tokens (``pairs``)."""
        many = cast(dict[str, Any], self.many_params(part))  # a fresh dict of its own
        many["pairs"] = _pairs(map(_part_delivery, part))
        return many

    async def return_unstarted(self, conn: Connection | None, d: Delivery) -> bool:
        await self.give_back(conn, d)
        return True

    progress_apart = True

    async def progress(self, conn: Connection, d: Delivery, params: dict[str, Any]) -> None:
        """Under the delivery's lock (the extension moves the token), guarded by its token;
        LeaseLost when the row no longer holds it."""
        async with d.lock:
            if d.settled:
                return
            progress = present(self.steps.progress, self.queue.rendered, "progress")
            result = await self.run(conn, progress, {**params, "token": d.token})
            if not result.rowcount:
                raise self._lost(d, "progress")

    async def extend(self, conn: Connection, d: Delivery) -> bool:
        """Move the lease forward while the handler runs; False once it is lost or settled."""
        async with d.lock:
            if d.settled or d.lost:
                return False
            result = await self.run(
                conn,
                self._extend,
                {"id": d.message.id, "token": d.token, "lease_s": self.queue.lease_s},
            )
            if not result.rowcount:
                d.lost = True
                log.warning(
                    "queue %s: the lease of message %s was lost before it could be extended",
                    self.queue.name,
                    d.message.id,
                )
                return False
            d.token = result.rows[0]["new_token"]
            return True

    async def give_back(self, conn: Connection | None, d: Delivery) -> None:
        """Clear the lease at once; for a delivery never started, undo the claim's count too."""
        async with d.lock:
            if d.settled or d.lost or conn is None or conn.closed:
                d.settled = True
                return
            d.settled = True
            try:
                if conn.in_transaction:
                    await conn.rollback()
                # a row whose handler never started gets its claim's count back (unclaim)
                await self.run(
                    conn,
                    self._release if d.started else self._unclaim,
                    {"id": d.message.id, "token": d.token},
                )
            except BaseException:
                d.settled = False  # not given back after all: another connection may yet
                raise

    async def release_elsewhere(
        self, connect: Callable[[], Awaitable[Connection]], deliveries: list[Delivery]
    ) -> int:
        """One try on a fresh connection; when the database is away the leases return as they
        expire."""
        if not deliveries:
            return 0
        try:
            async with await connect() as other:
                for d in deliveries:
                    await self.give_back(other, d)
        except Exception as exc:
            log.info(
                "queue %s: could not release %d leases (%s); they return when they expire",
                self.queue.name,
                len(deliveries),
                exc,
            )
            return 0
        return len(deliveries)

    async def maintain(self, upkeep: Upkeep) -> None:
        """Move the held leases forward every lease_s / 3 seconds on a connection of its own.

        Its failures never end drain() or run(): a lost connection is replaced (at once, then
        with the consumer's backoff while the database is away); a lease it cannot extend
        expires and its row is delivered again.
        """
        every = max((self.queue.lease_s or 30.0) / 3, 0.05)
        backoff = upkeep.backoff()  # a failure retries at once, then backs off (up to `every`)
        conn: Connection | None = None
        delay = every
        try:
            while True:
                await asyncio.sleep(delay)
                delay = every
                if not upkeep.held:
                    continue
                if conn is None or conn.closed:
                    try:
                        conn = await upkeep.connect()
                    except ConnectionLost as exc:
                        upkeep.outage.failed(exc)
                        delay = min(backoff.next(), every)
                        continue
                    except Exception as exc:
                        log.warning(
                            "queue %s: lease extension cannot connect (%s); retrying",
                            self.queue.name,
                            exc,
                        )
                        delay = min(backoff.next(), every)
                        continue
                    upkeep.outage.back()
                try:
                    # the writer turn first, then each delivery's lock, never the other way
                    # round: a settlement holding a delivery's lock may wait for the writer
                    # turn (SQLite), so a delivery being settled now is skipped, not awaited
                    async with conn.writing():
                        for d in list(upkeep.held):
                            if d.lock.locked():
                                continue
                            if await self.extend(conn, d):
                                upkeep.counts.add("extended")
                    backoff.reset()
                except ConnectionLost as exc:
                    log.info(
                        "queue %s: lease extension lost its connection (%s); reconnecting",
                        self.queue.name,
                        exc,
                    )
                    await conn.close()
                    delay = min(backoff.next(), every)
                except Exception as exc:
                    if isinstance(exc, DatabaseError) and exc.deadlock:  # a race: next round
                        upkeep.counts.add("conflicts")
                        log.debug("queue %s: lease extension conflicted (%s)", self.queue.name, exc)
                    else:
                        log.warning(
                            "queue %s: lease extension failed (%s); retrying",
                            self.queue.name,
                            exc,
                        )
                    delay = min(backoff.next(), every)
        finally:
            if conn is not None:
                await conn.close()


#: the delivery of a ``many_parts`` item ``(index, delivery, decision)``
_part_delivery = itemgetter(1)


def _not_held(part: list[tuple[int, Delivery, Decision]], got: Rows) -> list[int]:
    """The indexes of a part's items whose rows its ``_many`` statement did not touch (they
    no longer held their tokens): none, mostly."""
    names, rows = got
    if len(rows) == len(part):  # a row each (a part's ids are distinct): every one held
        return []
    i_id = names.index("id") if rows else 0
    touched = {row[i_id] for row in rows}
    return [i for i, d, _ in part if d.message.id not in touched]


#: JSON text of a ``pairs`` list: ``json.dumps(pairs, default=str)`` (a token the driver gave
#: as a datetime, as its text), with one encoder kept rather than one made a call, and no
#: check for circular lists, which the fresh lists of ids and tokens cannot be
_pairs_json = json.JSONEncoder(default=str, check_circular=False).encode


def _pairs(deliveries: Iterable[Delivery]) -> str:
    """The ``pairs`` a ``_many`` statement binds: each row's id and the token its delivery
    holds now (bound inside ``_fenced``, after an extension in flight has moved it)."""
    return _pairs_json([[d.message.id, d.token] for d in deliveries])


class _fenced:
    """Settling these deliveries: each is marked settled first, with no await between, so an
    extension or progress write not yet started sees it and touches nothing; one in flight
    holds the delivery's lock and is waited for (its new token is the one to bind), and the
    locks are held until the statement has run."""

    __slots__ = ("_busy",)

    def __init__(self, deliveries: Iterable[Delivery]) -> None:
        busy: list[asyncio.Lock] | None = None
        for d in deliveries:  # every one marked before the first await
            d.settled = True
            lock = d._lock  # made on first use: none, or not locked, means none in flight
            if lock is not None and lock.locked():
                if busy is None:
                    busy = []
                busy.append(lock)
        self._busy = busy

    def __aenter__(self) -> Awaitable[None]:
        return NOTHING if self._busy is None else self._acquire(self._busy)

    def __aexit__(self, *exc: object) -> Awaitable[None]:
        if self._busy is not None:
            for lock in self._busy:
                lock.release()
        return NOTHING  # None: an exception goes on

    @staticmethod
    async def _acquire(busy: list[asyncio.Lock]) -> None:
        taken = 0
        try:
            for lock in busy:
                await lock.acquire()
                taken += 1
        except BaseException:  # cancelled while waiting: the locks taken go back
            for lock in busy[:taken]:
                lock.release()
            raise
