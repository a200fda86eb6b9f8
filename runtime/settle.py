"""Which statement settles an outcome: the cap, the missing-column fallback and custom events, decided once for every form."""

from __future__ import annotations

import logging

from runtime.contract.errors import PayloadError, UnknownCustomEvent
from runtime.contract.rendered import StatementName as S

# Decision is defined with the Delivery that carries it; the forms import it from here
from runtime.delivery import Decision as Decision
from runtime.delivery import Delivery
from runtime.loaded import LoadedQueue
from runtime.metrics import fields
from runtime.outcomes import PLAIN_ACK, PLAIN_RETRY, Outcome, OutcomeKind
from runtime.params import SettleParams
from runtime.payloads import encode_payload

log = logging.getLogger("runtime")
#: a plain ack's label and statement name
_ACK = OutcomeKind.ACK.value


def _error(queue: LoadedQueue, outcome: Outcome | None, reason: str | None) -> str | None:
    """What ``:error`` binds: with a last_error column, the reason (or what the handler
    returned); without one, only a custom event's reason (its own SQL may use it), so that
    deliveries of one outcome still settle together whatever their reason."""
    kind = outcome.kind if outcome is not None else None
    if reason is None and outcome is not None:
        reason = outcome.reason
    if "last_error" not in queue.columns:
        return reason if kind is OutcomeKind.CUSTOM else None
    if reason is None and kind is OutcomeKind.RETRY:
        return PLAIN_RETRY
    if reason is None and outcome is not None and kind is OutcomeKind.RETRY_AFTER:
        return f"the handler returned retry_after({outcome.delay_s:g}) without a reason"
    return reason


#: the Decisions handed out so far, one per distinct settlement; bounded (errors that name
#: their row would otherwise grow it): when full it starts over, and a Decision made again
#: settles as the old one did
_SHARED: dict[tuple[str, str | None, bool, float | None, str | None], Decision] = {}
_SHARED_MAX = 1024


def _shared(
    label: str,
    step: str | None,
    commits_handler_writes: bool,
    delay_s: float | None = None,
    error: str | None = None,
) -> Decision:
    """The one Decision of this settlement, so that deliveries settled alike hold the same
    object (``Form.many_parts`` then puts a group of them in one part without a look at
    each)."""
    key = (label, step, commits_handler_writes, delay_s, error)
    decision = _SHARED.get(key)
    if decision is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        decision = _SHARED[key] = Decision(label, step, commits_handler_writes, delay_s, error)
    return decision


def acked(queue: LoadedQueue) -> Decision:
    """A plain ack's Decision on ``queue``: the one ``decide`` returns for ``ack()``."""
    return _shared(_ACK, _ACK if _ACK in queue.steps.settle else None, True)


def params_of(queue: LoadedQueue, delivery: Delivery, decision: Decision) -> SettleParams:
    """What a decision's statement binds for ``delivery``: its row, token and attempt, the
    queue's settings, and the decision's delay, error and result."""
    message = delivery.message
    params: SettleParams = {
        "id": message.id,
        "token": delivery.token,
        "group": message.group,
        "attempt": delivery.attempt,
        "dead_group": queue.dead_group,
        "lease_s": queue.lease_s,
        "delay_s": decision.delay_s,
        "error": decision.error,
    }
    if decision.result is not None:
        params["result"] = decision.result
    return params


def dead_letter_now(queue: LoadedQueue, delivery: Delivery, reason: str) -> Decision | None:
    """Move the row to its dead letter whatever its attempt (a payload that cannot be
    decoded will never be handled), ``reason`` for last_error; None when the queue declares
    no dead letter."""
    if queue.steps.dead_letter is None:
        return None
    return _shared(str(S.DEAD_LETTER), S.DEAD_LETTER, False, None, _error(queue, None, reason))


def decide(queue: LoadedQueue, delivery: Delivery, outcome: Outcome) -> Decision:
    """Turn a handler's outcome into the statement that settles it: a Decision shared by
    every delivery settled alike (only an ack's result is a delivery's own)."""
    if outcome is PLAIN_ACK:  # most deliveries' outcome: nothing to check, no error to word
        return acked(queue)
    steps = queue.steps
    kind = outcome.kind
    delay_s = outcome.delay_s
    error = _error(queue, outcome, None)
    if kind is OutcomeKind.CUSTOM:
        name = outcome.label  # custom.<name>: the statement's name in the file
        if name not in steps.settle:
            known = ", ".join(steps.custom)
            raise UnknownCustomEvent(
                f"queue '{queue.name}' declares no custom event {outcome.name!r} "
                f"(declared: {known or 'none'}); add [queues.{queue.name}.custom.{outcome.name}] "
                "to qgen.toml and render again"
            )
        return _shared(name, name, False, delay_s, error)
    if kind is OutcomeKind.RETRY_AFTER and steps.retry_after is None:
        log.warning(
            "queue %s: retry_after(%s) on a table without a retry_after column is taken as "
            "retry() (message %s)",
            queue.name,
            outcome.delay_s,
            delivery.message.id,
            extra=fields(queue.name, delivery.message.id, delivery.attempt, "retry"),
        )
        kind = OutcomeKind.RETRY
    if kind in (OutcomeKind.RETRY, OutcomeKind.RETRY_AFTER):
        cap = queue.max_attempts
        if cap is not None and delivery.attempt is not None and delivery.attempt >= cap:
            log.warning(
                "queue %s: message %s failed delivery %s of max_attempts %s: moving it to the "
                "dead letter (%s)",
                queue.name,
                delivery.message.id,
                delivery.attempt,
                cap,
                queue.rendered.header.dead_letter,
                extra=fields(
                    queue.name,
                    delivery.message.id,
                    delivery.attempt,
                    "dead_letter",
                    delivery.handler_s,
                ),
            )
            return _shared(str(S.DEAD_LETTER), S.DEAD_LETTER, False, delay_s, error)
    label = kind.value
    step = label if label in steps.settle else None
    if kind is OutcomeKind.ACK and outcome.result is not None:
        step, result = _with_result(queue, delivery, outcome, step)
        if result is not None:  # the delivery's own: never shared
            return Decision(label, step, True, delay_s, error, result)
    return _shared(label, step, kind is OutcomeKind.ACK, delay_s, error)


def _with_result(
    queue: LoadedQueue, delivery: Delivery, outcome: Outcome, step: str | None
) -> tuple[str | None, str | None]:
    """An ack with a result: ``ack_result`` and the encoded value its ``result`` parameter
    binds. PayloadError when the value cannot be stored (the consumer settles it as a
    retry); a queue without a result column acks as usual (no result), with a warning."""
    if queue.steps.ack_result is None:
        log.warning(
            "queue %s: ack(result=…) on a table without a result column: acked, the result "
            "is not kept (declare columns.result and render again) (message %s)",
            queue.name,
            delivery.message.id,
            extra=fields(queue.name, delivery.message.id, delivery.attempt, "ack"),
        )
        return step, None
    try:
        result = encode_payload(outcome.result, queue.encoder)
    except PayloadError as exc:
        why = str(exc).removeprefix("payload cannot be stored: ")
        raise PayloadError(f"the handler's result cannot be stored: {why}") from None
    return S.ACK_RESULT, result
