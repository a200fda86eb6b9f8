"""A delivery: one claimed row as the handler sees it (Message, Ctx) and as a form holds it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic

from runtime.contract.errors import PayloadError
from runtime.drivers.base import Connection
from runtime.payloads import P


@dataclass(frozen=True)
class Message(Generic[P]):
    """What a handler receives: ``message.id``, ``message.payload``, ``message.group``.

    ``Message[Order]``: the payload of a queue loaded with ``payload=Order``, an ``Order``."""

    id: int
    payload: P
    group: str | None = None


_new = object.__new__


def message_of(id: int, payload: P, group: str | None = None) -> Message[P]:
    """``Message(id, payload, group)``, made without the frozen dataclass's ``__init__``,
    whose three ``object.__setattr__`` calls cost as much again: the runtime makes one for
    each delivery it claims."""
    m = _new(Message)
    fields = m.__dict__
    fields["id"] = id
    fields["payload"] = payload
    fields["group"] = group
    return m


@dataclass(slots=True)
class Ctx:
    """The handler's context: ``ctx.attempt`` (1 on the first delivery; None without the column)
    and, in transactional mode, ``ctx.db``: writes there commit with an ack and only with it.
    ``await ctx.progress(value)`` records how far the handler got (a progress column)."""

    attempt: int | None
    db: Any = None
    queue: str = ""
    #: writes a progress value for this delivery (set by the consumer): called as
    #: ``_report(_conn, _delivery, value)``, the worker's connection and the delivery
    _report: Callable[[Any, Any, Any], Awaitable[None]] | None = field(default=None, repr=False)
    _conn: Any = field(default=None, repr=False)
    _delivery: Any = field(default=None, repr=False)

    async def progress(self, value: Any) -> None:
        """Record the handler's progress on its row, in a statement of its own fenced as
        settlements are (the lease token; the held key or row lock): ``await
        ctx.progress({"done": 40, "of": 100})``; ``queue.status`` reads it back.

        ``value`` is any value a payload may be (a number, a dict, …), encoded by the
        queue's payload rules: one that cannot be raises PayloadError, nothing written. A
        queue without a progress column raises ConfigurationError; a lease lost since the
        claim raises LeaseLost. Seen by other connections at once in the lease form, and in
        the advisory form unless transactional; otherwise (row lock, transactional advisory)
        when the delivery's transaction commits."""
        if self._report is None:
            from runtime.contract.errors import ConfigurationError

            raise ConfigurationError(
                "ctx.progress() records progress of a delivery: call it inside a handler "
                "that a Consumer runs"
            )
        await self._report(self._conn, self._delivery, value)


@dataclass(frozen=True, slots=True)
class Decision:
    """How a delivery settles, once decided (runtime.settle): the step to run (None: no
    statement, e.g. a row-lock retry without an attempt column), the label the counts
    report, and what the statement binds besides the delivery's own row.

    It names nothing of a delivery, so one Decision settles every delivery of the same
    outcome, delay and error (``runtime.settle.decide`` hands out shared ones); the
    delivery's id, token and attempt are bound beside it (``runtime.settle.params_of``)."""

    label: str
    #: a statement name, or ``custom.<name>`` (its step: ``queue.steps.settle[step]``)
    step: str | None
    commits_handler_writes: bool
    #: ``:delay_s``: a retry's delay, in seconds (None: the statement's own)
    delay_s: float | None = None
    #: ``:error``: the reason last_error keeps (or a custom event's statement reads)
    error: str | None = None
    #: ``:result``: an ack's result, encoded (``ack_result``)
    result: str | None = None


@dataclass(eq=False, slots=True)
class Delivery:
    """A claimed row and what holds it: the lease token, or the advisory key's connection."""

    message: Message
    attempt: int | None
    token: Any = None
    settled: bool = False
    lost: bool = False
    #: its handler started (a row given back before that does not use up an attempt)
    started: bool = False
    conn: Connection | None = None
    #: how long its handler ran, in seconds (None until it ran)
    handler_s: float | None = None
    #: what its handler's outcome settles it with, once decided (kept so that a settlement
    #: lost with its connection can run again on a new one: the lease form's token guards it)
    decision: Decision | None = None
    #: why its stored payload could not be decoded when it was claimed (``message.payload``
    #: is then the stored text): never handled, to the dead letter (see Consumer)
    undecodable: PayloadError | None = None
    #: ``lock``, None until something takes it (a settlement reads it as it is: one that is
    #: locked now has an extension or a progress write in flight)
    _lock: asyncio.Lock | None = None

    @property
    def lock(self) -> asyncio.Lock:
        """Serialises the lease extension with the settlement, so neither sees a stale token
        (made on first use: only the lease form takes it)."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        return self._lock


class Batch(list[Delivery]):
    """A claim's deliveries; ``contended``: ready rows were there, but other workers held them
    all; ``raced``: the claim held ready rows, but other workers settled every one of them
    before it could take them (the queue moved on: claim again at once)."""

    def __init__(
        self,
        deliveries: list[Delivery] | None = None,
        contended: bool = False,
        raced: bool = False,
    ) -> None:
        super().__init__(deliveries or ())
        self.contended = contended
        self.raced = raced
