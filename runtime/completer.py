"""How settlements are committed: one at a time as each handler finishes (inline), or those of
quick handlers together in one transaction (windowed). One component, whatever the form."""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from operator import itemgetter

from runtime.contract.errors import DatabaseError, LeaseLost
from runtime.counts import Counts
from runtime.delivery import Delivery
from runtime.drivers.base import Connection
from runtime.forms import Form
from runtime.settle import Decision

log = logging.getLogger("runtime")

#: the delivery of a ``(delivery, decision)`` item
_delivery = itemgetter(0)
#: how many times a settlement rolled back by a conflicting transaction is run (lease)
SETTLE_TRIES = 3
#: runs a delivery's handler on the worker's connection: the decision that settles it
#: (``decide(conn, d)``; passed as it is, not wrapped per delivery)
Decide = Callable[[Connection, Delivery], Awaitable[Decision]]
#: a delivery whose lease was found gone before its handler started: not handled here
#: (without one, ``deliver`` runs every delivery's handler)
Skip = Callable[[Delivery], None]


class Completer:
    """Commits each settlement on its own, as its handler finishes (inline)."""

    def __init__(self, form: Form, counts: Counts, held: set[Delivery]) -> None:
        self.form = form
        self.counts = counts
        #: claimed, not yet settled (the lease form extends these)
        self.held = held
        #: written, counted when the batch commits (row lock)
        self.uncommitted: list[tuple[Delivery, Decision]] = []
        #: the settlements the connection's next claim is to write (``finish`` with ``defer``)
        self.deferred: list[tuple[Delivery, Decision]] = []
        #: how many of the current batch's deliveries ``deliver`` has taken up
        self.started = 0

    async def handle(self, conn: Connection, d: Delivery, decide: Decide) -> None:
        """Run the delivery's handler (``decide(conn, d)``) and settle it (or queue its
        settlement)."""
        await self.settle(conn, d, await decide(conn, d))
        self.held.discard(d)

    async def deliver(
        self,
        conn: Connection,
        claimed: Sequence[Delivery],
        decide: Decide,
        stopping: asyncio.Event,
        skip: Skip | None = None,
    ) -> int:
        """Run a batch's handlers in order until the worker stops; how many deliveries were
        taken up (the rest were never started)."""
        await self._run(conn, self._runnable(claimed, stopping, skip), decide)
        return self.started

    async def _run(self, conn: Connection, runnable: Iterator[Delivery], decide: Decide) -> None:
        """The handlers of these deliveries, in one coroutine: each settled as ``handle``
        does."""
        for d in runnable:
            await self.handle(conn, d, decide)

    def _runnable(
        self, claimed: Sequence[Delivery], stopping: asyncio.Event, skip: Skip | None
    ) -> Iterator[Delivery]:
        """The batch's deliveries whose handlers are to run, in order, until the worker stops
        (checked before each); ``started`` counts those taken up, skipped ones included."""
        self.started = 0
        for d in claimed:
            if stopping.is_set():
                return
            self.started += 1
            if d.lost and skip is not None:
                skip(d)
            else:
                yield d

    async def finish(self, conn: Connection, defer: bool = False) -> None:
        """Write whatever waits: the batch's last handler has run. ``defer``: the worker
        claims again at once, so what the form can settle in that claim waits for it
        (``deferred``)."""

    def committed(self) -> None:
        """The batch's COMMIT went through: count what it settled (row lock)."""
        if self.uncommitted:
            self.counts.settled_all(self.uncommitted)
            self.uncommitted.clear()

    def drop(self) -> None:
        """The batch is over (or failed, its rows returning unsettled): forget whatever
        waits, ready for the worker's next batch (``deferred`` was handed on before)."""
        self.uncommitted.clear()
        self.deferred = []

    def close(self) -> None:
        """The worker is done with it."""

    async def settle(self, conn: Connection, d: Delivery, decision: Decision) -> None:
        for attempt in range(1, SETTLE_TRIES + 1):
            try:
                await self.form.settle(conn, d, decision)
            except LeaseLost as exc:
                self.lost(exc)
                return
            except DatabaseError as exc:
                # a conflicting transaction rolled the settlement back: run it again where
                # the form's guard makes that safe (lease), else the batch fails and the row
                # returns
                if (
                    not exc.deadlock
                    or attempt == SETTLE_TRIES
                    or not self.form.retries_settlement()
                ):
                    raise
                self.counts.add("conflicts")
                log.debug(
                    "queue %s: the settlement of message %s was rolled back by a conflicting "
                    "transaction (%s); settling again",
                    self.counts.queue,
                    d.message.id,
                    exc,
                )
                continue
            break
        self.count(d, decision)

    def count(self, d: Delivery, decision: Decision) -> None:
        """A settlement written: counted now, or when its batch commits (row lock)."""
        if self.form.commits_at_batch_end:
            self.uncommitted.append((d, decision))
        else:
            self.counts.settled(decision.label, d)

    def lost(self, exc: LeaseLost) -> None:
        lost_lease(self.counts, exc)


