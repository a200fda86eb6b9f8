"""A consumer's moving parts: its settings, the loop each worker runs, and the listener that
wakes idle workers.

``ConsumerSettings`` holds what ``Consumer(...)`` takes after ``handle``, checked once.
``WorkerLoop`` is one worker: it keeps a connection (reconnecting with backoff), claims a
batch, runs it (``Consumer`` turns each delivery's handler into a decision) or sleeps when
there is nothing to claim, and after a failure closes its connection and backs off.
``Listener`` is the task that LISTENs on PostgreSQL and pokes the idle workers' ``Wakeup``
at each notification. A ``Run`` is what one ``drain()`` or ``run()`` shares among them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from runtime.backoff import Backoff, Outage
from runtime.completer import WindowedCompleter, completer_for, held_of
from runtime.contract.errors import (
    BrokerError,
    ConfigurationError,
    ConnectionLost,
    DatabaseError,
    InvalidArgument,
    LeaseLost,
)
from runtime.contract.rendered import Step
from runtime.counts import Counts
from runtime.delivery import Batch, Delivery
from runtime.drivers.base import Connection
from runtime.forms import Form
from runtime.handler import check_timeout
from runtime.metrics import Metrics, call, fields
from runtime.outcomes import RetryPolicy
from runtime.settle import Decision
from runtime.steps import run_step
from runtime.wake import Wakeup

log = logging.getLogger("runtime")

#: drain() gives up after this many failed batches in a row (run() keeps backing off)
MAX_FAILED_BATCHES = 5
#: the first wait before reconnecting to a database that went away (then doubling, jittered)
FIRST_RECONNECT_DELAY = 0.1
#: seconds a listening connection may stay quiet before a heartbeat checks it, and how long
#: the heartbeat waits for its answer: a half-open connection is replaced within their sum
LISTEN_HEARTBEAT_S = 30.0
LISTEN_HEARTBEAT_TIMEOUT_S = 10.0
#: an idle worker sleeps this much past a delayed message's due time (the clocks' resolution)
DUE_MARGIN = 0.005
#: how long a cancelled worker may take to write the settlements its next claim was to write
DEFERRED_WRITE_S = 5.0


def _seconds(name: str, value: Any, *, zero: bool) -> None:
    """InvalidArgument unless ``value`` is a number of seconds above 0 (``zero``: from 0)."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not (value >= 0 if zero else value > 0):
        bound = "0 or more" if zero else "above 0"
        raise InvalidArgument(
            f"Consumer: {name} must be a number of seconds {bound}, not {value!r}"
        )


