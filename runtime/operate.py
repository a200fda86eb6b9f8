"""Operating a queue: stats, the dead letter (list, show, redrive, purge), prune, the pending
rows, and bringing delayed rows nearer.

Each function runs one rendered statement (``stats``, ``dead_list``/``dead_list_newest``,
``dead_show``, ``redrive``/``redrive_all``, ``purge_dead``/``purge_dead_all``, ``prune``,
``cancel``, ``pending_list``, ``advance``, ``pause``/``resume``/``paused``) on the connection it is given; ``runtime.Queue`` exposes them as methods and ``qgen stats``,
``qgen dead`` and ``qgen prune`` call them.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import timedelta
from decimal import Decimal
from typing import Any

from runtime.adapters import adapted
from runtime.contract.errors import ConfigurationError, InvalidArgument, RedriveRefused
from runtime.contract.names import KEY_MAX
from runtime.contract.rendered import Step
from runtime.loaded import Loaded, LoadedQueue
from runtime.outcomes import delay_seconds
from runtime.payloads import shown_payload
from runtime.process_keys import key_held
from runtime.steps import run_step

log = logging.getLogger("runtime")

#: the keys of ``queue.stats``, in the order ``qgen stats`` prints them
STATS_KEYS = ("ready", "delayed", "in_flight", "dead", "processed", "oldest_ready_s")
#: how many kept (processed) rows ``queue.stats`` counts at most: the count reads the rows,
#: so it is bounded, and ``processed_capped`` says there are more
PROCESSED_CAP = 10_000
#: what ``queue.stats`` adds for a queue with a last_error column
ERROR_KEYS = ("last_error", "dead_last_error")
#: the counts of unfinished rows ``queue.stats`` reads in one pass, bounded by ``count_cap``
LIVE_KEYS = ("ready", "delayed", "in_flight")
_MIN_ID, _MAX_ID = -(2**63), 2**63 - 1


def _params(queue: Loaded, group: str | None = None) -> dict[str, Any]:
    # an outbox (stats, per_minute) has neither
    return {
        "group": group if group is not None else getattr(queue, "default_group", None),
        "dead_group": getattr(queue, "dead_group", None),
    }


async def _run(queue: Loaded, db: Any, step: Step, params: dict[str, Any]) -> Any:
    conn = await adapted(db)
    queue.rendered.check_runs_on(conn.dialect)
    # an Adapted connection is always in a transaction: run_step never needs its begin()
    return await run_step(conn, step, params)  # type: ignore[arg-type]


def _need_dead_letter(queue: LoadedQueue) -> None:
    if queue.rendered.header.dead_group is None and queue.rendered.header.dead_table is None:
        raise ConfigurationError(
            f"queue '{queue.name}' declares no dead letter: declare max_attempts and "
            "dead_letter and render again"
        )


def _number(value: Any) -> float | int | None:
    if value is None:
        return None
    if isinstance(value, Decimal | float):
        return float(value)
    return int(value)


async def stats(
    queue: LoadedQueue,
    db: Any,
    group: str | None = None,
    processed_cap: int | None = PROCESSED_CAP,
    count_cap: int | None = None,
) -> dict[str, Any]:
    """The queue's counts by the database's clock (see ``Queue.stats``); an outbox's too
    (ready: unmarked, processed: marked)."""
    for name, cap in (("processed_cap", processed_cap), ("count_cap", count_cap)):
        if cap is not None and (not isinstance(cap, int) or cap < 0):
            raise InvalidArgument(f"{name} must be at least 0 or None (got {cap!r})")
    # a bounded count reads at most cap + 1 rows: one more tells "at least cap"
    params = {
        **_params(queue, group),
        "processed_limit": _MAX_ID if processed_cap is None else processed_cap + 1,
        "count_limit": _MAX_ID if count_cap is None else count_cap + 1,
    }
    row = (await _run(queue, db, _need(queue, queue.steps.stats, "stats"), params)).rows[0]
    # counts are whole numbers (MySQL's and MariaDB's SUM answers a DECIMAL); the age is not
    out: dict[str, Any] = {
        k: _number(row[k]) if k == "oldest_ready_s" or row[k] is None else int(row[k])
        for k in STATS_KEYS
    }
    capped = _capped(out, "processed", processed_cap)
    out["processed_capped"] = bool(capped)
    # more unfinished rows than count_cap: ready, delayed and in_flight counted the oldest
    # count_cap + 1 of them only (each at least what it says; delayed is always 0 without
    # a retry_after column, in_flight None where SQL cannot see a hold)
    if count_cap is not None and int(row.get("pending") or 0) > count_cap:
        delays = "retry_after" in queue.rendered.header.columns
        live = [k for k in LIVE_KEYS if k != "delayed" or delays]
        capped += [k for k in live if _capped(out, k, count_cap, anyway=True)]
    capped += _capped(out, "dead", count_cap)
    out["capped"] = [k for k in STATS_KEYS if k in capped]
    if out["oldest_ready_s"] is not None:
        out["oldest_ready_s"] = max(0.0, float(out["oldest_ready_s"]))
    for k in ERROR_KEYS:  # a last_error column: why the newest failed and dead messages failed
        if k in row:
            out[k] = row[k]
    if "paused" in row:  # a pause table: a pause holds the queue or the group
        out["paused"] = bool(row["paused"])
    return out


def _capped(out: dict[str, Any], key: str, cap: int | None, anyway: bool = False) -> list[str]:
    """``[key]`` when the count of ``key`` stopped at ``cap`` (or ``anyway``: a count over
    some of the rows only), which it is then set to at most; else ``[]``."""
    if cap is None or out[key] is None or not (anyway or out[key] > cap):
        return []
    out[key] = min(out[key], cap)
    return [key]


def _shown_row(queue: LoadedQueue, row: dict[str, Any]) -> dict[str, Any]:
    """A dead (or pending) row as shown: its payload decoded and, with an attempt column, ``deliveries``,
    how many times it was delivered (the column holds the number the next delivery would
    read: the move to the dead letter counts the last one)."""
    out = dict(row)
    # an undecodable payload is one way into the dead letter: show its text and why, never
    # hide the other dead messages behind it
    out["payload"], error = shown_payload(row["payload"], queue.decoder)
    if error is not None:
        out["payload_error"] = error
    if row.get("attempt") is not None:
        out["deliveries"] = max(int(row["attempt"]) - 1, 0)
    return out


async def dead_list(
    queue: LoadedQueue,
    db: Any,
    limit: int = 100,
    after_id: int | None = None,
    newest_first: bool = False,
) -> list[dict[str, Any]]:
    """A page of dead messages (see ``Queue.dead_list``)."""
    _need_dead_letter(queue)
    if not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit must be a whole number of at least 1, not {limit!r}")
    if after_id is None:
        after_id = _MAX_ID if newest_first else _MIN_ID
    steps = queue.steps
    step = steps.dead_list_newest if newest_first else steps.dead_list
    params = {**_params(queue), "after_id": int(after_id), "limit": limit}
    result = await _run(queue, db, _need(queue, step, "dead_list"), params)
    return [_shown_row(queue, r) for r in result.rows]


async def dead_show(queue: LoadedQueue, db: Any, id: int) -> dict[str, Any] | None:
    """One dead message, or None (see ``Queue.dead_show``)."""
    _need_dead_letter(queue)
    result = await _run(
        queue,
        db,
        _need(queue, queue.steps.dead_show, "dead_show"),
        {**_params(queue), "id": int(id)},
    )
    return _shown_row(queue, result.rows[0]) if result.rows else None


def _ids(ids: Iterable[int]) -> list[int]:
    try:
        return [int(i) for i in ids]
    except (TypeError, ValueError):
        raise InvalidArgument(f"ids must be message ids (whole numbers), not {ids!r}") from None


async def redrive(
    queue: LoadedQueue, db: Any, ids: Iterable[int] | None = None, group: str | None = None
) -> int:
    """Send dead messages back as first deliveries (see ``Queue.redrive``)."""
    _need_dead_letter(queue)
    params = _params(queue, group)
    if queue.dead_group is not None and params["group"] is None:
        raise ConfigurationError(
            f"queue '{queue.name}' has no default_group: say which group the messages go "
            "back to (redrive(db, ids, group=…) or --group)"
        )
    if ids is not None:
        wanted = _ids(ids)
        if not wanted:
            return 0
        params["ids"] = json.dumps(wanted)
    if "dedupe_key" in queue.columns:
        await _refuse_taken_keys(queue, db, params)
    step = queue.steps.redrive_all if ids is None else queue.steps.redrive
    result = await _run(queue, db, _need(queue, step, "redrive"), params)
    return result.rowcount or 0


async def redrive_group(queue: LoadedQueue, db: Any, group: str) -> int:
    """Send every dead message of ``group`` back (see ``Queue.redrive_group``): a dead-letter
    table several queues (or groups) share keeps the others' messages."""
    _need_dead_letter(queue)
    step = queue.steps.redrive_group
    if step is None:
        raise ConfigurationError(
            f"queue '{queue.name}' cannot redrive one group's dead messages: that needs a "
            "dead-letter table and a group column (a dead-letter group holds only this "
            "queue's messages: redrive them all)"
        )
    if not isinstance(group, str) or not group:
        raise InvalidArgument(f"group must be a non-empty string (got {group!r})")
    params = {**_params(queue, group), "group": group}
    if "dedupe_key" in queue.columns:
        await _refuse_taken_keys(queue, db, params, queue.steps.redrive_blocked_group)
    result = await _run(queue, db, step, params)
    return result.rowcount or 0


