"""The consumer: workers claim batches, run the handler, and settle each delivery by its outcome.

Its parts: the settings, each worker's loop and the wake-up listener (``runtime.loop``), and
the handler invocation policy it shares with the outbox relay (``runtime.handler``); this
module starts and stops them, checks the queue's tables, and turns each handler's outcome
into the decision that settles its delivery.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
from time import monotonic
from typing import Any, Generic, TypeVar, overload

from runtime.backoff import Outage
from runtime.connect import Opener, opener
from runtime.contract.dialects import recognise
from runtime.contract.errors import (
    ConfigurationError,
    DatabaseError,
    PayloadError,
    UnknownCustomEvent,
)
from runtime.contract.rendered import Step
from runtime.counts import Counts
from runtime.delivery import Ctx, Delivery
from runtime.drivers.base import Connection
from runtime.forms import Upkeep, form_for
from runtime.handler import Handler, Invocation, is_async
from runtime.loop import ConsumerSettings, Listener, Run, WorkerLoop
from runtime.metrics import Metrics, fields
from runtime.outcomes import (
    PLAIN_ACK,
    PLAIN_RETRY_OUTCOME,
    Immediate,
    Outcome,
    RetryPolicy,
    default_retry_policy,
    retry,
    with_policy,
)
from runtime.payloads import P
from runtime.progress import ProgressWriter
from runtime.queue import Queue, check_dialect, check_server
from runtime.schedules import Scheduler
from runtime.settle import Decision, acked, dead_letter_now, decide
from runtime.verify import attempt_problem, describe
from runtime.wake import Wakeup, register, unregister

log = logging.getLogger("runtime")

#: kept under their old names: runtime.testing (and services) import them from here
_is_async = is_async
__all__ = ["Consumer", "ConsumerSettings", "Handler"]

#: how to create a missing table or column
SCHEMA_FIX = "create it with the file's schema statements: run `qgen apply --db URL`"

T = TypeVar("T")


class _Setting(Generic[T]):
    """A setting read on the consumer (``consumer.batch``) from its ``settings``; setting it
    checks the new value as the constructor does (``consumer.batch = 1``)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, consumer: None, owner: type) -> _Setting[T]: ...
    @overload
    def __get__(self, consumer: Consumer[Any], owner: type) -> T: ...
    def __get__(self, consumer: Consumer[Any] | None, owner: type) -> T | _Setting[T]:
        if consumer is None:
            return self
        value: T = getattr(consumer.settings, self.name)
        return value

    def __set__(self, consumer: Consumer[Any], value: T) -> None:
        changed: dict[str, Any] = {self.name: value}
        consumer.settings = dataclasses.replace(consumer.settings, **changed)


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

    Everything after ``handle`` is keyword-only and checked once, when the consumer is built
    (``runtime.loop.ConsumerSettings``, kept as ``consumer.settings``): a value out of range
    raises InvalidArgument naming it.
    """

    #: the settings, read here as before (``consumer.batch``); see ``ConsumerSettings``
    group = _Setting[str | None]()
    concurrency = _Setting[int]()
    batch = _Setting[int]()
    poll_interval = _Setting[float]()
    max_poll_interval = _Setting[float]()
    handler_timeout = _Setting[float | None]()
    stop_timeout = _Setting[float]()
    settle_window = _Setting[float]()
    outage_timeout = _Setting[float]()
    max_reconnect_interval = _Setting[float]()
    #: the hooks called at each claim, outcome, lease extension or loss, and reconnect
    metrics = _Setting[Metrics | None]()

    def __init__(
        self,
        db: str | Opener,
        queue: Queue[P],
        handle: Handler[P],
        *,
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
        #: what the consumer takes after ``handle``, checked once
        self.settings = ConsumerSettings(
            group=group,
            transactional=transactional,
            concurrency=concurrency,
            batch=batch,
            poll_interval=poll_interval,
            max_poll_interval=max_poll_interval,
            handler_timeout=handler_timeout,
            stop_timeout=stop_timeout,
            settle_window=settle_window,
            outage_timeout=outage_timeout,
            max_reconnect_interval=max_reconnect_interval,
            metrics=metrics,
            retry_policy=retry_policy,
            schedules=schedules,
        )
        self.queue = queue
        self.handle = handle
        #: calls the handler (``runtime.handler``); made again by each drain() or run()
        self._invoke = self._invocation()
        #: the one Decision every plain ack (``ack()``, a returned None) settles by
        self._acked = acked(queue)
        #: the one Decision a plain retry() under Immediate settles by below the cap (made
        #: by the first: ``_decide``)
        self._retried: Decision | None = None
        delays = queue.steps.retry_after is not None
        #: turns retry() (and a handler that raised) into retry_after(delay by attempt)
        self.retry_policy: RetryPolicy = self._policy(retry_policy, delays)
        #: a queue without retry_after given no policy: one warning when it first starts
        self._warn_immediate = retry_policy is None and not delays
        #: opens the workers' connections: runtime.connect(url), or the service's own opener
        self.open = opener(db)
        keyspace = db if isinstance(db, str) else ""  # else the first connection's URL
        self.form = form_for(
            queue, transactional=transactional, keyspace=keyspace, spread=concurrency
        )
        self._table_checked = False
        #: held by the connection that checks the server and the table (``_connect``)
        self._checking = asyncio.Lock()
        self._cautioned = False  # the server's cost of this form was logged
        self._outage = Outage(queue.name)
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
            self._listen = queue.steps.listen
        self._next_due = queue.steps.next_due
        self._registered = False  # in the process's registry of waiting consumers
        #: run() also fires the queue's schedules (runtime.schedules), beside the workers
        self._scheduler = Scheduler(self.open, [queue]) if schedules else None
        #: writes ctx.progress() values (the lease form on a connection of its own)
        self._progress = ProgressWriter(self.form, self._connect)

    def _invocation(self) -> Invocation:
        """How the handler is called (its timeout; a KeyboardInterrupt stops the consumer)."""
        if self.settings.transactional and not is_async(self.handle):
            raise ConfigurationError(
                "transactional=True needs an async handler (ctx.db is an async connection): "
                "make the handler `async def`, or consume without transactional=True"
            )
        return Invocation(
            self.handle,
            self.handler_timeout,
            unit="queue",
            name=self.queue.name,
            on_fatal=self._handler_stopped,
        )

    def _policy(self, given: RetryPolicy | None, delays: bool) -> RetryPolicy:
        """The retry policy: the one given, else backoff where the queue can delay a retry."""
        if given is not None and not isinstance(given, Immediate) and not delays:
            raise ConfigurationError(
                f"queue '{self.queue.name}' has no retry_after column, so a retry_policy cannot "
                "delay a retry: declare columns.retry_after and render again, or pass "
                "retry_policy=runtime.Immediate()"
            )
        if given is not None:
            return given
        return default_retry_policy() if delays else Immediate()

    def _handler_stopped(self, exc: BaseException) -> None:
        """A handler raised KeyboardInterrupt or SystemExit: stop, and raise it once stopped."""
        if self._fatal is None:
            self._fatal = exc
        self.stop()

    def _new_counts(self) -> Counts:
        counts = Counts()
        counts.metrics, counts.queue = self.metrics, self.queue.name
        return counts

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
        self._invoke = self._invocation()  # the handler may have been replaced
        self._checking = asyncio.Lock()  # this call's event loop's
        self._warn_once()
        self._outage = Outage(self.queue.name)  # each drain() has its own outage_timeout
        run = self._new_run(until_empty)
        upkeep = Upkeep(
            self._held, self._connect, self._outage, self.settings.reconnect_backoff, self.counts
        )
        helpers = [asyncio.create_task(self.form.maintain(upkeep))]
        self._wakeup.bind()
        if self._listen is not None and not until_empty:
            helpers.append(asyncio.create_task(Listener(run, self._listen).listen()))
        workers = [asyncio.create_task(WorkerLoop(run).work()) for _ in range(self.concurrency)]
        if self._scheduler is not None and not until_empty:
            workers.append(asyncio.create_task(self._schedule(self._scheduler)))
        try:
            await self._supervise(workers)
        finally:
            await self._wind_down(helpers)
        if self._fatal is not None:
            raise self._fatal
        return self.counts

    def _new_run(self, until_empty: bool) -> Run:
        """What this call's workers and listener share."""
        return Run(
            name=self.queue.name,
            settings=self.settings,
            form=self.form,
            counts=self.counts,
            held=self._held,
            wakeup=self._wakeup,
            stopping=self._stopping,
            outage=self._outage,
            until_empty=until_empty,
            connect=self._connect,
            decide=self._decided,
            missing_schema=self._missing_schema,
            next_due=self._next_due,
        )

    def _warn_once(self) -> None:
        if self._warn_immediate:
            self._warn_immediate = False
            log.warning(
                "queue %s: the table has no retry_after column, so a failed message is "
                "delivered again at once; declare columns.retry_after to delay retries "
                "(backoff), or pass retry_policy=runtime.Immediate() to mean it",
                self.queue.name,
            )

    async def _wind_down(self, helpers: list[asyncio.Task[None]]) -> None:
        """After the workers: the consumer can run again; the lease extender and the
        listener end, and the progress writer's connection closes."""
        self._stopping.clear()
        if self._registered:
            unregister(self.queue.table, self._wakeup)
            self._registered = False
        for task in helpers:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self._progress.close()

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
                await self._cancel_late(workers)
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

    async def _cancel_late(self, workers: list[asyncio.Task[None]]) -> None:
        """Stopping: the workers still delivering after stop_timeout seconds are cancelled."""
        _, late = await asyncio.wait(workers, timeout=self.stop_timeout)
        for task in late:
            log.warning(
                "queue %s: a delivery did not settle within stop_timeout=%ss; "
                "dropping it unsettled",
                self.queue.name,
                self.stop_timeout,
            )
            task.cancel()

    async def _connect(self) -> Connection:
        conn = await self.open()
        try:
            check_dialect(self.queue.rendered, conn)
            if not self._table_checked:  # once, before the first claim
                # the workers connect side by side: one checks, the others wait for it (each
                # running the catalogue's queries again would hold up every first claim)
                async with self._checking:
                    if not self._table_checked:
                        await self._check_server(conn)
                        await self._check_table(conn)
                        self._table_checked = True
        except BaseException:  # a refusal, or cancelled (stopped) while checking
            await conn.close()
            raise
        if not self.form.keyspace:
            self.form.keyspace = conn.url
        conn.inline_steps = True  # its claims and settlements are each a moment long
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

    async def _decided(self, conn: Connection, d: Delivery) -> Decision:
        """Run the handler; its outcome, turned into the statement that settles it, and kept
        on the delivery (``_adopt`` settles by it when the connection is lost before the
        settlement committed).

        The consumer's hot path, once per message: the payload was decoded when the row was
        claimed (``Form.deliveries``), the handler's call is timed with one clock reading each
        side, and a plain ack settles by the one Decision every plain ack shares (``acked``),
        without the retry policy or ``decide``."""
        queue, form = self.queue, self.form
        transactional = form.transactional
        ctx = Ctx(
            d.attempt, conn if transactional else None, queue.name, self._progress.write, conn, d
        )
        d.started = True
        if transactional:
            await form.begin_handler(conn, d)
        cap = queue.max_attempts
        if cap is not None and d.attempt is not None and d.attempt > cap:
            d.decision = decision = self._unsettled(d, cap)
            return decision
        if d.undecodable is not None:
            d.decision = decision = self._undecodable(d, d.undecodable)
            return decision
        invoke, message = self._invoke, d.message
        started = monotonic()
        try:  # Invocation.call's steps, run in this coroutine (one coroutine less a message)
            try:
                returned = await invoke.starter(message, ctx)
                if type(returned) is Outcome:
                    outcome = returned
                else:
                    outcome = await invoke.finish(returned, message, ctx, started)
            except BaseException as exc:
                raised = invoke.raised(exc, message, ctx, started)
                if raised is None:  # not the handler's to settle: it propagates
                    raise
                outcome = raised
        except asyncio.CancelledError:  # the caller's cancellation (the handler's is a retry)
            await form.give_back(conn, d)
            raise
        finally:
            d.handler_s = monotonic() - started
        if outcome is PLAIN_ACK:  # most deliveries': no policy, no check, nothing to word
            d.decision = decision = self._acked
            return decision
        try:
            decision = self._decide(d, outcome)
        except (UnknownCustomEvent, PayloadError) as exc:
            decision = self._retry_instead(d, exc)
        d.decision = decision
        return decision

    def _retry_instead(self, d: Delivery, exc: UnknownCustomEvent | PayloadError) -> Decision:
        """An outcome that cannot settle as it is (an undeclared custom event, a result that
        cannot be stored): logged and settled as a retry, never lost."""
        if isinstance(exc, UnknownCustomEvent):
            log.error(
                "%s: taken as retry()",
                exc,
                extra=fields(self.queue.name, d.message.id, d.attempt, "retry", d.handler_s),
            )
            self.counts.add("unknown_custom")
        else:  # ack(result=…) that cannot be stored: never lost
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
        """The statement that settles ``outcome``, a retry delayed by the retry policy.

        A plain ``retry()`` under ``Immediate`` below the cap settles by one Decision, the
        same for every such delivery: decided once, then shared without the look-ups."""
        if outcome is PLAIN_RETRY_OUTCOME and type(self.retry_policy) is Immediate:
            cap = self.queue.max_attempts
            if cap is None or d.attempt is None or d.attempt < cap:
                decision = self._retried
                if decision is None:
                    decision = self._retried = decide(self.queue, d, outcome)
                return decision
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
