"""Tests of a service's handlers on the queue's real rendered SQL: a harness and a pytest plugin.

Enable the plugin in ``conftest.py`` (``pytest_plugins = ["runtime.testing"]``) and a test
gets ``qgen_harness`` (plain tests) and ``qgen_async_harness`` (``async def`` tests)::

    def test_ship(qgen_harness):
        orders = qgen_harness("sql/sqlite/orders.sql")  # a fresh SQLite file, tables created
        orders.enqueue({"order": 7})
        drained = orders.drain(ship)                   # the real consumer, until idle
        assert drained.outcomes == {1: "ack"}
        orders.assert_counts(ready=0, processed=1)

Every statement that runs is the rendered file's: the tables come from its ``schema`` block
(``runtime.apply``), the messages are claimed and settled by ``runtime.Consumer``, the rows
are read by ``pending_list``, ``dead_list`` and ``stats``, and delayed messages (a delayed
enqueue, a retry's backoff) are brought due by ``advance``, so no test sleeps. The database
is a SQLite file in the test's ``tmp_path``; override the ``qgen_db_url`` fixture (or set the
``qgen_db_url`` ini option) to run on your own test database, whose queue tables must be
empty when a test starts.

Without pytest: ``Harness(queue, url)`` (async) and ``Harness(queue, url).sync`` (blocking).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Generic, TypeVar, Unpack

import pytest

from runtime.apply import apply
from runtime.connect import connect
from runtime.consumer import Consumer, Handler, _is_async
from runtime.contract.errors import ConfigurationError, PayloadError
from runtime.counts import Counts
from runtime.delivery import Ctx, Delivery, Message
from runtime.drivers.base import Connection
from runtime.enqueue import Options
from runtime.loading import load
from runtime.outcomes import RetryPolicy
from runtime.payloads import P, encode_payload
from runtime.queue import Enqueued, Queue
from runtime.steps import run_step

__all__ = ["Drained", "Harness", "Settled", "SyncHarness"]

T = TypeVar("T")
#: how many rounds of "drain, then bring the next delayed message due" drain() runs at most
MAX_ROUNDS = 100
#: how many handler calls one drain() allows before it decides the handler never finishes
MAX_DELIVERIES = 1000
#: a page of pending_list / dead_list
_PAGE = 500


class _Anything:
    def __repr__(self) -> str:
        return "ANY"


#: assert_enqueued(payload=ANY): any payload (the default)
ANY: Any = _Anything()


@dataclass(frozen=True)
class Settled:
    """One delivery as the consumer settled it: the message, its ``attempt`` (None without an
    attempt column), the ``outcome`` label (``ack``, ``drop``, ``retry``, ``retry_after``,
    ``dead_letter``, ``custom.<name>``), what the handler ``returned`` and what it ``raised``
    (None when it did not, or never ran: a payload that cannot be decoded)."""

    id: int
    payload: Any
    attempt: int | None
    outcome: str
    returned: Any = None
    raised: BaseException | None = None

    def __str__(self) -> str:
        why = f", raised {self.raised!r}" if self.raised is not None else ""
        return f"message {self.id} (attempt {self.attempt}): {self.outcome}{why}"


class Drained(list[Settled]):
    """What a drain settled, in order: a list of ``Settled``.

    ``outcomes`` (message id → its last outcome), ``counts`` (outcome → how many),
    ``of(id)`` (every delivery of one message), ``raised`` (what handlers raised)."""

    @property
    def outcomes(self) -> dict[int, str]:
        """Each message's last outcome: ``{1: "ack", 2: "dead_letter"}``."""
        return {s.id: s.outcome for s in self}

    @property
    def counts(self) -> dict[str, int]:
        """How many deliveries settled by each outcome: ``{"ack": 2, "retry_after": 1}``."""
        return dict(Counter(s.outcome for s in self))

    def of(self, id: int) -> list[Settled]:
        """Every delivery of message ``id``, first to last."""
        return [s for s in self if s.id == id]

    @property
    def raised(self) -> list[BaseException]:
        """What the handler raised, delivery by delivery."""
        return [s.raised for s in self if s.raised is not None]

    def __str__(self) -> str:
        return "\n".join(map(str, self)) or "nothing settled"


