"""The consumer loop: workers claim batches, run the handler, and settle each delivery by its outcome."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Generic

from runtime.backoff import Backoff, Outage
from runtime.completer import completer_for
from runtime.connect import Opener, opener
from runtime.counts import Counts
from runtime.delivery import Batch, Ctx, Delivery, Message
from runtime.dialects import recognise
from runtime.drivers.base import Connection
from runtime.errors import (
    BrokerError,
    ConfigurationError,
    ConnectionLost,
    DatabaseError,
    InvalidArgument,
    LeaseLost,
    PayloadError,
    UnknownCustomEvent,
)
from runtime.forms import Upkeep, form_for
from runtime.metrics import Metrics, call, fields
from runtime.outcomes import (
    Immediate,
    Outcome,
    RetryPolicy,
    default_retry_policy,
    describe_exception,
    outcome_of,
    retry,
    with_policy,
)
from runtime.payloads import P, decode_payload
from runtime.progress import ProgressWriter
from runtime.queue import Queue, check_dialect, check_server
from runtime.rendered import StatementName as S
from runtime.rendered import Step
from runtime.schedules import Scheduler
from runtime.settle import Decision, dead_letter_now, decide
from runtime.steps import run_step
from runtime.verify import attempt_problem, describe
from runtime.wake import Wakeup, register, unregister

log = logging.getLogger("runtime")

#: ``async def handle(message, ctx)``, or a plain ``def`` run in a worker thread; it returns
#: an Outcome, or None for ack(); ``Handler[Order]`` takes a ``Message[Order]``
Handler = Callable[[Message[P], Ctx], Awaitable[Outcome | None] | Outcome | None]


def _is_async(handle: Any) -> bool:
    """An ``async def`` (also as a partial, or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handle) or inspect.iscoroutinefunction(type(handle).__call__)


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
#: how to create a missing table or column
SCHEMA_FIX = "create it with the file's schema statements: run `qgen apply --db URL`"