async def _refuse_taken_keys(
    queue: LoadedQueue, db: Any, params: dict[str, Any], step: Step | None = None
) -> None:
    """A dead message goes back only if its dedupe_key is free: refuse the whole redrive
    otherwise (a key taken in between still fails on the unique index, nothing moved)."""
    steps = queue.steps
    if step is None:
        step = steps.redrive_blocked if "ids" in params else steps.redrive_blocked_all
    step = _need(queue, step, "redrive_blocked")
    blocked = [int(r["id"]) for r in (await _run(queue, db, step, params)).rows]
    if blocked:
        shown = ", ".join(map(str, blocked[:20])) + (" …" if len(blocked) > 20 else "")
        raise RedriveRefused(
            f"queue '{queue.name}': nothing sent back; dead messages {shown} hold a dedupe_key "
            "that a pending message holds (or an older dead message sent back with them): "
            "redrive the others by id, purge these, or wait for the pending message to finish",
            blocked,
        )


async def purge_dead(queue: LoadedQueue, db: Any, ids: Iterable[int] | None = None) -> int:
    """Delete dead messages for good (see ``Queue.purge_dead``)."""
    _need_dead_letter(queue)
    if ids is None:
        step = _need(queue, queue.steps.purge_dead_all, "purge_dead_all")
        result = await _run(queue, db, step, _params(queue))
    else:
        wanted = _ids(ids)
        if not wanted:
            return 0
        step = _need(queue, queue.steps.purge_dead, "purge_dead")
        result = await _run(queue, db, step, {**_params(queue), "ids": json.dumps(wanted)})
    return result.rowcount or 0


