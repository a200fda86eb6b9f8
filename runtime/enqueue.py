"""What an enqueue sets besides the payload, checked against the queue's header once.

``Queue.enqueue``, ``Queue.enqueue_many`` and ``queue.sync`` take the same keyword-only
options (``delay``, ``group``, ``priority``, ``fifo_key``, ``dedupe_key``, ``values``,
``concurrency_key``); each builds one ``EnqueueOptions`` before it encodes a payload, so a bad
option raises one error naming it and its fix, and nothing is written.
``EnqueueOptions.check(queue.rendered.header, delay=30, group="eu")``
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType
from typing import Any, TypedDict

from runtime.contract.dialects import DIALECTS
from runtime.contract.errors import ConfigurationError, InvalidArgument
from runtime.contract.names import KEY_MAX
from runtime.contract.rendered import Header
from runtime.outcomes import delay_seconds

#: a priority fits the column every engine stores it in (a 32-bit INTEGER)
PRIORITY_RANGE = (-(2**31), 2**31 - 1)


def _no_column(queue: str, role: str) -> ConfigurationError:
    return ConfigurationError(
        f"queue '{queue}' has no {role} column: enqueue without {role}=, or declare "
        f"columns.{role} and render again"
    )


def _priority(queue: str, priority: Any) -> int | None:
    """A priority as the enqueue binds it: a whole number in PRIORITY_RANGE, or None (0)."""
    if priority is None:
        return None
    low, high = PRIORITY_RANGE
    if isinstance(priority, bool) or not isinstance(priority, int) or not low <= priority <= high:
        raise InvalidArgument(
            f"queue '{queue}': priority {priority!r} is not a whole number from {low} to {high}"
        )
    return priority


def _fifo_key(queue: str, key: Any, role: str = "fifo_key") -> str | None:
    """A fifo_key (or concurrency_key) as the enqueue binds it: 1 to KEY_MAX characters,
    or None."""
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= KEY_MAX:
        raise InvalidArgument(
            f"queue '{queue}': {role} {key!r} is not a string of 1 to {KEY_MAX} characters"
        )
    return key


def _dedupe_key(key: Any) -> str | None:
    if key is None:
        return None
    # MySQL and MariaDB compare text ignoring trailing spaces (PAD SPACE), even in binary
    # collations: "k " would be "k" there, so no key ends with a space
    if not isinstance(key, str) or not key or len(key) > KEY_MAX or key.endswith(" "):
        raise InvalidArgument(
            f"dedupe_key must be text of 1 to {KEY_MAX} characters not ending with a "
            f"space, not {key!r:.60}"
        )
    return key


def _group(header: Header, group: Any) -> str | None:
    """The group as bound: the one given, else the queue's default_group."""
    if group is None:
        return header.default_group
    if "group" not in header.columns:
        raise _no_column(header.name, "group")
    if not isinstance(group, str):
        raise InvalidArgument(
            f"queue '{header.name}': group must be a string (the message group), not {group!r:.60}"
        )
    return group


def _delay(header: Header, delay: float | timedelta | None) -> float | None:
    if delay is None:
        return None
    if "retry_after" not in header.columns:
        raise ConfigurationError(
            f"queue '{header.name}' has no retry_after column, so it cannot delay a message: "
            "enqueue without delay=, or declare columns.retry_after and render again"
        )
    return delay_seconds(delay)


def _values(header: Header, values: Any) -> dict[str, Any]:
    """Each other column → its value; a column not given gets NULL."""
    others = header.other_columns
    if values is None:
        values = {}
    if not isinstance(values, Mapping):
        raise InvalidArgument(
            f"queue '{header.name}': values must be a mapping of other column → value "
            f"(e.g. values={{'tenant': 7}}), not {type(values).__name__}"
        )
    unknown = sorted(set(values) - set(others))
    if unknown:
        raise ConfigurationError(
            f"queue '{header.name}' has no other column {unknown[0]!r} (declared: "
            f"{', '.join(others) or 'none'}): list it under other_columns and render again"
        )
    return {col: values.get(col) for col in others}


def _fits(header: Header, group: str | None, values: Mapping[str, Any]) -> None:
    """A dedupe enqueue on MySQL and MariaDB is an INSERT IGNORE, which would cut a value
    too long for its column instead of failing: refuse such a value first."""
    if group is not None and len(group) > KEY_MAX:
        raise InvalidArgument(f"group must be at most {KEY_MAX} characters, not {len(group)}")
    limit = DIALECTS[header.dialect].text_bytes
    for name, value in values.items():
        if limit and isinstance(value, str | bytes):
            size = len(value.encode() if isinstance(value, str) else value)
            if size > limit:
                raise InvalidArgument(
                    f"values[{name!r}] is {size} bytes; its TEXT column on "
                    f"{DIALECTS[header.dialect].name} keeps at most {limit}"
                )


def check_dedupe_key(header: Header, key: Any) -> str | None:
    """One dedupe_key as bound: text of 1 to KEY_MAX characters, or None; a key given to a
    queue without the column is refused."""
    if "dedupe_key" in header.columns:
        return _dedupe_key(key)
    if key is not None:
        raise _no_column(header.name, "dedupe_key")
    return None