class Consumer(Generic[P]):
    """Claims and settles a queue's messages with ``concurrency`` workers, ``batch`` rows a claim.

    ``counts = await Consumer(url, queue, handle).drain()`` runs until nothing is claimable;
    ``db`` is a URL or a function that opens a connection (``lambda: runtime.connect(url,
    sslrootcert="…")``, a pool's acquire), so the service controls credentials and TLS.
    ``run()`` runs until ``stop()``, which lets in-flight deliveries settle and gives back
    the rows it claimed but did not start.

    Lease and advisory, not transactional: the settlements of handlers that finish within
    ``settle_window`` seconds of the first one commit together, each by its own statement
    (one commit for a batch of quick handlers); they are written before the next handler
    starts once that window has passed, and at the end of each batch. ``settle_window=0``
    commits every settlement on its own. A settlement of the same outcome (and delay) as
    others of its group runs as one statement with them (``ack_many`` …). Row lock settles
    with its batch's COMMIT: not transactional, the batch's settlements wait for its last
    handler and run as one statement per outcome just before that COMMIT. Whatever the
    form, a settlement is counted (and handed to the metrics hook) once it has committed.

    When the database goes away (a restart, a failover, a network cut) the workers reconnect
    with capped exponential backoff and jitter (0.1 s doubling up to ``max_reconnect_interval``
    seconds), logging one warning when it is lost and one when it is back; the rows they held
    return (rolled back, released, unlocked, or when their lease expires) and are delivered
    again. ``run()`` never ends because of an outage. ``drain()`` raises ``ConnectionLost``
    once the database has been unreachable for ``outage_timeout`` seconds (plus at most one
    connect timeout). A connection the server refuses for a reason retrying cannot fix (wrong
    password, role or database, an sslmode the server cannot meet) raises
    ``ConfigurationError`` at once from both.

    ``handle`` is ``async def handle(message, ctx)``; a plain ``def`` works too and runs in a
    worker thread (``asyncio.to_thread``), one per delivery in flight, so it may block; its
    ``ctx.db`` is None (transactional mode needs an async handler: ``ctx.db`` is the worker's
    async connection). A handler that returns None (no return statement) acks; one that
    returns an outcome (``runtime.ack()``, ``retry()``, ``retry_after(d)``, ``drop()``,
    ``custom(name)``) settles by it; any other value is logged (naming its type) and taken as
    a retry. A handler that raises (CancelledError and GeneratorExit included) is a retry;
    KeyboardInterrupt or SystemExit from a handler stops the consumer as ``stop()`` does,
    and is raised again once it has stopped.

    Idle workers sleep ``poll_interval`` seconds, doubling to ``max_poll_interval``, but
    never past the moment the first delayed message (``retry_after``) becomes due, and are
    woken at once by an enqueue: on PostgreSQL one connection of the consumer LISTENs on the
    queue's channel, which the enqueue notifies when its transaction commits (a lost
    listening connection is logged, the workers poll meanwhile, and it listens again with
    backoff); on MySQL, MariaDB and SQLite an enqueue in the same process wakes them
    (``runtime.wake``), and consumers in other processes find the message at their next poll.

    ``metrics`` (a ``runtime.Metrics``) is called at each claim, settled outcome (with the
    handler's run time), lease extension, lease lost and reconnect; without it the consumer
    only checks for None. The handler and settlement log lines carry ``queue``,
    ``message_id``, ``attempt``, ``outcome`` and ``duration_s`` as record fields
    (``extra=``); each settlement is logged at DEBUG with them.

    ``retry_policy`` turns a retry (``retry()``, a handler that raised, timed out or
    returned something that is not an outcome) into ``retry_after(policy.delay(attempt))``;
    the cap (max_attempts) and the dead letter still apply under every policy, and an
    explicit ``retry_after(x)`` keeps its delay. Without one, a queue with a retry_after
    column backs off exponentially with jitter: ``ExponentialBackoff(base=1, factor=2,
    cap=3600, jitter=0.2)`` (``runtime.outcomes.default_retry_policy()``: 0.8-1 s after
    delivery 1, 1.6-2 s after delivery 2, … doubling up to 48-60 min). Retrying at once is
    the explicit ``retry_policy=runtime.Immediate()``. A queue without a retry_after column
    can only retry at once: given no policy it does, and says so in one warning when it
    first starts; any policy but ``Immediate()`` is refused here (ConfigurationError).

    ``schedules=True`` also fires the queue's schedules while ``run()`` runs (not in
    ``drain()``): each slot's message once, whatever else runs them (``runtime.schedules``).

    Before it claims anything the consumer checks once that the queue's table (and its
    dead-letter table) and every column its file uses exist, and a claim that fails because
    one is missing is not retried: both raise ConfigurationError naming it, from ``drain()``
    and ``run()``.
    """

    def __init__(
        self,
        db: str | Opener,
        queue: Queue[P],
        handle: Handler[P],
        group: str | None = None,
        transactional: bool = False,
        concurrency: int = 4,
        batch: int = 10,
        poll_interval: float = 0.05,
        max_poll_interval: float = 2.0,
        handler_timeout: float | None = None,
        stop_timeout: float = 30.0,
        settle_window: float = 0.02,
        outage_timeout: float = 60.0,
        max_reconnect_interval: float = 5.0,
        metrics: Metrics | None = None,
        retry_policy: RetryPolicy | None = None,
        schedules: bool = False,
    ) -> None:
        if concurrency < 1 or batch < 1:
            raise InvalidArgument("concurrency and batch must be at least 1")
        if outage_timeout < 0 or max_reconnect_interval <= 0:
            raise InvalidArgument(
                "outage_timeout must be at least 0 and max_reconnect_interval more than 0 "
                f"(got {outage_timeout} and {max_reconnect_interval})"
            )
        self._sync_handler = not _is_async(handle)
        if self._sync_handler and transactional:
            raise ConfigurationError(
                "transactional=True needs an async handler (ctx.db is an async connection): "
                "make the handler `async def`, or consume without transactional=True"
            )
        delays = bool(queue.rendered.get(S.RETRY_AFTER))
        if retry_policy is not None and not isinstance(retry_policy, Immediate) and not delays:
            raise ConfigurationError(
                f"queue '{queue.name}' has no retry_after column, so a retry_policy cannot "
                "delay a retry: declare columns.retry_after and render again, or pass "
                "retry_policy=runtime.Immediate()"
            )
        #: a queue without retry_after given no policy: one warning when it first starts
        self._warn_immediate = retry_policy is None and not delays
        if retry_policy is None:
            retry_policy = default_retry_policy() if delays else Immediate()
        #: turns retry() (and a handler that raised) into retry_after(delay by attempt)
        self.retry_policy: RetryPolicy = retry_policy
        #: opens the workers' connections: runtime.connect(url), or the service's own opener
        self.open = opener(db)
        self.queue = queue
        self.handle = handle
        self.group = group
        keyspace = db if isinstance(db, str) else ""  # else the first connection's URL
        self.form = form_for(
            queue, transactional=transactional, keyspace=keyspace, spread=concurrency
        )
        self._table_checked = False
        self._cautioned = False  # the server's cost of this form was logged
        self.concurrency = concurrency
        self.batch = batch
        self.poll_interval = poll_interval
        self.max_poll_interval = max_poll_interval
        self.handler_timeout = handler_timeout
        self.stop_timeout = stop_timeout
        self.settle_window = settle_window
        self.outage_timeout = outage_timeout
        self.max_reconnect_interval = max_reconnect_interval
        self._outage = Outage(queue.name)
        #: the hooks called at each claim, outcome, lease extension or loss, and reconnect
        self.metrics = metrics
        #: what the current (or last) drain() or run() did
        self.counts = self._new_counts()
        self._stopping = asyncio.Event()
        self._held: set[Delivery] = set()  # claimed, not yet settled (lease extension)
        #: a KeyboardInterrupt or SystemExit a handler raised: re-raised once stopped
        self._fatal: BaseException | None = None
        #: what idle workers wait on: an enqueue's notification, a same-process enqueue, stop()
        self._wakeup = Wakeup()
        self._listen: Step | None = None
        if queue.dialect.listen_notify:
            self._listen = queue.rendered.get(S.LISTEN)
        self._next_due = queue.rendered.get(S.NEXT_DUE)
        self._registered = False  # in the process's registry of waiting consumers
        #: run() also fires the queue's schedules (runtime.schedules), beside the workers
        self._scheduler = Scheduler(self.open, [queue]) if schedules else None
        #: writes ctx.progress() values (the lease form on a connection of its own)
        self._progress = ProgressWriter(self.form, self._connect)

    def _new_counts(self) -> Counts:
        counts = Counts()
        counts.metrics, counts.queue = self.metrics, self.queue.name
        return counts

    def _fields(self, d: Delivery, outcome: str, started: float) -> dict[str, Any]:
        """A handler log line's structured fields (``extra=``)."""
        took = time.monotonic() - started
        return fields(self.queue.name, d.message.id, d.attempt, outcome, took)

    def stop(self) -> None:
        """Ask the workers to finish: in-flight deliveries settle, unstarted rows are given back.

        Called before ``run()`` or ``drain()``, that call returns at once."""
        self._stopping.set()
        self._wakeup.poke(everyone=True)
        if self._scheduler is not None:
            self._scheduler.stop()

    async def drain(self) -> Counts:
        """Run until nothing is claimable; return what this call did (``Counts``)."""
        return await self._run(until_empty=True)

    async def run(self) -> Counts:
        """Run until ``stop()``; return what this call did (``Counts``)."""
        return await self._run(until_empty=False)

    async def _run(self, until_empty: bool) -> Counts:
        self.counts = self._new_counts()  # each call counts its own work
        if self._stopping.is_set():  # stop() came first
            self._stopping.clear()
            return self.counts
        self._fatal = None
        if self._warn_immediate:
            self._warn_immediate = False
            log.warning(
                "queue %s: the table has no retry_after column, so a failed message is "
                "delivered again at once; declare columns.retry_after to delay retries "
                "(backoff), or pass retry_policy=runtime.Immediate() to mean it",
                self.queue.name,
            )
        self._outage = Outage(self.queue.name)  # each drain() has its own outage_timeout
        upkeep = Upkeep(self._held, self._connect, self._outage, self._backoff, self.counts)
        maintenance = asyncio.create_task(self.form.maintain(upkeep))
        self._wakeup.bind()
        listener = None
        if self._listen is not None and not until_empty:
            listener = asyncio.create_task(self._listen_for_enqueues(self._listen))
        workers = [asyncio.create_task(self._worker(until_empty)) for _ in range(self.concurrency)]
        if self._scheduler is not None and not until_empty:
            workers.append(asyncio.create_task(self._schedule(self._scheduler)))
        try:
            await self._supervise(workers)
        finally:
            self._stopping.clear()  # the consumer can run again
            if self._registered:
                unregister(self.queue.table, self._wakeup)
                self._registered = False
            for task in (maintenance, listener):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            await self._progress.close()
        if self._fatal is not None:
            raise self._fatal
        return self.counts

    async def _schedule(self, scheduler: Scheduler) -> None:
        """The schedules' task: it ends with the consumer (a stop() came between two of
        their looks) or raises what stops it (a schedule table that is missing)."""
        await scheduler.run()

    async def _supervise(self, workers: list[asyncio.Task[None]]) -> None:
        """Wait for the workers; after stop(), give in-flight deliveries stop_timeout seconds to
        settle, then cancel them: those are dropped unsettled and their rows return at once."""
        stopped = asyncio.create_task(self._stopping.wait())
        try:
            pending: set[asyncio.Task[Any]] = {*workers, stopped}
            while not stopped.done() and any(not w.done() for w in workers):
                done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    failure = None if task is stopped else task.exception()
                    if failure is not None:
                        raise failure
            if stopped.done():
                _, late = await asyncio.wait(workers, timeout=self.stop_timeout)
                for task in late:
                    log.warning(
                        "queue %s: a delivery did not settle within stop_timeout=%ss; "
                        "dropping it unsettled",
                        self.queue.name,
                        self.stop_timeout,
                    )
                    task.cancel()
            for result in await asyncio.gather(*workers, return_exceptions=True):
                if isinstance(result, Exception):
                    raise result
        except BaseException:
            for task in workers:
                task.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            raise
        finally:
            stopped.cancel()

    async def _connect(self) -> Connection:
        conn = await self.open()
        try:
            check_dialect(self.queue.rendered, conn)
            if not self._table_checked:  # once, before the first claim
                await self._check_server(conn)
                await self._check_table(conn)
                self._table_checked = True
        except BaseException:  # a refusal, or cancelled (stopped) while checking
            await conn.close()
            raise
        if not self.form.keyspace:
            self.form.keyspace = conn.url
        if self._listen is None and not self._registered:  # woken by enqueues in this process
            register(self.queue.table, conn.url, self._wakeup)
            self._registered = True
        return conn

    async def _check_server(self, conn: Connection) -> None:
        """Refuse a claim form the server reached cannot run safely (a Galera node, TiDB, …:
        ``dialects.SERVERS``); warn once of what a form costs there."""
        server = recognise(conn.dialect.name, await conn.server_identity())
        cost = check_server(self.queue, server)
        if cost is not None and not self._cautioned:  # workers start side by side: once
            self._cautioned = True
            log.warning("%s", cost)

    async def _check_table(self, conn: Connection) -> None:
        """ConfigurationError, naming it, when the queue's table, its dead-letter table or a
        column the file uses is missing, or when the attempt column does not default to 1
        (a table counting from 0 would cap wrong)."""
        q = self.queue
        if not q.rendered.get("columns"):
            return
        cols = await describe(conn, q, q.table)
        needed = [*q.columns.values(), *q.rendered.header.other_columns]
        # in any case: a name that differs only so is left to the claim to find out
        missing = [c for c in needed if c.casefold() not in {n.casefold() for n in cols}]
        dead = q.rendered.header.dead_table
        dead_cols = await describe(conn, q, dead) if dead else {}
        dead_names = {n.casefold() for n in dead_cols}
        dead_missing = [c for c in needed if c.casefold() not in dead_names] if dead else []
        pause = q.rendered.header.pause_table
        if not cols:
            what = f"table {q.table!r} does not exist"
        elif missing:
            what = f"table {q.table!r} has no column {', '.join(map(repr, missing))}"
        elif dead and not dead_cols:
            what = f"dead-letter table {dead!r} does not exist"
        elif dead_missing:
            what = f"dead-letter table {dead!r} has no column {', '.join(map(repr, dead_missing))}"
        elif pause and not await describe(conn, q, pause):
            what = f"pause table {pause!r}, which every claim reads, does not exist"
        else:
            problem = attempt_problem(q, cols)
            if problem is not None:
                raise ConfigurationError(
                    f"queue '{q.name}': {problem}; `qgen verify` lists every difference"
                )
            return
        raise ConfigurationError(f"queue '{q.name}': {what}; {SCHEMA_FIX}")

    def _missing_schema(self, exc: Exception) -> ConfigurationError | None:
        """The error to stop with when a claim failed because a table or column is missing."""
        if isinstance(exc, DatabaseError) and re.search(
            self.queue.dialect.missing_schema, str(exc)
        ):
            return ConfigurationError(
                f"queue '{self.queue.name}': the claim failed, a table or column is missing "
                f"({exc}); {SCHEMA_FIX}"
            )
        return None

    async def _listen_for_enqueues(self, listen: Step) -> None:
        """One connection LISTENs on the queue's channel and wakes the idle workers at each
        notification. When it is lost the workers poll, and it listens again with backoff."""
        backoff = self._backoff()
        lost = False
        while not self._stopping.is_set():
            conn: Connection | None = None
            try:
                conn = await self._connect()
                await run_step(conn, listen, {})
                if lost:
                    log.info("queue %s: listening for enqueues again", self.queue.name)
                lost = False
                backoff.reset()
                self._wakeup.poke()  # what was enqueued while it was away: claim once
                while not self._stopping.is_set():
                    async for _ in conn.notifies(timeout=LISTEN_HEARTBEAT_S):
                        self._wakeup.poke()
                    await self._heartbeat(conn)
            except ConfigurationError:
                return  # the workers raise it too (a missing table, a refused login)
            except Exception as exc:  # lost, refused: poll meanwhile, never stop consuming
                # INFO: an outage of the database is the workers' one warning to give
                if not lost:
                    log.info(
                        "queue %s: not listening for enqueues (%s); polling every %s s at "
                        "most until it listens again",
                        self.queue.name,
                        exc,
                        self.max_poll_interval,
                    )
                lost = True
            finally:
                if conn is not None:
                    await conn.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), backoff.next())

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

    async def _idle_for(self, conn: Connection, idle: float) -> float:
        """How long an idle worker sleeps: ``idle``, or less when a delayed message becomes
        due sooner (by the database's clock)."""
        if self._next_due is None:
            return idle
        try:
            result = await run_step(conn, self._next_due, self.form.claim_params(0, self.group))
        except BrokerError:  # the next claim finds out (and reconnects)
            return idle
        due = result.rows[0]["due_s"] if result.rows else None
        return idle if due is None else min(idle, max(float(due), 0.0) + DUE_MARGIN)

    def _backoff(self) -> Backoff:
        cap = self.max_reconnect_interval
        return Backoff(min(FIRST_RECONNECT_DELAY, cap), cap)

    async def _reconnect(
        self, until_empty: bool, lost_at: float | None, backoff: Backoff
    ) -> Connection | None:
        """A fresh worker connection: at once, then with backoff while the database is away
        (or while each new connection dies before it claimed anything).

        None when stop() came first. ConfigurationError (and any BrokerError but
        ConnectionLost) is raised at once; drain() raises ConnectionLost once the outage has
        lasted ``outage_timeout`` seconds.
        """
        while True:
            delay = backoff.next()
            if delay:
                if until_empty:  # wake up in time to give up on time
                    delay = min(delay, self.outage_timeout - self._outage.elapsed() + 0.01)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), max(delay, 0))
                if self._stopping.is_set():
                    return None
            try:
                conn = await self._connect()
            except ConnectionLost as exc:
                self._outage.failed(exc, lost_at)
                gone = self._outage.elapsed()
                if until_empty and gone >= self.outage_timeout:
                    raise ConnectionLost(
                        f"queue {self.queue.name}: no database for {gone:.1f} s, past "
                        f"outage_timeout={self.outage_timeout}s (drain() gives up; run() "
                        f"keeps trying); last error: {exc}"
                    ) from exc
                continue
            self._outage.back()
            return conn

    async def _worker(self, until_empty: bool) -> None:
        conn: Connection | None = None
        idle = self.poll_interval
        failures = 0
        lost_at: float | None = None  # when the worker's last connection died
        backoff = self._backoff()  # reset by each claim that works
        #: rows a lost connection held (lease): settled or given back on the next one
        orphans: list[Delivery] = []
        try:
            while not self._stopping.is_set():
                woken = self._wakeup.signal()  # a poke from here on cuts the idle sleep short
                if conn is None or conn.closed:
                    replacing = conn is not None
                    conn = await self._reconnect(until_empty, lost_at, backoff)
                    lost_at = None
                    if conn is None:  # stopped while the database was away
                        break
                    if replacing and self.metrics is not None:
                        call(self.metrics, "on_reconnect")
                if orphans:
                    try:
                        await self._adopt(conn, orphans)
                    except ConnectionLost as exc:  # lost again: the next connection tries
                        log.info(
                            "queue %s: connection lost while settling the rows of a lost "
                            "connection (%s); reconnecting",
                            self.queue.name,
                            exc,
                        )
                        lost_at = time.monotonic()
                        await conn.close()
                        continue
                    except Exception as exc:
                        self._abandon(orphans, exc)
                    orphans = []
                try:
                    claimed = await self.form.claim_within_rate(conn, self.batch, self.group)
                    backoff.reset()
                    if len(claimed) >= self.batch:  # maybe more: wake one more idle worker
                        self._wakeup.poke()
                    if claimed and self.metrics is not None:
                        call(self.metrics, "on_claim", len(claimed))
                except ConnectionLost as exc:
                    # the next turn reconnects (at once, then with backoff)
                    log.info(
                        "queue %s: connection lost while claiming (%s); reconnecting",
                        self.queue.name,
                        exc,
                    )
                    lost_at = time.monotonic()
                    await conn.close()
                    continue
                except Exception as exc:
                    missing = self._missing_schema(exc)
                    if missing is not None:  # claiming again cannot help
                        raise missing from None
                    if self._conflict(exc, "a claim"):  # nothing was claimed: claim again
                        conn = await self._after_conflict(conn)
                        continue
                    # a deadlock (InnoDB rolls the claim back whole), SQLite's write lock busy
                    # past its timeout: nothing was claimed, so back off and claim again
                    failures += 1
                    log.exception(
                        "queue %s: claim failed (failure %d in a row); trying again",
                        self.queue.name,
                        failures,
                    )
                    if until_empty and failures >= MAX_FAILED_BATCHES:
                        raise
                    await conn.close()
                    await asyncio.sleep(
                        min(self.poll_interval * 2**failures, self.max_poll_interval)
                    )
                    continue
                if not claimed:
                    if claimed.contended:  # other workers hold every ready row for now
                        await asyncio.sleep(self.poll_interval / 10)
                        continue
                    if until_empty:
                        return
                    if not await self._wakeup.wait(woken, await self._idle_for(conn, idle)):
                        idle = min(idle * 2, self.max_poll_interval)
                    continue
                idle = self.poll_interval
                try:
                    orphans = await self._deliver_batch(conn, claimed)
                    failures = 0
                except Exception as exc:
                    if self._conflict(exc, "a batch"):  # its unsettled rows returned
                        conn = await self._after_conflict(conn)
                        continue
                    # a lock wait timeout, a statement the engine refused: the batch's
                    # unsettled rows returned (rolled back, released or unlocked)
                    failures += 1
                    self.counts.add("failed_batches")
                    log.exception(
                        "queue %s: a batch failed; its unsettled rows return (failure %d in a row)",
                        self.queue.name,
                        failures,
                    )
                    if until_empty and failures >= MAX_FAILED_BATCHES:
                        raise
                    await conn.close()  # a fresh connection for the next claim
                    await asyncio.sleep(
                        min(self.poll_interval * 2**failures, self.max_poll_interval)
                    )
                if conn.closed and lost_at is None:  # lost mid-batch: its rows were given back
                    lost_at = time.monotonic()
            if orphans:  # stopped before a connection came back: one try on a fresh one
                await self._adopt_elsewhere(orphans)
        finally:
            if conn is not None:
                await conn.close()

    async def _adopt(self, conn: Connection, orphans: list[Delivery]) -> None:
        """Settle or give back, on a new connection, the rows a lost one held (lease: the rows
        still hold their tokens, which guard every statement here), rather than leaving them
        to wait out their leases. A delivery whose handler had finished settles as it decided
        (its settlement was lost with the connection, or never ran; not transactional, so
        nothing of it was in the lost transaction); every other is given back at once, an
        unstarted one with its claim's count undone. A settlement that touches no row
        either committed before the connection was lost or lost its lease to another claim.
        Raises ConnectionLost when this connection is lost too (the rest wait for the next)."""
        for d in orphans:
            if d.settled or d.lost:
                continue
            decision = d.decision
            if decision is None or not self.form.retries_settlement():
                await self.form.give_back(conn, d)
                self.counts.add("released")
                continue
            try:
                await self.form.settle(conn, d, decision)
            except LeaseLost:
                log.info(
                    "queue %s: message %s: its %s, run again after its connection was lost, "
                    "touched no row: it had committed before the loss, or the lease expired "
                    "and another claim took the row",
                    self.queue.name,
                    d.message.id,
                    decision.label,
                    extra=fields(self.queue.name, d.message.id, d.attempt, decision.label),
                )
                self.counts.add("lease_lost")
                continue
            self.counts.settled(decision.label, d)
            self.counts.add("resettled")

    async def _adopt_elsewhere(self, orphans: list[Delivery]) -> None:
        """One try, on a fresh connection, at the rows a lost connection held (stopping)."""
        try:
            async with await self._connect() as other:
                await self._adopt(other, orphans)
        except Exception as exc:
            self._abandon(orphans, exc)

    def _abandon(self, orphans: list[Delivery], exc: Exception) -> None:
        left = sum(not (d.settled or d.lost) for d in orphans)
        if left:
            log.warning(
                "queue %s: could not settle or give back %d rows a lost connection held "
                "(%s); they return when their leases expire",
                self.queue.name,
                left,
                exc,
            )

    def _conflict(self, exc: BaseException, what: str) -> bool:
        """True for a conflict with another transaction (an InnoDB deadlock, a Galera node's
        certification conflict, a serialization failure): the database rolled ``what`` back
        whole. A race between consumers, not a failure: counted as ``conflicts`` (and
        ``on_conflict``), logged at DEBUG, retried; never a step towards giving up."""
        if not (isinstance(exc, DatabaseError) and exc.deadlock):
            return False
        self.counts.add("conflicts")
        log.debug(
            "queue %s: %s was rolled back by a conflicting transaction (%s); trying again",
            self.queue.name,
            what,
            exc,
        )
        return True

    async def _after_conflict(self, conn: Connection) -> Connection | None:
        """The worker's connection after a conflict: kept (its transaction ended), unless the
        form's holds live in the session (advisory keys a failed statement may have taken),
        then closed and replaced quietly (None: not counted as a reconnect). A short random
        pause first, so the racing consumers do not meet again at once."""
        await asyncio.sleep(random.uniform(0, self.poll_interval / 5))
        if conn.in_transaction and not conn.closed:
            await conn.rollback()
        if self.form.session_holds and not conn.closed:
            await conn.close()
            return None
        return conn

    async def _deliver_batch(self, conn: Connection, claimed: Batch) -> list[Delivery]:
        """Run a claimed batch; the rows still held when its connection was lost (lease: the
        worker settles or gives them back on its next connection, ``_adopt``)."""
        self._held.update(claimed)
        pending = list(claimed)
        completer = completer_for(self.form, self.counts, self._held, self.settle_window)
        try:
            while pending and not self._stopping.is_set():
                d = pending.pop(0)
                if d.lost:  # the extender found its lease gone: another claim has the row
                    self._skip_lost(d)
                    continue
                await completer.handle(conn, d, functools.partial(self._decided, conn, d))
            await completer.finish(conn)
            for d in pending:  # claimed, never started: back at once
                if await self.form.return_unstarted(conn, d):
                    self.counts.add("released")
            await self.form.end_batch(conn)
            completer.committed()
        except ConnectionLost as exc:
            log.warning(
                "queue %s: connection lost mid-batch (%s); its unsettled rows return "
                "(row lock: rolled back; advisory: unlocked; lease: settled as their handlers "
                "decided, or released, once a connection is back)",
                self.queue.name,
                exc,
            )
            self.counts.add("connection_lost")
            with contextlib.suppress(Exception):
                await self.form.abort_batch(conn)  # keys held in this process go too
            await conn.close()
            if self.form.holds_outlive_connection:
                return [d for d in claimed if not d.settled]
        except BaseException:
            with contextlib.suppress(Exception):
                await self.form.abort_batch(conn)
            await self._release_elsewhere([d for d in claimed if not d.settled])
            raise
        finally:
            completer.drop()
            self._held.difference_update(claimed)
        return []

    def _skip_lost(self, d: Delivery) -> None:
        d.settled = True
        self._held.discard(d)
        log.warning(
            "queue %s: message %s lost its lease before its handler started: not handled here",
            self.queue.name,
            d.message.id,
            extra=fields(self.queue.name, d.message.id, d.attempt, "lease_lost"),
        )
        self.counts.add("lease_lost")

    async def _release_elsewhere(self, deliveries: list[Delivery]) -> None:
        """The form gives back, on a fresh connection, rows whose worker connection is gone."""
        released = await self.form.release_elsewhere(self._connect, deliveries)
        if released:
            self.counts.add("released", released)

    async def _call_handler(self, d: Delivery, ctx: Ctx) -> Outcome:
        started = time.monotonic()
        try:
            return await self._run_handler(d, ctx, started)
        finally:
            d.handler_s = time.monotonic() - started

    async def _run_handler(self, d: Delivery, ctx: Ctx, started: float) -> Outcome:
        try:
            if self._sync_handler:
                result: Any = asyncio.to_thread(self.handle, d.message, ctx)
            else:
                result = self.handle(d.message, ctx)
            if self.handler_timeout is None:
                outcome = await result
            else:
                outcome = await asyncio.wait_for(result, self.handler_timeout)
            if type(outcome) is not Outcome and inspect.isawaitable(outcome):
                outcome = await outcome  # a plain def that returned a coroutine
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                raise  # the consumer itself is cancelled (stop_timeout, the caller)
            log.exception(
                "queue %s: handler for message %s raised CancelledError: taken as retry()",
                self.queue.name,
                d.message.id,
                extra=self._fields(d, "retry", started),
            )
            return retry(describe_exception(exc))
        except (KeyboardInterrupt, SystemExit) as exc:
            log.error(
                "queue %s: handler for message %s raised %s: stopping the consumer "
                "(the message is taken as retry())",
                self.queue.name,
                d.message.id,
                type(exc).__name__,
                extra=self._fields(d, "retry", started),
            )
            if self._fatal is None:
                self._fatal = exc
            self.stop()
            return retry(describe_exception(exc))
        except ConnectionLost as exc:
            if ctx.db is not None and ctx.db.closed:
                raise  # the worker's own connection (ctx.db) is gone: a connection loss
            log.exception(
                "queue %s: handler for message %s raised: taken as retry()",
                self.queue.name,
                d.message.id,
                extra=self._fields(d, "retry", started),
            )
            return retry(describe_exception(exc))
        except TimeoutError as exc:
            log.error(
                "queue %s: handler for message %s ran past %ss: taken as retry()",
                self.queue.name,
                d.message.id,
                self.handler_timeout,
                extra=self._fields(d, "retry", started),
            )
            if (
                self.handler_timeout is not None
                and time.monotonic() - started >= self.handler_timeout
            ):
                return retry(f"handler timed out after {self.handler_timeout:g} s")
            return retry(describe_exception(exc))  # a TimeoutError the handler raised itself
        except (Exception, GeneratorExit) as exc:
            log.exception(
                "queue %s: handler for message %s raised: taken as retry()",
                self.queue.name,
                d.message.id,
                extra=self._fields(d, "retry", started),
            )
            return retry(describe_exception(exc))
        try:
            return outcome_of(outcome)
        except TypeError as exc:
            log.error(
                "queue %s: handler for message %s %s: taken as retry()",
                self.queue.name,
                d.message.id,
                exc,
                extra=self._fields(d, "retry", started),
            )
            return retry(f"the handler returned {type(outcome).__name__}, not an outcome")

    async def _decided(self, conn: Connection, d: Delivery) -> Decision:
        """Run the handler; its decision, kept on the delivery (``_adopt`` settles by it when
        the connection is lost before the settlement committed)."""
        d.decision = await self._handle(conn, d)
        return d.decision

    async def _handle(self, conn: Connection, d: Delivery) -> Decision:
        """Run the handler; its outcome, turned into the statement that settles it."""
        ctx = Ctx(
            attempt=d.attempt,
            db=conn if self.form.transactional else None,
            queue=self.queue.name,
            _report=functools.partial(self._progress.write, conn, d),
        )
        d.started = True
        if self.form.transactional:
            await self.form.begin_handler(conn, d)
        cap = self.queue.max_attempts
        if cap is not None and d.attempt is not None and d.attempt > cap:
            return self._unsettled(d, cap)
        try:
            m = d.message  # a new Message, built directly (dataclasses.replace costs 3×)
            d.message = Message(
                m.id, decode_payload(m.payload, self.queue.decoder, self.queue.codec), m.group
            )
        except PayloadError as exc:
            return self._undecodable(d, exc)
        try:
            outcome = await self._call_handler(d, ctx)
        except asyncio.CancelledError:
            await self.form.give_back(conn, d)
            raise
        try:
            return self._decide(d, outcome)
        except UnknownCustomEvent as exc:
            log.error(
                "%s: taken as retry()",
                exc,
                extra=fields(self.queue.name, d.message.id, d.attempt, "retry", d.handler_s),
            )
            self.counts.add("unknown_custom")
            return self._decide(d, retry(str(exc)))
        except PayloadError as exc:  # ack(result=…) that cannot be stored: never lost
            log.error(
                "queue %s: message %s: %s: taken as retry()",
                self.queue.name,
                d.message.id,
                exc,
                extra=fields(self.queue.name, d.message.id, d.attempt, "retry", d.handler_s),
            )
            self.counts.add("unstorable_result")
            return self._decide(d, retry(str(exc)))

    def _decide(self, d: Delivery, outcome: Outcome) -> Decision:
        """The statement that settles ``outcome``, a retry delayed by the retry policy."""
        return decide(self.queue, d, with_policy(outcome, d.attempt, self.retry_policy))

    def _unsettled(self, d: Delivery, cap: int) -> Decision:
        """A message delivered past max_attempts whose deliveries never settled: each killed
        its handler's worker or connection (a crash, SIGKILL, a terminated session), so no
        retry ever reached the cap. Not handled again: to the dead letter."""
        reason = (
            f"delivered {cap if d.attempt is None else d.attempt - 1} times without a settlement (max_attempts {cap}): "
            "its handler, worker or connection died each time"
        )
        decision = dead_letter_now(self.queue, d, reason)
        log.error(
            "queue %s: message %s was %s; moving it to the dead letter unhandled",
            self.queue.name,
            d.message.id,
            reason,
            extra=fields(self.queue.name, d.message.id, d.attempt, "dead_letter"),
        )
        self.counts.add("unsettled")
        return decision or self._decide(d, retry(reason))

    def _undecodable(self, d: Delivery, exc: PayloadError) -> Decision:
        """A stored payload the decoder refuses: never handled; to the dead letter at once, or
        (with none declared) a failure like any other."""
        decision = dead_letter_now(self.queue, d, f"payload cannot be decoded: {exc}")
        log.error(
            "queue %s: message %s cannot be decoded (%s): %s",
            self.queue.name,
            d.message.id,
            exc,
            "moved to the dead letter" if decision else "taken as retry()",
            extra=fields(
                self.queue.name, d.message.id, d.attempt, "dead_letter" if decision else "retry"
            ),
        )
        self.counts.add("undecodable")
        return decision or self._decide(d, retry(f"payload cannot be decoded: {exc}"))