async def prune(
    queue: LoadedQueue, db: Any, older_than_s: float, batch: int = 1000, group: str | None = None
) -> int:
    """Delete processed rows older than ``older_than_s`` in batches (see ``Queue.prune``)."""
    if "processed_at" not in queue.columns:
        raise ConfigurationError(
            f"queue '{queue.name}' keeps no processed rows (no processed_at column): "
            "there is nothing to prune"
        )
    if not isinstance(batch, int) or batch < 1:
        raise InvalidArgument(f"batch must be a whole number of at least 1, not {batch!r}")
    params = {
        **_params(queue, group),
        "age_s": delay_seconds(older_than_s, "older_than_s", maximum=None),
        "batch": batch,
    }
    total = 0
    prune_step = _need(queue, queue.steps.prune, "prune")
    rotate = queue.steps.rotate
    if rotate is not None:
        # a partitioned layout: whole partitions past the age go first, in one statement;
        # the batches below delete what is left (a partition the age cuts through, rows
        # acked while their partition was missing, a partition whose lock was not granted)
        result = await _run(queue, db, rotate, {"age_s": params["age_s"], **_params(queue, group)})
        total += int(result.rows[0]["dropped"] or 0) if result.rows else 0
    while True:  # each batch commits on its own: no long-held locks
        result = await _run(queue, db, prune_step, params)
        deleted = result.rowcount or 0
        total += deleted
        if deleted < batch:
            return total


async def groups(queue: LoadedQueue, db: Any) -> dict[str, int]:
    """The unfinished rows of each group of the queue's table: ``{"orders": 12}``."""
    result = await _run(queue, db, _need_group(queue, queue.steps.groups), {})
    return {str(r["group"]): int(r["pending"]) for r in result.rows}


async def group_names(queue: LoadedQueue, db: Any) -> list[str]:
    """The groups of the queue's table that hold unfinished rows, in order: what ``groups``
    lists, without counting their rows (one index probe per group; a file rendered before
    ``group_names`` counts them with ``groups``)."""
    step = queue.steps.group_names
    if not step:
        return list(await groups(queue, db))
    result = await _run(queue, db, step, {})
    return [str(r["group"]) for r in result.rows]