class _Recorder:
    """Wraps the handler: what it returned or raised for each message, in call order."""

    def __init__(self, handler: Handler, limit: int) -> None:
        self.handler = handler
        self.limit = limit
        self.calls: dict[int, list[tuple[Any, Any, BaseException | None]]] = {}
        self.count = 0
        self.over = False
        self.consumer: Consumer | None = None
        self._lock = threading.Lock()

    def _note(self, m: Message, returned: Any, raised: BaseException | None) -> None:
        with self._lock:
            self.calls.setdefault(m.id, []).append((m.payload, returned, raised))
            self.count += 1
            if self.count >= self.limit and not self.over and self.consumer is not None:
                self.over = True
                self.consumer.stop()

    def take(self, id: int) -> tuple[Any, Any, BaseException | None] | None:
        with self._lock:
            calls = self.calls.get(id)
            return calls.pop(0) if calls else None

    def wrapped(self) -> Handler:
        handler = self.handler
        if _is_async(handler):

            async def handle_async(m: Message, ctx: Ctx) -> Any:
                try:
                    returned = await handler(m, ctx)  # type: ignore[misc]
                except BaseException as exc:
                    self._note(m, None, exc)
                    raise
                self._note(m, returned, None)
                return returned

            return handle_async

        def handle(m: Message, ctx: Ctx) -> Any:
            try:
                returned = handler(m, ctx)
            except BaseException as exc:
                self._note(m, None, exc)
                raise
            self._note(m, returned, None)
            return returned

        return handle


class _RecordingCounts(Counts):
    """The consumer's counts, also writing each settlement down with what its handler did."""

    recorder: _Recorder
    settled_list: Drained

    def settled(self, label: str, d: Delivery) -> None:
        super().settled(label, d)
        call = self.recorder.take(d.message.id)
        payload, returned, raised = call if call is not None else (d.message.payload, None, None)
        self.settled_list.append(
            Settled(d.message.id, payload, d.attempt, label, returned=returned, raised=raised)
        )


class _RecordingConsumer(Consumer):
    def __init__(self, recorder: _Recorder, drained: Drained, *args: Any, **kwargs: Any) -> None:
        self.recorder, self.drained = recorder, drained
        super().__init__(*args, **kwargs)
        recorder.consumer = self

    def _new_counts(self) -> Counts:
        counts = _RecordingCounts()
        counts.metrics, counts.queue = self.metrics, self.queue.name
        counts.recorder, counts.settled_list = self.recorder, self.drained
        return counts


