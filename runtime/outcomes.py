"""What a handler returns: ack, drop, retry, retry_after(delay) or custom(name); None is ack."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, Protocol

from runtime.contract.errors import InvalidArgument

#: the longest delay retry_after() and enqueue(delay=) accept: one year, in seconds
MAX_DELAY_S = 365 * 24 * 3600.0
#: the most characters a last_error column is given: longer text is cut on a character
#: boundary and ends with "…" (2,000 characters are at most 8,000 bytes: every engine's TEXT)
LAST_ERROR_MAX = 2000


def error_text(text: str) -> str:
    """Why a delivery failed, as a last_error column keeps it: at most LAST_ERROR_MAX
    characters, NUL shown escaped (PostgreSQL's text refuses it), anything that is not
    UTF-8-encodable (a lone surrogate) replaced."""
    text = str(text).replace("\x00", "\\x00")
    text = text.encode("utf-8", "replace").decode("utf-8")
    if len(text) > LAST_ERROR_MAX:
        text = text[: LAST_ERROR_MAX - 1] + "…"
    return text


def describe_exception(exc: BaseException) -> str:
    """``KeyError: 'user_id'``: the exception's type and message, as last_error shows it."""
    message = str(exc)
    name = type(exc).__name__
    return error_text(f"{name}: {message}" if message else name)


def delay_seconds(
    delay: float | timedelta, what: str = "delay", maximum: float | None = MAX_DELAY_S
) -> float:
    """A delay as the seconds the database adds to its own clock, in milliseconds (what every
    engine keeps); ValueError for NaN, an infinity, a negative delay or one past ``maximum``.

    ``delay_seconds(timedelta(minutes=1))`` → ``60.0``
    """
    try:
        seconds = delay.total_seconds() if isinstance(delay, timedelta) else float(delay)
    except (TypeError, ValueError):
        raise InvalidArgument(
            f"{what} must be a number of seconds or a timedelta, not {delay!r}"
        ) from None
    if math.isnan(seconds) or seconds < 0 or (maximum is not None and seconds > maximum):
        limit = "" if maximum is None else f" up to {maximum:g} s (runtime.MAX_DELAY_S)"
        raise InvalidArgument(f"{what} must be from 0{limit}, not {delay!r}")
    if math.isinf(seconds):
        raise InvalidArgument(f"{what} must be finite, not {delay!r}")
    return round(seconds, 3)


class OutcomeKind(StrEnum):
    """What a handler decided about its delivery."""

    ACK = "ack"
    DROP = "drop"
    RETRY = "retry"
    RETRY_AFTER = "retry_after"
    CUSTOM = "custom"


@dataclass(frozen=True)
class Outcome:
    """A handler's verdict on one delivery; build it with the functions below."""

    kind: OutcomeKind
    delay_s: float | None = None
    name: str | None = None
    #: why the delivery failed (retry, retry_after, custom): what a last_error column keeps
    reason: str | None = None
    #: what an ack keeps on the row (a result column): any value a payload may be
    result: Any = field(default=None, hash=False)

    @property
    def label(self) -> str:
        return f"custom.{self.name}" if self.kind is OutcomeKind.CUSTOM else str(self.kind)


# an Outcome is immutable: the three without arguments are made once
_ACK, _DROP, _RETRY = (
    Outcome(OutcomeKind.ACK),
    Outcome(OutcomeKind.DROP),
    Outcome(OutcomeKind.RETRY),
)
#: the plain ack, one object: what ``ack()`` and a handler's None are (``outcome is PLAIN_ACK``)
PLAIN_ACK = _ACK
#: the plain retry, one object: what ``retry()`` without a reason is
PLAIN_RETRY_OUTCOME = _RETRY


def ack(result: Any = None) -> Outcome:
    """The message is handled: ``return runtime.ack()``; ``ack(result={"rows": 3})`` keeps
    the handler's result on the row (a queue with a result column, read back by
    ``queue.status``). The result is encoded by the queue's payload rules; one that cannot be
    settles as a retry whose last_error says why. ``result=None`` is a plain ack."""
    return _ACK if result is None else Outcome(OutcomeKind.ACK, result=result)


def drop() -> Outcome:
    """A poison message: it leaves the queue exactly as an ack would. ``return runtime.drop()``."""
    return _DROP


def _reason(reason: str | None) -> str | None:
    if reason is None:
        return None
    if not isinstance(reason, str):
        raise InvalidArgument(f"reason must be text, not {reason!r}")
    return error_text(reason)


def retry(reason: str | None = None) -> Outcome:
    """Deliver again at once (or move to the dead letter at the cap): ``return runtime.retry()``;
    ``retry(reason="upstream 503")`` says why, for a last_error column."""
    return _RETRY if reason is None else Outcome(OutcomeKind.RETRY, reason=_reason(reason))


def retry_after(delay: float | timedelta, reason: str | None = None) -> Outcome:
    """Deliver again after a delay kept in the row: ``return runtime.retry_after(30)``;
    ``reason=`` says why, for a last_error column.

    ValueError at the call for NaN, an infinity, a negative delay or one past MAX_DELAY_S."""
    return Outcome(
        OutcomeKind.RETRY_AFTER,
        delay_s=delay_seconds(delay, "retry_after's delay"),
        reason=_reason(reason),
    )


def custom(name: str, reason: str | None = None) -> Outcome:
    """Run the queue's own declared event instead: ``return runtime.custom("park")``; its SQL
    may bind ``:error``, the ``reason`` given here."""
    return Outcome(OutcomeKind.CUSTOM, name=name, reason=_reason(reason))


def outcome_of(returned: object) -> Outcome:
    """What a handler's return value settles as: an Outcome decides; ``None`` (a handler that
    returns nothing) is ``ack()``. TypeError, naming the value's type, for anything else (the
    caller logs it and takes it as a retry)."""
    if returned is None:
        return _ACK
    if isinstance(returned, Outcome):
        return returned
    raise TypeError(
        f"returned {type(returned).__name__} {returned!r}, not an outcome "
        "(return None or runtime.ack(), runtime.retry(), …)"
    )


class RetryPolicy(Protocol):
    """What ``Consumer(..., retry_policy=…)`` asks: the delay before delivery ``attempt + 1``
    after delivery ``attempt`` (1 first; None without an attempt column) failed; None to
    deliver it again at once (a plain ``retry()``)."""

    def delay(self, attempt: int | None) -> float | timedelta | None: ...


@dataclass(frozen=True)
class Immediate:
    """The retry policy that delivers a failed message again at once (``retry()`` as it is):
    ``Consumer(..., retry_policy=runtime.Immediate())``. It needs no retry_after column. The
    cap (max_attempts) and the dead letter still apply."""

    def delay(self, attempt: int | None) -> None:
        return None


@dataclass
class ExponentialBackoff:
    """``base * factor ** (attempt - 1)`` seconds, at most ``cap``, less up to ``jitter`` of it
    drawn at random (0: exact; 0.5: between half and all of it), so messages that failed
    together do not come back together. Without an attempt column every delay is the first.

    ``runtime.ExponentialBackoff(base=1, factor=2, cap=300, jitter=0.2)``: 0.8-1 s, 1.6-2 s,
    3.2-4 s, … up to 240-300 s.
    """

    base: float = 1.0
    factor: float = 2.0
    cap: float = 300.0
    jitter: float = 0.0
    rng: random.Random = field(default_factory=random.Random, repr=False, compare=False)

    def __post_init__(self) -> None:
        ok = (
            all(isinstance(v, int | float) and math.isfinite(v) for v in (self.base, self.factor))
            and self.base > 0
            and self.factor >= 1
            and isinstance(self.jitter, int | float)
            and 0 <= self.jitter <= 1
        )
        if not ok:
            raise InvalidArgument(
                "ExponentialBackoff needs base > 0, factor >= 1 and 0 <= jitter <= 1 (got "
                f"base={self.base!r}, factor={self.factor!r}, jitter={self.jitter!r})"
            )
        self.cap = delay_seconds(self.cap, "ExponentialBackoff's cap")
        if self.cap < self.base:
            raise InvalidArgument(
                f"ExponentialBackoff needs cap >= base (got {self.cap} < {self.base})"
            )

    def delay(self, attempt: int | None) -> float:
        steps = max(1, attempt or 1) - 1
        # compared in logs: a high attempt past the cap never overflows the power
        if steps * math.log(self.factor) < math.log(self.cap / self.base):
            full = min(self.cap, self.base * self.factor**steps)
        else:
            full = self.cap
        return round(full * (1 - self.jitter * self.rng.random()), 3)


#: the default retry policy of a queue with a retry_after column: 1 s doubling per delivery
#: up to 1 h, each delay less up to 20 % of it drawn at random
DEFAULT_RETRY_BASE_S = 1.0
DEFAULT_RETRY_FACTOR = 2.0
DEFAULT_RETRY_CAP_S = 3600.0
DEFAULT_RETRY_JITTER = 0.2


def default_retry_policy(
    base: float = DEFAULT_RETRY_BASE_S, cap: float = DEFAULT_RETRY_CAP_S
) -> ExponentialBackoff:
    """The policy a Consumer uses when given none, on a queue with a retry_after column:
    ``ExponentialBackoff(base=1, factor=2, cap=3600, jitter=0.2)``, so the retry after
    delivery 1 waits 0.8-1 s, after delivery 2 1.6-2 s, then 3.2-4 s, 6.4-8 s, … and from
    delivery 13 on 48-60 min."""
    return ExponentialBackoff(
        base=base, factor=DEFAULT_RETRY_FACTOR, cap=cap, jitter=DEFAULT_RETRY_JITTER
    )


#: what last_error says of a retry() the handler gave no reason for
PLAIN_RETRY = "the handler returned retry() without a reason"


def with_policy(outcome: Outcome, attempt: int | None, policy: RetryPolicy | None) -> Outcome:
    """A retry() under a policy: retry_after(the policy's delay), or retry() as it is when the
    policy says None (``Immediate``); any other outcome as it is."""
    if policy is None or outcome.kind is not OutcomeKind.RETRY:
        return outcome
    delay = policy.delay(attempt)
    if delay is None:
        return outcome
    # the row says why as the handler put it: a plain retry() stays one in last_error
    return retry_after(delay, reason=outcome.reason or PLAIN_RETRY)