async def regroup(queue: LoadedQueue, db: Any, from_group: str, group: str | None = None) -> int:
    """Move the unfinished rows of ``from_group`` to ``group`` (default: the queue's own),
    e.g. the rows a renamed queue left in its old group; how many moved. Refuses the queue's
    own group and its dead-letter group (a redrive sends dead messages back)."""
    step = _need_group(queue, queue.steps.regroup)
    target = group if group is not None else queue.default_group
    if not isinstance(from_group, str) or not from_group or target is None:
        raise InvalidArgument(
            f"regroup needs the group to move from and one to move to, not {from_group!r} → "
            f"{target!r}"
        )
    if from_group in (target, queue.dead_group):
        what = "the dead-letter group" if from_group == queue.dead_group else "the same group"
        raise InvalidArgument(
            f"queue '{queue.name}': {from_group!r} is {what}; name the group the rows were "
            "left in (`qgen verify` lists them), or use `qgen dead redrive` for dead messages"
        )
    params = {"from_group": from_group, "group": target}
    return (await _run(queue, db, step, params)).rowcount or 0


def _need_group(queue: LoadedQueue, step: Step | None) -> Step:
    if not step:
        raise ConfigurationError(
            f"queue '{queue.name}' has no group column (or its file predates `groups`): "
            "render it again with `qgen render`"
        )
    return step


async def cancel(queue: LoadedQueue, db: Any, id: int) -> bool:
    """Finish a message that is not in flight, as ack would (see ``Queue.cancel``)."""
    try:
        message = int(id)
    except (TypeError, ValueError):
        raise InvalidArgument(f"id must be a message id (a whole number), not {id!r}") from None
    # SQLite's advisory keys live in the consumers' process: those of this one are known
    advisory_here = queue.form == "advisory" and not queue.dialect.server_advisory
    if advisory_here and key_held(queue.table, message):
        return False
    params = {"id": message, "dead_group": queue.dead_group}
    try:
        result = await _run(queue, db, _need(queue, queue.steps.cancel, "cancel"), params)
    except BaseException:
        await _unlock_quietly(queue, db, message)
        raise
    return (result.rowcount or 0) > 0


async def _unlock_quietly(queue: LoadedQueue, db: Any, message: int) -> None:
    """A cancel that failed between taking a session-wide key (GET_LOCK) and releasing it
    gives the key back, as best it can (the connection may be gone)."""
    unlock = queue.steps.unlock
    if len(queue.steps.cancel or ()) < 2 or unlock is None:
        return
    try:
        await _run(queue, db, unlock, {"ids": json.dumps([message])})
    except Exception:  # the cancel's own error is the one to raise
        log.debug("queue %s: could not release the key of message %s", queue.name, message)


async def pending_list(
    queue: LoadedQueue,
    db: Any,
    limit: int = 100,
    after_id: int | None = None,
    group: str | None = None,
) -> list[dict[str, Any]]:
    """A page of pending messages, oldest first (see ``Queue.pending_list``)."""
    if not isinstance(limit, int) or limit < 1:
        raise InvalidArgument(f"limit must be a whole number of at least 1, not {limit!r}")
    params = {
        **_params(queue, group),
        "after_id": _MIN_ID if after_id is None else int(after_id),
        "limit": limit,
    }
    result = await _run(queue, db, _need(queue, queue.steps.pending_list, "pending_list"), params)
    rows = [_shown_row(queue, r) for r in result.rows]
    for row in rows:
        if row.get("due_s") is not None:
            row["due_s"] = max(0.0, float(row["due_s"]))
    return rows


async def advance(
    queue: LoadedQueue, db: Any, seconds: float | timedelta, group: str | None = None
) -> int:
    """Bring the delayed messages ``seconds`` nearer (see ``Queue.advance``); how many moved."""
    if "retry_after" not in queue.columns:
        raise ConfigurationError(
            f"queue '{queue.name}' has no retry_after column: no message of it is ever delayed"
        )
    by_s = delay_seconds(seconds, "seconds")
    params = {**_params(queue, group), "by_s": by_s}
    return (
        await _run(queue, db, _need(queue, queue.steps.advance, "advance"), params)
    ).rowcount or 0


def _need(queue: Loaded, step: Step | None, name: str) -> Step:
    """A statement files rendered before it existed lack: say how to get it."""
    if not step:
        raise ConfigurationError(
            f"{queue.rendered.path} has no `{name}` statement (it was rendered by an older "
            "qgen): render it again with `qgen render`"
        )
    return step


#: the window of the console's per-minute counts: the last hour
WINDOW_S = 3600


