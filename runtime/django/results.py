"""A task's message as Django sees it: the payload a task is enqueued as, the Task and
TaskResult built back from it, and a row's status read as a TaskResult (the one place that
reads the queue's outcome: ``queue.sync.status``)."""

from __future__ import annotations

import re
import traceback
from datetime import UTC, datetime
from typing import Any

from django.utils import timezone
from django.utils.module_loading import import_string

from runtime.contract.errors import PayloadError
from runtime.django.compat import (
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)
from runtime.outcomes import LAST_ERROR_MAX, error_text
from runtime.payloads import encode_payload
from runtime.queue import Queue
from runtime.status import Status

#: a row's state (queue.status) as Django's status
STATES = {
    "pending": TaskResultStatus.READY,
    "running": TaskResultStatus.RUNNING,
    "done": TaskResultStatus.SUCCESSFUL,
    "dead": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

#: what a TaskError names for a failure that was no exception of the task (a lease that
#: expired, a handler timeout, a retry without reason): its text is the row's last_error
NOT_AN_EXCEPTION = "builtins.RuntimeError"

_PATH = re.compile(r"[A-Za-z_][\w.]*")
_ID = re.compile(r"(?P<queue>[A-Za-z_][\w-]*):(?P<id>[0-9]+)")


def payload_of(task: Any, args: Any, kwargs: Any, backend: str) -> dict[str, Any]:
    """The message a task is enqueued as; PayloadError naming the argument that JSON cannot
    carry (nothing is written)."""
    payload = {
        "task": task.module_path,
        "args": list(args),
        "kwargs": dict(kwargs),
        "backend": backend,
        "queue_name": task.queue_name,
        "priority": task.priority,
        "run_after": None if task.run_after is None else task.run_after.isoformat(),
    }
    try:
        encode_payload({"args": payload["args"], "kwargs": payload["kwargs"]})
    except PayloadError as exc:
        what, _, _hint = str(exc).removeprefix("payload cannot be stored: ").rpartition("; ")
        raise PayloadError(
            f"task {task.module_path}: its arguments are sent as JSON, and {what or exc}; pass "
            "JSON values (str, int, float, bool, None, lists, dicts with str keys): a model's "
            "pk rather than the model, a datetime's isoformat()"
        ) from None
    return payload


def task_of(payload: Any) -> Any:
    """The Task a message names, with the priority, queue and run_after it was enqueued with."""
    if not isinstance(payload, dict) or not isinstance(payload.get("task"), str):
        raise InvalidTask(f"message {payload!r:.80} is not a task's (no 'task' path)")
    path = payload["task"]
    try:
        found = import_string(path)
    except ImportError as exc:
        raise InvalidTask(f"task {path!r} does not import: {exc}") from None
    if not isinstance(found, Task):
        raise InvalidTask(f"{path!r} is not a task: decorate the function with @task")
    run_after = payload.get("run_after")
    return found.using(
        priority=payload.get("priority"),
        queue_name=payload.get("queue_name"),
        run_after=None if run_after is None else datetime.fromisoformat(run_after),
    )


def task_result(
    task: Any,
    id: str,
    payload: dict[str, Any],
    status: Any,
    backend: str,
    *,
    enqueued_at: datetime | None = None,
    started_at: datetime | None = None,
    finished_at: datetime | None = None,
    errors: list[Any] | None = None,
    worker_ids: list[str] | None = None,
    return_value: Any = None,
) -> Any:
    result = TaskResult(
        task=task,
        id=id,
        status=status,
        enqueued_at=enqueued_at,
        started_at=started_at,
        finished_at=finished_at,
        last_attempted_at=started_at,
        args=payload.get("args", []),
        kwargs=payload.get("kwargs", {}),
        backend=backend,
        errors=errors or [],
        worker_ids=worker_ids or [],
    )
    object.__setattr__(result, "_return_value", return_value)
    return result


def result_id(queue: Queue, id: int) -> str:
    """A TaskResult's id: the qgen queue and the message id, ``"tasks:42"``."""
    return f"{queue.name}:{int(id)}"


def parse_result_id(result_id: Any) -> tuple[str, int]:
    """``"tasks:42"`` → ``("tasks", 42)``; TaskResultDoesNotExist for any other text."""
    found = _ID.fullmatch(result_id) if isinstance(result_id, str) else None
    if found is None:
        raise TaskResultDoesNotExist(
            f"{result_id!r} is not a qgen task result id (queue:id, as enqueue returned it)"
        )
    return found["queue"], int(found["id"])


def error_of(exc: BaseException) -> str:
    """What the row's last_error keeps of a task's exception: its class's path on the first
    line, then as much of the end of the traceback as fits (the exception's own line last)."""
    cls = type(exc)
    head = f"{cls.__module__}.{cls.__qualname__}"
    text = "".join(traceback.format_exception(exc))
    room = LAST_ERROR_MAX - len(head) - 1
    if len(text) > room:
        text = "…" + text[-(room - 1) :]
    return error_text(f"{head}\n{text}")


def task_error(last_error: str) -> Any:
    """A TaskError from a row's last_error (see error_of); text the worker did not write
    (a lease that expired, a timeout) is a RuntimeError's, the text its traceback."""
    head, sep, rest = last_error.partition("\n")
    if sep and _PATH.fullmatch(head) and "." in head:
        return TaskError(exception_class_path=head, traceback=rest)
    return TaskError(exception_class_path=NOT_AN_EXCEPTION, traceback=last_error)


def from_status(result_id: str, status: Status, backend: str) -> Any:
    """The TaskResult of a row's status (``queue.sync.status``): READY (pending, also again
    after a failed attempt), RUNNING, SUCCESSFUL with the return value, FAILED (dead, or
    cancelled) with the last error. The task, its args and kwargs come from the row's
    payload (InvalidTask when it names no task)."""
    payload = status.payload
    attempts = status.attempts or 0
    state = STATES[status.state]
    return task_result(
        task_of(payload),
        result_id,
        payload,
        state,
        backend,
        enqueued_at=_aware(status.enqueued_at),
        finished_at=_aware(status.processed_at),
        errors=[task_error(status.last_error)] if status.last_error else [],
        worker_ids=["qgen"] * attempts,
        return_value=status.result if state == TaskResultStatus.SUCCESSFUL else None,
    )


def _aware(value: Any) -> Any:
    """A timestamp as Django's settings want it (aware with USE_TZ); the database's clock,
    read as UTC where the driver hands over a naive one."""
    if not isinstance(value, datetime):
        return None
    if timezone.is_naive(value):
        value = timezone.make_aware(value, UTC) if _use_tz() else value
    return value


def _use_tz() -> bool:
    from django.conf import settings

    return bool(settings.USE_TZ)