class Harness(Generic[P]):
    """A queue on a test database, async: enqueue, drain through a handler, look at the rows.

    ``h = Harness("sql/sqlite/orders.sql", "sqlite:///t.db?mode=rwc")``; the queue's tables
    are created on first use (``runtime.apply``) and must then be empty. ``h.sync`` gives
    the same methods blocking. Every statement is the rendered file's.

    ``payload=Order`` (or a queue loaded with it) types the harness as the queue: enqueue
    checks each payload against the model, handlers get ``Order`` instances, and the rows of
    ``pending``, ``dead`` and ``assert_enqueued`` carry ``Order`` payloads too."""

    def __init__(
        self, queue: Queue[P] | str | Path, url: str, payload: type[P] | None = None
    ) -> None:
        if not isinstance(queue, Queue):
            queue = load(queue, payload=payload)
        elif payload is not None and queue.model is not payload:
            raise ConfigurationError(
                f"Harness(queue, payload={payload.__qualname__}): the queue was loaded "
                "without that model: load it with runtime.load(path, payload=…), or pass "
                "the path"
            )
        self.queue: Queue[P] = queue
        #: the database the harness (and the code under test) connects to
        self.url = url
        self._ready = False

    @property
    def sync(self) -> SyncHarness[P]:
        """The same harness with blocking methods, for tests that are not ``async def``."""
        return SyncHarness(self)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Connection]:
        """A runtime connection to the test database, closed afterwards (tables created)."""
        await self.setup()
        async with await connect(self.url) as conn:
            yield conn

    async def setup(self) -> None:
        """Create the queue's tables if missing, and check that they hold no rows (a test
        starts on an empty queue). Every other method calls it first."""
        if self._ready:
            return
        async with await connect(self.url) as conn:
            await apply(conn, self.queue)
            stats = await self.queue.stats(conn)
        left = {k: v for k, v in stats.items() if k in _STATES and v}
        if left:
            raise AssertionError(
                f"queue '{self.queue.name}': table '{self.queue.table}' at {self.url} already "
                f"holds rows ({_show(left)}): give each test an empty database (the default "
                "qgen_db_url fixture is a fresh SQLite file per test)"
            )
        self._ready = True

    async def enqueue(self, payload: P | Mapping[str, Any], **options: Unpack[Options]) -> Enqueued:
        """Enqueue and commit on the harness's own connection (``delay=``, ``group=``, … as
        ``Queue.enqueue``); the code under test may enqueue on its own connection instead."""
        async with self.connect() as conn:
            return await self.queue.enqueue(conn, payload, **options)

    async def drain(
        self,
        handler: Handler[P],
        *,
        include_delayed: bool = False,
        raise_errors: bool = False,
        transactional: bool = False,
        retry_policy: RetryPolicy | None = None,
        group: str | None = None,
        max_rounds: int = MAX_ROUNDS,
        max_deliveries: int = MAX_DELIVERIES,
        **consumer_options: Any,
    ) -> Drained:
        """Run ``handler`` (``async def`` or plain ``def``) over every claimable message with
        the real consumer, one at a time, until none is left; what settled, in order.

        ``include_delayed=True`` also delivers the delayed ones (a delayed enqueue, a retry
        backing off): whenever only delayed messages are left, ``advance`` brings the next
        one due and the drain goes on, so retries run up to the cap and the dead letter
        without sleeping. ``raise_errors=True`` raises again the first exception the
        handler raised (after the drain). An AssertionError stops a handler that never
        finishes: past ``max_deliveries`` calls, or ``max_rounds`` rounds of delays."""
        await self.setup()
        drained = Drained()
        recorder = _Recorder(handler, max_deliveries)
        consumer = _RecordingConsumer(
            recorder,
            drained,
            self.url,
            self.queue,
            recorder.wrapped(),
            group=group,
            transactional=transactional,
            retry_policy=retry_policy,
            **{"concurrency": 1, "poll_interval": 0.01, "settle_window": 0, **consumer_options},
        )
        for _ in range(max_rounds):
            await consumer.drain()
            if recorder.over:
                raise AssertionError(
                    f"queue '{self.queue.name}': the handler ran {recorder.count} times and "
                    f"messages were still being delivered (max_deliveries={max_deliveries}); "
                    f"last settled:\n{Drained(drained[-5:])}"
                )
            if not include_delayed:
                break
            if (await self.stats(group))["ready"]:
                # a retry whose short backoff ran out while the drain was ending is ready
                # now: deliver it before travelling on, or it would jump the due order
                continue
            due = await self._next_due(group)
            if due is None:
                break
            await self.advance(due + 0.001, group=group)
        else:
            raise AssertionError(
                f"queue '{self.queue.name}': messages were still delayed after {max_rounds} "
                "rounds of drain(include_delayed=True) (a handler that always retries, on a "
                f"queue without max_attempts?); last settled:\n{Drained(drained[-5:])}"
            )
        if raise_errors and drained.raised:
            raise drained.raised[0]
        return drained

    async def _next_due(self, group: str | None) -> float | None:
        step = self.queue.steps.next_due
        if not step:
            return None
        group = group if group is not None else self.queue.default_group
        async with self.connect() as conn:
            result = await run_step(conn, step, {"group": group})
        due = result.rows[0]["due_s"] if result.rows else None
        return None if due is None else max(float(due), 0.0)

    async def advance(self, seconds: float | timedelta, group: str | None = None) -> int:
        """Time travel: bring every delayed message ``seconds`` nearer (``Queue.advance``);
        how many moved."""
        async with self.connect() as conn:
            return await self.queue.advance(conn, seconds, group)

    async def stats(self, group: str | None = None) -> dict[str, Any]:
        """The queue's counts: ready, delayed, in_flight, dead, processed (``Queue.stats``,
        every processed row counted: a test's expectation is exact)."""
        async with self.connect() as conn:
            return await self.queue.stats(conn, group, processed_cap=None)

    async def pending(self, group: str | None = None) -> list[dict[str, Any]]:
        """Every pending message (ready, delayed or in flight), oldest first: id, payload
        (decoded), attempt, due_s (seconds until a delayed one is claimable), …"""
        rows: list[dict[str, Any]] = []
        async with self.connect() as conn:
            while True:
                after = rows[-1]["id"] if rows else None
                page = await self.queue.pending_list(conn, _PAGE, after, group)
                rows += page
                if len(page) < _PAGE:
                    return self._typed(rows)

    async def dead(self) -> list[dict[str, Any]]:
        """Every message in the dead letter, oldest first (``Queue.dead_list``)."""
        rows: list[dict[str, Any]] = []
        async with self.connect() as conn:
            while True:
                after = rows[-1]["id"] if rows else None
                page = await self.queue.dead_list(conn, _PAGE, after)
                rows += page
                if len(page) < _PAGE:
                    return self._typed(rows)

    def _typed(self, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A typed queue's rows with their payloads as the model (as handlers get them); one
        that does not decode keeps its JSON, and ``payload_error`` says why."""
        codec = self.queue.codec
        if codec is not None:
            for r in rows:
                if "payload_error" in r:
                    continue
                try:
                    r["payload"] = codec.decode(encode_payload(r["payload"]))
                except PayloadError as exc:
                    r["payload_error"] = str(exc)
        return rows

    async def assert_enqueued(
        self,
        payload: Any = ANY,
        count: int | None = None,
        *,
        delayed: bool | None = None,
        group: str | None = None,
    ) -> list[dict[str, Any]]:
        """Assert pending messages with this ``payload`` (default: any) are there: exactly
        ``count`` of them (default: at least one); ``delayed`` True or False narrows to the
        delayed or the claimable ones. Returns them; the AssertionError lists what is
        pending instead. On a typed queue ``payload`` is an instance of the model or a dict
        that validates as one."""
        codec = self.queue.codec
        if codec is not None and payload is not ANY and not isinstance(payload, codec.cls):
            payload = codec.decode(codec.encode(payload))
        rows = await self.pending(group)
        found = [
            r
            for r in rows
            if (payload is ANY or r["payload"] == payload)
            and (delayed is None or bool(r.get("due_s")) == delayed)
        ]
        if (len(found) != count) if count is not None else not found:
            what = "any" if payload is ANY else repr(payload)
            want = f"{count}" if count is not None else "at least 1"
            kind = {None: "", True: "delayed ", False: "claimable "}[delayed]
            raise AssertionError(
                f"queue '{self.queue.name}': expected {want} {kind}pending message(s) with "
                f"payload {what}, found {len(found)}; pending: {_rows(rows)}"
            )
        return found

    async def assert_counts(self, group: str | None = None, **expected: int) -> None:
        """Assert the queue's counts by state: ``assert_counts(ready=0, delayed=1, dead=0,
        processed=2)`` (any of ready, delayed, in_flight, dead, processed); the
        AssertionError shows every count and the pending rows."""
        unknown = sorted(set(expected) - set(_STATES))
        if unknown:
            raise TypeError(f"assert_counts: no state {unknown[0]!r} (one of {', '.join(_STATES)})")
        stats = await self.stats(group)
        have = {k: stats[k] for k in expected}
        if have != expected:
            all_ = {k: stats[k] for k in _STATES}
            raise AssertionError(
                f"queue '{self.queue.name}': expected {_show(expected)}, have {_show(have)} "
                f"(all: {_show(all_)}); pending: {_rows(await self.pending(group))}"
            )


_STATES = ("ready", "delayed", "in_flight", "dead", "processed")


def _show(counts: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in counts.items())


def _rows(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "none"
    shown = [
        f"[id {r['id']}: {r['payload']!r}"
        + (f", attempt {r['attempt']}" if r.get("attempt") is not None else "")
        + (f", due in {r['due_s']:.0f} s" if r.get("due_s") else "")
        + "]"
        for r in rows[:20]
    ]
    return " ".join(shown) + (f" … ({len(rows)} in all)" if len(rows) > 20 else "")


def _blocking(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(
        "a SyncHarness method blocks, and this test runs in an event loop: use the async "
        "harness (the qgen_async_harness fixture) and await its methods"
    )


class SyncHarness(Generic[P]):
    """``Harness`` with blocking methods (each runs on an event loop of its own), for tests
    that are not ``async def``; ``h.aio`` is the async harness underneath."""

    def __init__(self, harness: Harness[P]) -> None:
        self.aio = harness

    @property
    def queue(self) -> Queue[P]:
        return self.aio.queue

    @property
    def url(self) -> str:
        return self.aio.url

    def setup(self) -> None:
        _blocking(self.aio.setup())

    def enqueue(self, payload: P | Mapping[str, Any], **options: Unpack[Options]) -> Enqueued:
        return _blocking(self.aio.enqueue(payload, **options))

    def drain(self, handler: Handler[P], **options: Any) -> Drained:
        return _blocking(self.aio.drain(handler, **options))

    def advance(self, seconds: float | timedelta, group: str | None = None) -> int:
        return _blocking(self.aio.advance(seconds, group))

    def stats(self, group: str | None = None) -> dict[str, Any]:
        return _blocking(self.aio.stats(group))

    def pending(self, group: str | None = None) -> list[dict[str, Any]]:
        return _blocking(self.aio.pending(group))

    def dead(self) -> list[dict[str, Any]]:
        return _blocking(self.aio.dead())

    def assert_enqueued(
        self,
        payload: Any = ANY,
        count: int | None = None,
        *,
        delayed: bool | None = None,
        group: str | None = None,
    ) -> list[dict[str, Any]]:
        return _blocking(self.aio.assert_enqueued(payload, count, delayed=delayed, group=group))

    def assert_counts(self, group: str | None = None, **expected: int) -> None:
        _blocking(self.aio.assert_counts(group, **expected))


for _name in ("setup", "enqueue", "drain", "advance", "stats", "pending", "dead"):
    getattr(SyncHarness, _name).__doc__ = getattr(Harness, _name).__doc__
SyncHarness.assert_enqueued.__doc__ = Harness.assert_enqueued.__doc__
SyncHarness.assert_counts.__doc__ = Harness.assert_counts.__doc__


# ---------------------------------------------------------------------- the pytest plugin


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "qgen_db_url",
        "the database runtime.testing's harnesses use (default: a SQLite file per test)",
        default="",
    )


@pytest.fixture
def qgen_db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The database a test's harnesses use: the ``qgen_db_url`` ini option, or a fresh SQLite
    file in the test's ``tmp_path``. Override this fixture for a database of each test's own."""
    configured = str(request.config.getini("qgen_db_url") or "")
    return configured or f"sqlite:///{tmp_path / 'qgen.db'}?mode=rwc"


@pytest.fixture
def qgen_harness(qgen_db_url: str) -> Iterator[Callable[..., SyncHarness[Any]]]:
    """``orders = qgen_harness("sql/sqlite/orders.sql")``: a ``SyncHarness`` on the test's
    database (``qgen_db_url``), its tables created; ``qgen_harness(path, payload=Order)``
    for a typed queue."""

    def make(queue: Queue[Any] | str | Path, payload: type[Any] | None = None) -> SyncHarness[Any]:
        harness = Harness(queue, qgen_db_url, payload).sync
        harness.setup()
        return harness

    yield make


@pytest.fixture
def qgen_async_harness(qgen_db_url: str) -> Iterator[Callable[..., Harness[Any]]]:
    """``orders = qgen_async_harness("sql/sqlite/orders.sql")`` in an ``async def`` test: a
    ``Harness`` whose methods are awaited; its tables are created on first use
    (``payload=Order`` as for ``qgen_harness``)."""

    def make(queue: Queue[Any] | str | Path, payload: type[Any] | None = None) -> Harness[Any]:
        return Harness(queue, qgen_db_url, payload)

    yield make