async def per_minute(
    queue: LoadedQueue, db: Any, window_s: int = WINDOW_S, group: str | None = None
) -> dict[str, list[int] | None]:
    """Messages finished (``processed_at``) and enqueued (``enqueued_at``; an outbox's
    ``created_at``) in each minute of the last ``window_s`` seconds, by the database's clock:
    ``{"finished": [n0, n1, …], "enqueued": […]}``, index 0 the current minute; None where the
    table keeps no such column. Works for a queue and an outbox."""
    minutes = max(1, -(-int(window_s) // 60))
    out: dict[str, list[int] | None] = {}
    steps = queue.steps
    for key, step in (
        ("finished", steps.finished_per_minute),
        ("enqueued", steps.enqueued_per_minute),
    ):
        if not step:
            out[key] = None
            continue
        counts = [0] * minutes
        params = {**_params(queue, group), "window_s": int(window_s)}
        for r in (await _run(queue, db, step, params)).rows:
            # a row stamped after this read began, or on the window's edge: the nearest minute
            counts[min(max(int(r["minute"]), 0), minutes - 1)] += int(r["n"])
        out[key] = counts
    return out


async def ready_by_priority(
    queue: LoadedQueue, db: Any, group: str | None = None
) -> list[dict[str, int]]:
    """The ready messages of each priority, highest first: ``[{"priority": 5, "ready": 3}]``;
    empty for a queue without a priority column."""
    step = queue.steps.ready_by_priority
    if not step:
        return []
    result = await _run(queue, db, step, _params(queue, group))
    return [{"priority": int(r["priority"]), "ready": int(r["ready"])} for r in result.rows]


async def fifo_waiting(
    queue: LoadedQueue, db: Any, limit: int = 20, group: str | None = None
) -> list[dict[str, Any]]:
    """Up to ``limit`` fifo keys with messages waiting behind the key's head, most waiting
    first: ``[{"fifo_key": "acct-1", "head_id": 12, "waiting": 4}]``; empty for a queue
    without a fifo_key column."""
    step = queue.steps.fifo_waiting
    if not step:
        return []
    params = {**_params(queue, group), "limit": int(limit)}
    result = await _run(queue, db, step, params)
    return [
        {"fifo_key": r["fifo_key"], "head_id": int(r["head_id"]), "waiting": int(r["waiting"])}
        for r in result.rows
    ]


def _need_pause(queue: LoadedQueue, step: Step | None) -> Step:
    if queue.rendered.header.pause_table is None or not step:
        raise ConfigurationError(
            f"queue '{queue.name}' cannot be paused: its file has no pause table (declared "
            "pause_table = false, or rendered before qgen had pausing); remove pause_table = "
            "false, render again with `qgen render` and create the table with `qgen apply`"
        )
    return step


def _scope(queue: LoadedQueue, group: str | None) -> str:
    """The pause row's group: '' for the whole queue (its table), else the group named."""
    if group is None:
        return ""
    if "group" not in queue.columns:
        raise InvalidArgument(
            f"queue '{queue.name}' has no group column: pause or resume the whole queue (no group)"
        )
    if not isinstance(group, str) or not group or not group.isprintable() or len(group) > KEY_MAX:
        raise InvalidArgument(
            f"group must be a group's name (1 to {KEY_MAX} printable characters), not {group!r}"
        )
    return group


async def pause(queue: LoadedQueue, db: Any, group: str | None = None) -> bool:
    """Pause the queue, or one group of it (see ``Queue.pause``); False: it was paused."""
    step = _need_pause(queue, queue.steps.pause)
    result = await _run(queue, db, step, {"group": _scope(queue, group)})
    done = (result.rowcount or 0) > 0
    if done:
        log.info("queue %s: paused %s", queue.name, _shown_scope(group))
    return done


async def resume(queue: LoadedQueue, db: Any, group: str | None = None) -> bool:
    """Lift the queue's pause, or one group's (see ``Queue.resume``); False: none held."""
    step = _need_pause(queue, queue.steps.resume)
    result = await _run(queue, db, step, {"group": _scope(queue, group)})
    done = (result.rowcount or 0) > 0
    if done:
        log.info("queue %s: resumed %s", queue.name, _shown_scope(group))
    return done


async def paused(queue: LoadedQueue, db: Any) -> list[str | None]:
    """The paused scopes of the queue's table: None for the whole queue, then group names
    (see ``Queue.paused``)."""
    result = await _run(queue, db, _need_pause(queue, queue.steps.paused), {})
    return [str(r["group"]) or None for r in result.rows]


def _shown_scope(group: str | None) -> str:
    return "the whole queue" if group is None else f"group {group!r}"
