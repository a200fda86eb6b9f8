"""The parameters a claim and a settlement bind, typed: a misspelt key is a mypy error.

Each is a ``TypedDict``, so at run time it is the plain dict the driver binds (no object
built per message beyond it); the keys are the parameter names the rendered statements
use (``:id``, ``:token``, ``:delay_s``, …), unchanged.
"""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict


class SettleParams(TypedDict):
    """What a settlement's statement binds (runtime.settle): the delivery, the queue's
    settings, the outcome's delay and error."""

    id: int
    #: the lease form's token (None in the other forms)
    token: Any
    group: str | None
    attempt: int | None
    dead_group: str | None
    lease_s: float | None
    delay_s: float | None
    error: str | None
    #: ``ack_result``: the handler's result, encoded
    result: NotRequired[str]


class ManyParams(TypedDict):
    """What an ``<outcome>_many`` statement binds: the part's delay and error, the dead group,
    and its rows (``ids``; the lease form's ``pairs`` of id and token)."""

    delay_s: float | None
    error: str | None
    dead_group: str | None
    #: a JSON array of ids
    ids: NotRequired[str]
    #: a JSON array of [id, token] (lease)
    pairs: NotRequired[str]


class ClaimParams(TypedDict):
    """What a claim binds (and ``take``, ``rate_take``, ``rate_refund``, ``limit_slots``)."""

    limit: int
    #: how far past its batch a claim looks: the rows the other workers hold
    scan: int
    group: str | None
    lease_s: float | None
    #: row lock: how long a counted row stays marked not ready
    hold_s: NotRequired[float]
    #: the rows a take locks (row lock) or re-checks (advisory): a JSON array of ids
    ids: NotRequired[str]
    #: rate_refund: the tokens the claim did not use
    unused: NotRequired[int]
    #: an advisory claim that takes (PostgreSQL): the keys it releases first, a JSON array
    #: of ids (the rows the connection's last batch finished)
    release: NotRequired[str]