def _count(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgument(
            f"Consumer: {name} must be a whole number of at least 1, not {value!r}"
        )


def _flag(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(f"Consumer: {name} must be True or False, not {value!r}")


@dataclass(frozen=True)
class ConsumerSettings:
    """What ``Consumer(db, queue, handle, *, ...)`` takes after ``handle`` (see ``Consumer``),
    each checked once here: a value out of range is an InvalidArgument naming it."""

    group: str | None = None
    transactional: bool = False
    concurrency: int = 4
    batch: int = 10
    poll_interval: float = 0.05
    max_poll_interval: float = 2.0
    handler_timeout: float | None = None
    stop_timeout: float = 30.0
    settle_window: float = 0.02
    outage_timeout: float = 60.0
    max_reconnect_interval: float = 5.0
    metrics: Metrics | None = None
    retry_policy: RetryPolicy | None = None
    schedules: bool = False

    def __post_init__(self) -> None:
        if self.group is not None and not isinstance(self.group, str):
            raise InvalidArgument(f"Consumer: group must be a string or None, not {self.group!r}")
        _flag("transactional", self.transactional)
        _flag("schedules", self.schedules)
        _count("concurrency", self.concurrency)
        _count("batch", self.batch)
        for name in ("poll_interval", "max_poll_interval", "max_reconnect_interval"):
            _seconds(name, getattr(self, name), zero=False)
        for name in ("stop_timeout", "settle_window", "outage_timeout"):
            _seconds(name, getattr(self, name), zero=True)
        check_timeout(self.handler_timeout)
        if self.retry_policy is not None and not callable(
            getattr(self.retry_policy, "delay", None)
        ):
            raise InvalidArgument(
                f"Consumer: retry_policy must have a delay(attempt) method (runtime.Immediate(), "
                f"runtime.ExponentialBackoff(...)), not {self.retry_policy!r}"
            )

    def reconnect_backoff(self) -> Backoff:
        """The delays between reconnects: 0.1 s doubling up to max_reconnect_interval."""
        cap = self.max_reconnect_interval
        return Backoff(min(FIRST_RECONNECT_DELAY, cap), cap)

    def failure_pause(self, failures: int) -> float:
        """How long a worker waits after ``failures`` failed claims or batches in a row."""
        return float(min(self.poll_interval * 2**failures, self.max_poll_interval))


@dataclass(eq=False)
class Run:
    """What one ``drain()`` or ``run()`` of a consumer shares among its workers and listener."""

    #: the queue's name, for log lines
    name: str
    settings: ConsumerSettings
    form: Form
    #: this call's counts
    counts: Counts
    #: claimed, not yet settled (the lease extender reads it)
    held: set[Delivery]
    wakeup: Wakeup
    stopping: asyncio.Event
    outage: Outage
    #: drain(): return once nothing is claimable, give up on a long outage
    until_empty: bool
    #: opens a checked worker connection
    connect: Callable[[], Awaitable[Connection]]
    #: runs a delivery's handler: the decision that settles it
    decide: Callable[[Connection, Delivery], Awaitable[Decision]]
    #: the error to stop with when a claim failed because the schema is missing
    missing_schema: Callable[[Exception], ConfigurationError | None]
    #: the step that says when the first delayed message becomes due (None: none)
    next_due: Step | None


class WorkerLoop:
    """One worker: claim a batch, deliver it, sleep when idle; reconnect when its connection
    is gone, back off after a failure. ``await WorkerLoop(run).work()``."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.settings = run.settings
        self.conn: Connection | None = None
        #: how long the next idle sleep may last (doubling while idle)
        self.idle = run.settings.poll_interval
        #: failed claims or batches in a row
        self.failures = 0
        #: when the worker's last connection died
        self.lost_at: float | None = None
        #: reset by each claim that works
        self.backoff = run.settings.reconnect_backoff()
        #: rows a lost connection held (lease): settled or given back on the next one
        self.orphans: list[Delivery] = []
        #: settlements the next claim writes in its own statement (``Form.defer``)
        self.deferred: list[tuple[Delivery, Decision]] = []
        #: ``deferred`` outlived the connection they were to be settled on (lease: the claim
        #: on the new one settles them, counted as resettled)
        self.deferred_lost = False
        #: commits the settlements of each batch the worker runs, one after another
        self.completer = completer_for(run.form, run.counts, run.held, run.settings.settle_window)

    async def work(self) -> None:
        run = self.run
        try:
            while not run.stopping.is_set():
                woken = run.wakeup.signal()  # a poke from here on cuts the idle sleep short
                conn = await self._ensure_connection()
                if conn is None:  # stopped while the database was away
                    break
                if self.orphans and not await self._adopt_orphans(conn):
                    continue
                claimed = await self._claim(conn)
                if claimed is None:
                    continue
                if claimed:
                    await self._deliver(conn, claimed)
                elif claimed.raced:  # others settled what it held: the queue moved on
                    continue
                elif claimed.contended or not run.until_empty:
                    await self._idle(conn, claimed, woken)
                else:  # drain(): nothing claimable (that claim wrote what was deferred)
                    break
            if self.orphans:  # stopped before a connection came back: one try on a fresh one
                await self._adopt_elsewhere(self.orphans)
        except asyncio.CancelledError:
            # cancelled (a stop that timed out, a sibling worker that failed): what waited for
            # the next claim is written still, within a bound (else its rows return when the
            # connection closes, and are delivered again)
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._settle_deferred(), DEFERRED_WRITE_S)
            raise
        except BaseException:
            await self._settle_deferred()
            raise
        else:
            await self._settle_deferred()
        finally:
            self.completer.close()
            if self.conn is not None:
                await self.conn.close()

    # ------------------------------------------------------------------ connection

    async def _ensure_connection(self) -> Connection | None:
        """The worker's connection; a new one when it has none or it was closed (None: stop()
        came while the database was away)."""
        conn = self.conn
        if conn is not None and not conn.closed:
            return conn
        self.conn = await self._reconnect()
        self.lost_at = None
        self.deferred_lost = bool(self.deferred)  # their claim is on this new connection
        metrics = self.settings.metrics
        if conn is not None and self.conn is not None and metrics is not None:
            call(metrics, "on_reconnect")
        return self.conn

    async def _reconnect(self) -> Connection | None:
        """A fresh worker connection: at once, then with backoff while the database is away
        (or while each new connection dies before it claimed anything).

        None when stop() came first. ConfigurationError (and any BrokerError but
        ConnectionLost) is raised at once; drain() raises ConnectionLost once the outage has
        lasted ``outage_timeout`` seconds.
        """
        run, s = self.run, self.settings
        while True:
            delay = self.backoff.next()
            if delay:
                if run.until_empty:  # wake up in time to give up on time
                    delay = min(delay, s.outage_timeout - run.outage.elapsed() + 0.01)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(run.stopping.wait(), max(delay, 0))
                if run.stopping.is_set():
                    return None
            try:
                conn = await run.connect()
            except ConnectionLost as exc:
                run.outage.failed(exc, self.lost_at)
                gone = run.outage.elapsed()
                if run.until_empty and gone >= s.outage_timeout:
                    raise ConnectionLost(
                        f"queue {run.name}: no database for {gone:.1f} s, past "
                        f"outage_timeout={s.outage_timeout}s (drain() gives up; run() "
                        f"keeps trying); last error: {exc}"
                    ) from exc
                continue
            run.outage.back()
            return conn

    async def _lost(self, conn: Connection, exc: BaseException, what: str) -> None:
        """The connection was lost ``what`` (the next turn reconnects, at once then with
        backoff)."""
        log.info("queue %s: connection lost %s (%s); reconnecting", self.run.name, what, exc)
        self.lost_at = time.monotonic()
        await conn.close()

    # ----------------------------------------------------------------- claiming

    async def _claim(self, conn: Connection) -> Batch | None:
        """A claimed batch (maybe empty); None when the claim failed and the worker should
        turn again (lost, a conflict, a failure it backed off from)."""
        run, s = self.run, self.settings
        deferred = self.deferred
        try:
            if deferred:  # the last batch's settlements, in the same statement
                settled = await run.form.claim_settling(conn, s.batch, s.group, deferred)
                claimed, self.deferred = settled.batch, []
                done = held_of(run.counts, deferred, settled.met)
                run.counts.settled_all(done)
                if self.deferred_lost:  # lost with a connection, run again on this one
                    run.counts.add("resettled", len(done))
                    self.deferred_lost = False
            else:
                claimed = await run.form.claim_within_rate(conn, s.batch, s.group)
        except ConnectionLost as exc:  # what is left of deferred waits for the next claim
            await self._lost(conn, exc, "while claiming")
            return None
        except Exception as exc:
            missing = run.missing_schema(exc)
            if missing is not None:  # claiming again cannot help
                raise missing from None
            # nothing of the claim committed: what it was to settle is written now, on this
            # connection (an advisory key's), before it is replaced or the worker backs off
            await self._settle_deferred()
            if self._conflict(exc, "a claim"):  # nothing was claimed: claim again
                self.conn = await self._after_conflict(conn)
                return None
            # a deadlock (InnoDB rolls the claim back whole), SQLite's write lock busy past
            # its timeout: nothing was claimed, so back off and claim again
            self.failures += 1
            log.exception(
                "queue %s: claim failed (failure %d in a row); trying again",
                run.name,
                self.failures,
            )
            if self._gives_up():
                raise
            await self._after_failure(conn)
            return None
        self.backoff.reset()
        if len(claimed) >= s.batch:  # maybe more: wake one more idle worker
            run.wakeup.poke()
        if claimed and s.metrics is not None:
            call(s.metrics, "on_claim", len(claimed))
        return claimed

    async def _idle(self, conn: Connection, claimed: Batch, woken: int) -> None:
        """Nothing to claim: a short pause when other workers hold every ready row; otherwise
        sleep until an enqueue wakes the worker, a delayed message becomes due, or ``idle``
        seconds have passed (doubling up to max_poll_interval while nothing comes)."""
        s = self.settings
        if claimed.contended:  # other workers hold every ready row for now
            await asyncio.sleep(s.poll_interval / 10)
        elif not await self.run.wakeup.wait(woken, await self._idle_for(conn)):
            self.idle = min(self.idle * 2, s.max_poll_interval)

    async def _idle_for(self, conn: Connection) -> float:
        """How long an idle worker sleeps: ``idle``, or less when a delayed message becomes
        due sooner (by the database's clock)."""
        run, idle = self.run, self.idle
        if run.next_due is None:
            return idle
        try:
            params = run.form.claim_params(0, self.settings.group)
            result = await run_step(conn, run.next_due, params)
        except BrokerError:  # the next claim finds out (and reconnects)
            return idle
        due = result.rows[0]["due_s"] if result.rows else None
        return idle if due is None else min(idle, max(float(due), 0.0) + DUE_MARGIN)

    # ---------------------------------------------------------------- delivering

    async def _deliver(self, conn: Connection, claimed: Batch) -> None:
        """Run a claimed batch; a failure is counted, then the worker backs off."""
        run = self.run
        self.idle = self.settings.poll_interval
        try:
            self.orphans = await self._deliver_batch(conn, claimed)
            self.failures = 0
        except Exception as exc:
            if self._conflict(exc, "a batch"):  # its unsettled rows returned
                self.conn = await self._after_conflict(conn)
                return
            # a lock wait timeout, a statement the engine refused: the batch's unsettled
            # rows returned (rolled back, released or unlocked)
            self.failures += 1
            run.counts.add("failed_batches")
            log.exception(
                "queue %s: a batch failed; its unsettled rows return (failure %d in a row)",
                run.name,
                self.failures,
            )
            if self._gives_up():
                raise
            await self._after_failure(conn)
        if conn.closed and self.lost_at is None:  # lost mid-batch: its rows were given back
            self.lost_at = time.monotonic()

    async def _deliver_batch(self, conn: Connection, claimed: Batch) -> list[Delivery]:
        """Run a claimed batch; the rows still held when its connection was lost (lease: the
        worker settles or gives them back on its next connection, ``_adopt``)."""
        run, form = self.run, self.run.form
        run.held.update(claimed)
        completer = self.completer
        stopping = run.stopping
        try:
            # the deliveries whose leases the extender found gone (another claim has their
            # rows) are skipped; how many were taken up, in order, before the worker stopped
            started = await completer.deliver(conn, claimed, run.decide, stopping, self._skip_lost)
            # the worker claims again at once unless it stops (or its connection is gone):
            # what that claim can settle waits for it (one statement for both)
            again = not (stopping.is_set() or conn.closed)
            await completer.finish(conn, defer=again)
            self.deferred = completer.deferred
            for d in claimed[started:]:  # claimed, never started: back at once
                if await form.return_unstarted(conn, d):
                    run.counts.add("released")
            await form.end_batch(conn, again=again and not stopping.is_set())
            completer.committed()
        except ConnectionLost as exc:
            return await self._lost_mid_batch(conn, claimed, exc)
        except BaseException:
            with contextlib.suppress(Exception):
                await form.abort_batch(conn)
            await self._release_elsewhere([d for d in claimed if not d.settled])
            raise
        finally:
            completer.drop()
            run.held.difference_update(claimed)
        return []

    async def _settle_deferred(self) -> None:
        """The worker will not claim again on this connection now (it stops, or its claim
        failed): what that claim was to settle is written on its own. Rows under advisory
        keys, which live in the session, on the keys' connection (rows whose keys went with a
        lost connection return, to be delivered again); leased rows by their tokens, on this
        connection or, when it is gone, on a fresh one."""
        deferred, self.deferred = self.deferred, []
        self.deferred_lost = False
        conn = self.conn
        alive = conn is not None and not conn.closed
        if self.run.form.holds_outlive_connection:  # lease: the tokens settle them anywhere
            mine = deferred
            if not alive and deferred:  # one try on a fresh connection, as they decided
                for d, _ in deferred:
                    d.settled = False  # nothing committed them yet
                await self._adopt_elsewhere([d for d, _ in deferred])
                return
        else:
            mine = [(d, decision) for d, decision in deferred if alive and d.conn is conn]
        if len(mine) < len(deferred):
            log.info(
                "queue %s: %d acked rows were not finished: their keys went with their "
                "connection, so the rows return and are delivered again",
                self.run.name,
                len(deferred) - len(mine),
            )
        if not mine or conn is None:
            return
        for d, _ in mine:
            d.settled = False  # nothing committed them yet
        run, completer = self.run, self.completer
        # only a windowed completer defers (``WindowedCompleter.finish``): it writes them
        assert isinstance(completer, WindowedCompleter)
        try:
            await completer.write(conn, mine)
        except Exception as exc:  # keys go when the connection closes, leases expire: the
            # rows return
            log.info(
                "queue %s: writing the settlements of a batch that waited for the next claim "
                "failed (%s)",
                run.name,
                exc,
            )

    async def _lost_mid_batch(
        self, conn: Connection, claimed: Batch, exc: ConnectionLost
    ) -> list[Delivery]:
        """The batch's connection was lost: the rows the form still holds (lease) are
        settled or given back on the next connection."""
        log.warning(
            "queue %s: connection lost mid-batch (%s); its unsettled rows return "
            "(row lock: rolled back; advisory: unlocked; lease: settled as their handlers "
            "decided, or released, once a connection is back)",
            self.run.name,
            exc,
        )
        self.run.counts.add("connection_lost")
        with contextlib.suppress(Exception):
            await self.run.form.abort_batch(conn)  # keys held in this process go too
        await conn.close()
        if self.run.form.holds_outlive_connection:
            return [d for d in claimed if not d.settled]
        return []

    def _skip_lost(self, d: Delivery) -> None:
        run = self.run
        d.settled = True
        run.held.discard(d)
        log.warning(
            "queue %s: message %s lost its lease before its handler started: not handled here",
            run.name,
            d.message.id,
            extra=fields(run.name, d.message.id, d.attempt, "lease_lost"),
        )
        run.counts.add("lease_lost")

    async def _release_elsewhere(self, deliveries: list[Delivery]) -> None:
        """The form gives back, on a fresh connection, rows whose worker connection is gone."""
        released = await self.run.form.release_elsewhere(self.run.connect, deliveries)
        if released:
            self.run.counts.add("released", released)

    # ------------------------------------------------------------------ failures

    def _gives_up(self) -> bool:
        """drain() gives up after MAX_FAILED_BATCHES failures in a row (run() never does)."""
        return self.run.until_empty and self.failures >= MAX_FAILED_BATCHES

    async def _after_failure(self, conn: Connection) -> None:
        """After a failed claim or batch: a fresh connection for the next claim, after a
        pause that doubles with each failure in a row."""
        await conn.close()
        await asyncio.sleep(self.settings.failure_pause(self.failures))

    def _conflict(self, exc: BaseException, what: str) -> bool:
        """True for a conflict with another transaction (an InnoDB deadlock, a Galera node's
        certification conflict, a serialization failure): the database rolled ``what`` back
        whole. A race between consumers, not a failure: counted as ``conflicts`` (and
        ``on_conflict``), logged at DEBUG, retried; never a step towards giving up."""
        if not (isinstance(exc, DatabaseError) and exc.deadlock):
            return False
        self.run.counts.add("conflicts")
        log.debug(
            "queue %s: %s was rolled back by a conflicting transaction (%s); trying again",
            self.run.name,
            what,
            exc,
        )
        return True

    async def _after_conflict(self, conn: Connection) -> Connection | None:
        """The worker's connection after a conflict: kept (its transaction ended), unless the
        form's holds live in the session (advisory keys a failed statement may have taken),
        then closed and replaced quietly (None: not counted as a reconnect). A short random
        pause first, so the racing consumers do not meet again at once."""
        await asyncio.sleep(random.uniform(0, self.settings.poll_interval / 5))
        if conn.in_transaction and not conn.closed:
            await conn.rollback()
        if self.run.form.session_holds and not conn.closed:
            await conn.close()
            return None
        return conn

    # ------------------------------------------------------------------- orphans

    async def _adopt_orphans(self, conn: Connection) -> bool:
        """Settle or give back the rows a lost connection held; False when this connection
        was lost too (the next one tries)."""
        try:
            await self._adopt(conn, self.orphans)
        except ConnectionLost as exc:
            await self._lost(conn, exc, "while settling the rows of a lost connection")
            return False
        except Exception as exc:
            self._abandon(self.orphans, exc)
        self.orphans = []
        return True

    async def _adopt(self, conn: Connection, orphans: list[Delivery]) -> None:
        """Settle or give back, on a new connection, the rows a lost one held (lease: the rows
        still hold their tokens, which guard every statement here), rather than leaving them
        to wait out their leases. A delivery whose handler had finished settles as it decided
        (its settlement was lost with the connection, or never ran; not transactional, so
        nothing of it was in the lost transaction); every other is given back at once, an
        unstarted one with its claim's count undone. A settlement that touches no row
        either committed before the connection was lost or lost its lease to another claim.
        Raises ConnectionLost when this connection is lost too (the rest wait for the next)."""
        run, form = self.run, self.run.form
        for d in orphans:
            if d.settled or d.lost:
                continue
            decision = d.decision
            if decision is None or not form.retries_settlement():
                await form.give_back(conn, d)
                run.counts.add("released")
                continue
            try:
                await form.settle(conn, d, decision)
            except LeaseLost:
                log.info(
                    "queue %s: message %s: its %s, run again after its connection was lost, "
                    "touched no row: it had committed before the loss, or the lease expired "
                    "and another claim took the row",
                    run.name,
                    d.message.id,
                    decision.label,
                    extra=fields(run.name, d.message.id, d.attempt, decision.label),
                )
                run.counts.add("lease_lost")
                continue
            run.counts.settled(decision.label, d)
            run.counts.add("resettled")

    async def _adopt_elsewhere(self, orphans: list[Delivery]) -> None:
        """One try, on a fresh connection, at the rows a lost connection held (stopping)."""
        try:
            async with await self.run.connect() as other:
                await self._adopt(other, orphans)
        except Exception as exc:
            self._abandon(orphans, exc)

    def _abandon(self, orphans: list[Delivery], exc: Exception) -> None:
        left = sum(not (d.settled or d.lost) for d in orphans)
        if left:
            log.warning(
                "queue %s: could not settle or give back %d rows a lost connection held "
                "(%s); they return when their leases expire",
                self.run.name,
                left,
                exc,
            )


class Listener:
    """One connection LISTENs on the queue's channel (``listen``, PostgreSQL) and pokes the
    idle workers at each notification. When it is lost the workers poll, and it listens
    again with backoff. ``await Listener(run, listen).listen()``."""

    def __init__(self, run: Run, listen: Step) -> None:
        self.run = run
        self.step = listen
        self.backoff = run.settings.reconnect_backoff()
        #: the last attempt failed (logged once until it listens again)
        self.lost = False

    async def listen(self) -> None:
        run = self.run
        while not run.stopping.is_set():
            try:
                await self._listen_once()
            except ConfigurationError:
                return  # the workers raise it too (a missing table, a refused login)
            except Exception as exc:  # lost, refused: poll meanwhile, never stop consuming
                # INFO: an outage of the database is the workers' one warning to give
                if not self.lost:
                    log.info(
                        "queue %s: not listening for enqueues (%s); polling every %s s at "
                        "most until it listens again",
                        run.name,
                        exc,
                        run.settings.max_poll_interval,
                    )
                self.lost = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(run.stopping.wait(), self.backoff.next())

    async def _listen_once(self) -> None:
        """Listen on one connection until it is lost or the consumer stops."""
        run = self.run
        conn = await run.connect()
        try:
            await run_step(conn, self.step, {})
            if self.lost:
                log.info("queue %s: listening for enqueues again", run.name)
            self.lost = False
            self.backoff.reset()
            run.wakeup.poke()  # what was enqueued while it was away: claim once
            while not run.stopping.is_set():
                async for _ in conn.notifies(timeout=LISTEN_HEARTBEAT_S):
                    run.wakeup.poke()
                await self._heartbeat(conn)
        finally:
            await conn.close()

    async def _heartbeat(self, conn: Connection) -> None:
        """A quiet listening connection may be half-open (the server or the network gone
        without a word): one round trip, answered within LISTEN_HEARTBEAT_TIMEOUT_S, or the
        connection is dropped (ConnectionLost) and the listener connects again."""
        try:
            await asyncio.wait_for(conn.ping(), LISTEN_HEARTBEAT_TIMEOUT_S)
        except TimeoutError:
            await conn.abort()
            raise ConnectionLost(
                f"the listening connection did not answer a heartbeat within "
                f"{LISTEN_HEARTBEAT_TIMEOUT_S:g} s"
            ) from None
