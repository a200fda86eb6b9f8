"""How a handler is called: the one policy the consumer and the outbox relay share.

``Invocation(handle, ...)`` turns one call of a handler into an Outcome:

- ``async def handle(message, ctx)`` is awaited; a plain ``def`` runs in a worker thread
  (``asyncio.to_thread``), so it may block; a plain ``def`` that returns an awaitable has
  it awaited;
- ``timeout`` seconds (None: no limit) bound the call: past them it is a retry, "handler
  timed out after N s" (a sync handler's thread runs on to its end, unwaited for);
- None acks; an Outcome decides; any other value is logged, naming its type, and retried;
- an exception (CancelledError and GeneratorExit included) is logged and retried, its type
  and message the retry's reason, with two exceptions: a cancellation of the caller's own
  task (stop_timeout, the caller) propagates, and so does ConnectionLost once ``ctx.db``,
  the caller's connection, is closed (the caller's connection loss, not the handler's);
- KeyboardInterrupt or SystemExit is retried too and handed to ``on_fatal``, which stops
  the caller; the caller raises it again once it has stopped.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from runtime.contract.errors import ConnectionLost, InvalidArgument
from runtime.delivery import Ctx, Message
from runtime.metrics import fields
from runtime.outcomes import Outcome, describe_exception, outcome_of, retry
from runtime.payloads import P

log = logging.getLogger("runtime")

#: ``async def handle(message, ctx)``, or a plain ``def`` run in a worker thread; it returns
#: an Outcome, or None for ack(); ``Handler[Order]`` takes a ``Message[Order]``
Handler = Callable[[Message[P], Ctx], Awaitable[Outcome | None] | Outcome | None]


def is_async(handle: Any) -> bool:
    """An ``async def`` (also as a partial, or an object whose ``__call__`` is one)."""
    return inspect.iscoroutinefunction(handle) or inspect.iscoroutinefunction(type(handle).__call__)


def check_timeout(timeout: float | None, what: str = "handler_timeout") -> float | None:
    """``timeout`` when it is None or a number of seconds above 0; InvalidArgument otherwise."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise InvalidArgument(
            f"{what} must be a number of seconds above 0, or None; not {timeout!r}"
        )
    return timeout