def check_dedupe_keys(header: Header, keys: Iterable[Any], count: int) -> list[str | None]:
    """enqueue_many's keys, one (or None) per payload, each checked."""
    given = list(keys)
    if len(given) != count:
        raise InvalidArgument(
            f"dedupe_keys has {len(given)} keys for {count} payloads: give one per payload"
        )
    return [check_dedupe_key(header, k) for k in given]


class BatchOptions(TypedDict, total=False):
    """The options ``enqueue_many`` takes (besides ``dedupe_keys``), keyword-only, each for
    every item of the batch."""

    #: seconds (or a timedelta) the message waits before it is claimable
    delay: float | timedelta | None
    #: the message group (a group column; None: the queue's default_group)
    group: str | None
    #: a priority column's value: higher is claimed first (None: the column's default, 0)
    priority: int | None
    #: a fifo_key column's value: delivered after every earlier message of the key finished
    fifo_key: str | None
    #: the other columns' values (other_columns; a column not given gets NULL)
    values: Mapping[str, Any] | None
    #: a concurrency_key column's value: counted against its key's concurrency_limit
    concurrency_key: str | None


class Options(BatchOptions, total=False):
    """The options ``enqueue`` takes, keyword-only: ``BatchOptions`` and ``dedupe_key``."""

    #: a dedupe_key column's value: a pending message holding it is the one enqueued
    dedupe_key: str | None


#: each call's option names, for the error an unknown one gets
OPTION_NAMES = tuple(Options.__annotations__)
BATCH_OPTION_NAMES = (*BatchOptions.__annotations__, "dedupe_keys")


@dataclass(frozen=True)
class EnqueueOptions:
    """The options of an enqueue, each checked against the queue's header: build them with
    ``EnqueueOptions.check``; ``params`` gives the enqueue step's parameters for a payload."""

    #: the queue's name, for messages
    queue: str
    #: seconds the message waits before it is claimable (None: none)
    delay_s: float | None = None
    #: the message group as bound (the queue's default_group when none was given)
    group: str | None = None
    priority: int | None = None
    fifo_key: str | None = None
    concurrency_key: str | None = None
    dedupe_key: str | None = None
    #: every other column → its value (None where not given)
    values: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    #: the step's parameters but the payload (and the dedupe_key), in the order it binds them
    bound: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    @classmethod
    def of(
        cls,
        header: Header,
        options: Mapping[str, Any],
        call: str = "enqueue",
        names: tuple[str, ...] = OPTION_NAMES,
    ) -> EnqueueOptions:
        """``check`` for the options a call was given as keywords; an unknown one raises
        InvalidArgument naming ``call`` and its option ``names``."""
        unknown = sorted(set(options) - set(names))
        if unknown:
            close = difflib.get_close_matches(unknown[0], names, n=1)
            raise InvalidArgument(
                f"{call}() has no option {unknown[0]!r}: "
                f"{f'did you mean {close[0]}? ' if close else ''}its options are "
                f"{', '.join(names)}"
            )
        return cls.check(header, **options)

    @classmethod
    def check(
        cls,
        header: Header,
        *,
        delay: float | timedelta | None = None,
        group: str | None = None,
        priority: int | None = None,
        fifo_key: str | None = None,
        dedupe_key: str | None = None,
        values: Mapping[str, Any] | None = None,
        concurrency_key: str | None = None,
    ) -> EnqueueOptions:
        """The options, or one error naming the bad one and its fix (ConfigurationError for
        an option the queue has no column for, InvalidArgument for a bad value)."""
        cols = header.columns
        bound_group = _group(header, group)
        delay_s = _delay(header, delay)
        others = _values(header, values)
        bound: dict[str, Any] = {"group": bound_group, "delay_s": delay_s}
        if "priority" in cols:
            bound["priority"] = _priority(header.name, priority)
        elif priority is not None:
            raise _no_column(header.name, "priority")
        if "fifo_key" in cols:
            bound["fifo_key"] = _fifo_key(header.name, fifo_key)
        elif fifo_key is not None:
            raise _no_column(header.name, "fifo_key")
        if "concurrency_key" in cols:
            bound["concurrency_key"] = _fifo_key(header.name, concurrency_key, "concurrency_key")
        elif concurrency_key is not None:
            raise _no_column(header.name, "concurrency_key")
        bound.update((f"value_{col}", v) for col, v in others.items())
        if header.channel is not None:
            bound["channel"] = header.channel
        key = check_dedupe_key(header, dedupe_key)
        if "dedupe_key" in cols:
            _fits(header, bound_group, others)
            bound["dedupe_key"] = key
        return cls(
            queue=header.name,
            delay_s=delay_s,
            group=bound_group,
            priority=bound.get("priority"),
            fifo_key=bound.get("fifo_key"),
            concurrency_key=bound.get("concurrency_key"),
            dedupe_key=key,
            values=MappingProxyType(others),
            bound=MappingProxyType(bound),
        )

    def params(self, payload: str) -> dict[str, Any]:
        """The enqueue step's parameters for an encoded payload."""
        return {"payload": payload, **self.bound}

    def keyed_params(self, payload: str, key: str | None) -> dict[str, Any]:
        """The parameters with another dedupe_key (one of enqueue_many's, checked by
        ``check_dedupe_keys``) in place of the options' own."""
        params = {"payload": payload, **self.bound}
        if "dedupe_key" in params:
            params["dedupe_key"] = key
        return params