class WindowedCompleter(Completer):
    """The settlements of handlers that finish within ``window`` seconds of the first commit
    together, each by its own guarded statement (lease and advisory, not transactional).

    When the window closes while a handler runs, the waiting settlements are written at once
    (a non-transactional handler does not use the worker's connection); otherwise they are
    written before the next handler starts, and at the end of the batch.
    """

    def __init__(self, form: Form, counts: Counts, held: set[Delivery], window: float) -> None:
        super().__init__(form, counts, held)
        self.window = window
        self.waiting: list[tuple[Delivery, Decision]] = []
        self._handling = False
        self._writing: asyncio.Future[None] | None = None
        #: at most one timer, kept from window to window: one that fires before the open
        #: window's deadline (its own window was written early) is set again for it
        self._timer: asyncio.TimerHandle | None = None
        self._deadline = 0.0
        #: the connection the open window's settlements are written on
        self._conn: Connection | None = None
        #: the event loop's clock (set when a window opens: nothing waits before)
        self._time: Callable[[], float] = time.monotonic

    async def handle(self, conn: Connection, d: Delivery, decide: Decide) -> None:
        await self._run(conn, iter((d,)), decide)

    async def _run(self, conn: Connection, runnable: Iterator[Delivery], decide: Decide) -> None:
        """Before each handler, the waiting settlements are written if their window has
        closed; each decision then waits (opening a window when it is the first)."""
        for d in runnable:
            if self.waiting and self._time() >= self._deadline:
                await self._write(conn)
            self._handling = bool(self.waiting)
            try:
                decision = await decide(conn, d)
            finally:
                self._handling = False
                if self._writing is not None:  # the window closed while the handler ran
                    writing, self._writing = self._writing, None
                    await writing
            if not self.waiting:
                self._open(conn)
            self.waiting.append((d, decision))

    async def finish(self, conn: Connection, defer: bool = False) -> None:
        if not self.waiting:
            return
        if defer and self.form.defer(self.waiting):
            self.deferred = self._take()
            return
        await self._write(conn)

    async def write(self, conn: Connection, items: list[tuple[Delivery, Decision]]) -> None:
        """Write these settlements now, as a window that closed."""
        self.waiting.extend(items)
        await self._write(conn)

    def drop(self) -> None:
        self._take()
        super().drop()

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _open(self, conn: Connection) -> None:
        """A window opens: its deadline, and the timer (unless one is set already: it fires
        no later, and sets itself again for this deadline)."""
        loop = asyncio.get_running_loop()
        self._time = _clock(loop)  # the clock of the deadline, read at each handle() after
        self._deadline = loop.time() + self.window
        self._conn = conn
        if self._timer is None:
            self._timer = loop.call_at(self._deadline, self._closing)

    def _closing(self) -> None:
        self._timer = None
        if not self.waiting:  # its window was written before it closed; none is open
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:  # a window opened since: wait for its deadline
            self._timer = loop.call_at(self._deadline, self._closing)
            return
        if self._handling and self._writing is None and self._conn is not None:
            self._writing = asyncio.ensure_future(self._write(self._conn))

    def _take(self) -> list[tuple[Delivery, Decision]]:
        items, self.waiting = self.waiting, []
        return items

    async def _write(self, conn: Connection) -> None:
        items = self._take()
        met = await self.form.settle_group(conn, items)
        if met is None:  # its transaction failed, nothing committed: one by one, as usual
            for d, decision in items:
                await self.settle(conn, d, decision)
                self.held.discard(d)
            return
        settled = held_of(self.counts, items, met)
        self.held.difference_update(map(_delivery, items))
        if self.form.commits_at_batch_end:
            self.uncommitted.extend(settled)
        else:
            self.counts.settled_all(settled)


class BatchCompleter(WindowedCompleter):
    """Row lock, not transactional: the batch's settlements wait for its last handler, then
    run in the claim's transaction, one statement per outcome, just before its COMMIT (the
    rows stay locked until then whatever the completer does, so waiting costs nothing)."""

    def __init__(self, form: Form, counts: Counts, held: set[Delivery]) -> None:
        super().__init__(form, counts, held, window=math.inf)
        self._deadline = math.inf

    async def _run(self, conn: Connection, runnable: Iterator[Delivery], decide: Decide) -> None:
        """Their settlements wait for the end of the batch (no window, no timer: nothing is
        written while handlers run)."""
        waiting = self.waiting  # nothing takes it before ``finish``
        for d in runnable:
            waiting.append((d, await decide(conn, d)))

    def _open(self, conn: Connection) -> None:
        """No window: the end of the batch writes."""


def _clock(loop: asyncio.AbstractEventLoop) -> Callable[[], float]:
    """The loop's clock as the cheapest call there is: asyncio's own loop reads
    ``time.monotonic``, so that is called directly, with no method of the loop's between (it
    is read before each handler); another loop's ``time``, as it is."""
    if type(loop).time is asyncio.BaseEventLoop.time:
        return time.monotonic
    return loop.time


def lost_lease(counts: Counts, exc: LeaseLost) -> None:
    """A settlement that found its lease gone: logged and counted."""
    log.warning("%s", exc)
    counts.add("lease_lost")


def held_of(
    counts: Counts, items: list[tuple[Delivery, Decision]], met: list[LeaseLost | None]
) -> list[tuple[Delivery, Decision]]:
    """A group's settlements that held, to count (the group itself when all did); each one
    that met a LeaseLost is logged and counted as lost."""
    if len(met) != len(items):
        raise ValueError(f"{len(met)} results for a group of {len(items)} settlements")
    if met.count(None) == len(met):  # every row held: most groups
        return items
    settled = []
    for item, lost in zip(items, met, strict=True):
        if lost is None:
            settled.append(item)
        else:
            lost_lease(counts, lost)
    return settled


def completer_for(form: Form, counts: Counts, held: set[Delivery], window: float) -> Completer:
    """Batched where the form settles with its batch's COMMIT (row lock); windowed where it can
    commit several settlements together and a window is set; inline otherwise."""
    if not form.groups_settlements():
        return Completer(form, counts, held)
    if form.commits_at_batch_end:
        return BatchCompleter(form, counts, held)
    if window > 0:
        return WindowedCompleter(form, counts, held, window)
    return Completer(form, counts, held)