@dataclass(frozen=True, slots=True)
class Invocation:
    """One handler and how it is called (see the module): ``await invocation(message, ctx)``
    is its Outcome.

    ``unit`` and ``name`` (``"queue", "orders"``; ``"outbox", "events"``), ``noun``
    (``"message"``, ``"record"``) and ``owner`` (``"consumer"``, ``"relay"``) word its log
    lines; ``on_fatal`` receives a KeyboardInterrupt or SystemExit the handler raised."""

    handle: Callable[..., Any]
    timeout: float | None = None
    unit: str = "queue"
    name: str = ""
    noun: str = "message"
    owner: str = "consumer"
    on_fatal: Callable[[BaseException], None] | None = None
    #: a plain ``def``: called in a worker thread
    sync: bool = field(init=False)
    #: ``start``, or the handler itself where calling it is all ``start`` does (an ``async
    #: def`` without a timeout): one call less a message on the consumer's hot path
    starter: Callable[[Message[Any], Ctx], Awaitable[Any]] = field(
        init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        check_timeout(self.timeout)
        object.__setattr__(self, "sync", not is_async(self.handle))
        plain = not self.sync and self.timeout is None
        object.__setattr__(self, "starter", self.handle if plain else self.start)

    def __call__(self, message: Message[Any], ctx: Ctx) -> Coroutine[Any, Any, Outcome]:
        """The call's Outcome (a coroutine: ``await invocation(message, ctx)``)."""
        return self.call(message, ctx, time.monotonic())

    async def call(self, message: Message[Any], ctx: Ctx, started: float) -> Outcome:
        """``invocation(message, ctx)`` for a caller that read the clock itself: ``started``,
        its ``time.monotonic()`` just before, is when the timeout and the logged duration
        count from (the consumer times the handler with the same reading).

        The steps, for a caller that runs them in its own coroutine (the consumer's hot
        path, one coroutine less a message): ``start``, then ``finish`` unless the value is
        already an Outcome, and ``raised`` for an exception out of either."""
        try:
            returned = await self.starter(message, ctx)
            if type(returned) is Outcome:
                return returned
            return await self.finish(returned, message, ctx, started)
        except BaseException as exc:
            outcome = self.raised(exc, message, ctx, started)
            if outcome is None:
                raise
            return outcome

    def start(self, message: Message[Any], ctx: Ctx) -> Awaitable[Any]:
        """The handler's call, to await for the value it returned: its coroutine, or (a plain
        ``def``) its worker thread; bounded by the timeout when there is one."""
        if self.sync:
            result: Awaitable[Any] = asyncio.to_thread(self.handle, message, ctx)
        else:
            result = self.handle(message, ctx)
        return result if self.timeout is None else asyncio.wait_for(result, self.timeout)

    async def finish(
        self, returned: Any, message: Message[Any], ctx: Ctx, started: float
    ) -> Outcome:
        """What a value the handler returned settles as (an awaitable it returned, awaited)."""
        if inspect.isawaitable(returned):
            returned = await returned  # a plain def that returned a coroutine
        return self._returned(returned, message, ctx, started)

    def _where(self, message: Message[Any]) -> str:
        return f"{self.unit} {self.name}: handler for {self.noun} {message.id}"

    def _fields(self, message: Message[Any], ctx: Ctx, started: float) -> dict[str, Any]:
        """A log line's structured fields (``extra=``): the outcome is a retry."""
        return fields(self.name, message.id, ctx.attempt, "retry", time.monotonic() - started)

    def _returned(self, returned: Any, message: Message[Any], ctx: Ctx, started: float) -> Outcome:
        """What a value the handler returned settles as: None acks, an Outcome decides,
        anything else is a retry, logged naming its type."""
        try:
            return outcome_of(returned)
        except TypeError as exc:
            log.error(
                "%s %s: taken as retry()",
                self._where(message),
                exc,
                extra=self._fields(message, ctx, started),
            )
            return retry(f"the handler returned {type(returned).__name__}, not an outcome")

    def raised(
        self, exc: BaseException, message: Message[Any], ctx: Ctx, started: float
    ) -> Outcome | None:
        """What an exception out of the handler settles as; None when it is not the
        handler's to settle (the caller's own cancellation, the loss of ``ctx.db``) and
        propagates."""
        if isinstance(exc, asyncio.CancelledError):
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                return None  # the caller itself is cancelled (stop_timeout, the caller)
        elif isinstance(exc, KeyboardInterrupt | SystemExit):
            return self._fatal(exc, message, ctx, started)
        elif isinstance(exc, ConnectionLost):
            if ctx.db is not None and ctx.db.closed:
                return None  # the caller's own connection (ctx.db) is gone: a connection loss
        elif isinstance(exc, TimeoutError) and self._ran_out(started):
            return self._timed_out(message, ctx, started)
        elif not isinstance(exc, Exception | GeneratorExit):
            return None
        log.exception(
            "%s raised%s: taken as retry()",
            self._where(message),
            " CancelledError" if isinstance(exc, asyncio.CancelledError) else "",
            extra=self._fields(message, ctx, started),
        )
        return retry(describe_exception(exc))

    def _fatal(
        self, exc: BaseException, message: Message[Any], ctx: Ctx, started: float
    ) -> Outcome:
        log.error(
            "%s raised %s: stopping the %s (the %s is taken as retry())",
            self._where(message),
            type(exc).__name__,
            self.owner,
            self.noun,
            extra=self._fields(message, ctx, started),
        )
        if self.on_fatal is not None:
            self.on_fatal(exc)
        return retry(describe_exception(exc))

    def _ran_out(self, started: float) -> bool:
        """Whether the call used up its timeout (a TimeoutError the handler raised itself
        before that is an exception like any other)."""
        return self.timeout is not None and time.monotonic() - started >= self.timeout

    def _timed_out(self, message: Message[Any], ctx: Ctx, started: float) -> Outcome:
        log.error(
            "%s ran past %ss: taken as retry()",
            self._where(message),
            self.timeout,
            extra=self._fields(message, ctx, started),
        )
        return retry(f"handler timed out after {self.timeout:g} s")
