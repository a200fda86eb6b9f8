"""The worker side: ``handle`` runs one task message (the handler ``manage.py qgen_worker``
gives runtime.worker for every queue), and ``run`` starts runtime.worker's worker on the
backend's queues with the database URL Django's settings give."""

from __future__ import annotations

import asyncio
import inspect
import os
import socket
import sys
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from django.conf import settings
from django.db import close_old_connections, connections
from django.utils import timezone

from runtime.contract.errors import ConfigurationError, PayloadError
from runtime.delivery import Ctx, Message
from runtime.django.backend import QgenBackend, dialect_of
from runtime.django.compat import (
    TaskContext,
    TaskResultStatus,
    task_backends,
    task_finished,
    task_started,
)
from runtime.django.results import error_of, task_error, task_of, task_result
from runtime.outcomes import Outcome, ack, retry
from runtime.payloads import encode_payload
from runtime.worker import run_worker

#: the handler every queue of ``qgen_worker`` runs
HANDLER = "runtime.django.worker:handle"
#: this process, as a TaskResult's worker_ids names it
WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"[:64]


async def handle(message: Message, ctx: Ctx) -> Outcome:
    """Run the task a message names: its return value acks the message (kept in the result
    column), an exception retries it with the traceback in last_error (the dead letter at
    max_attempts: FAILED). Django's task_started and task_finished signals are sent."""
    payload = message.payload
    task = task_of(payload)
    backend = task_backends[payload.get("backend", task.backend)]
    attempt = ctx.attempt or 1
    now = timezone.now()
    result = task_result(
        task,
        f"{ctx.queue}:{message.id}",
        payload,
        TaskResultStatus.RUNNING,
        backend.alias,
        started_at=now,
        worker_ids=[WORKER_ID] * attempt,
    )
    task_started.send(type(backend), task_result=result)
    args, kwargs = list(payload.get("args", [])), dict(payload.get("kwargs", {}))
    if task.takes_context:
        args.insert(0, TaskContext(task_result=result))
    try:
        if inspect.iscoroutinefunction(task.func):
            value = await task.func(*args, **kwargs)
        else:
            value = await asyncio.to_thread(_call, task.func, args, kwargs)
        try:
            encode_payload(value)
        except PayloadError as exc:
            raise TypeError(
                f"task {task.module_path} returned what JSON cannot keep: {exc}"
            ) from None
    except Exception as exc:
        error = error_of(exc)
        object.__setattr__(result, "status", TaskResultStatus.FAILED)
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "errors", [task_error(error)])
        task_finished.send(type(backend), task_result=result)
        return retry(reason=error)
    object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
    object.__setattr__(result, "finished_at", timezone.now())
    object.__setattr__(result, "_return_value", value)
    task_finished.send(type(backend), task_result=result)
    return ack(result=value)


def _call(func: Any, args: list[Any], kwargs: dict[str, Any]) -> Any:
    """A sync task on a worker thread, with Django's connections of that thread closed as a
    request would close them (CONN_MAX_AGE)."""
    close_old_connections()
    try:
        return func(*args, **kwargs)
    finally:
        close_old_connections()


def database_url(backend: QgenBackend) -> str:
    """The URL the worker's own connections use: OPTIONS["URL"], else built from the
    backend's DATABASES entry (postgresql, mysql and sqlite3 engines)."""
    if backend.options.get("URL"):
        return str(backend.options["URL"])
    db = settings.DATABASES[backend.database]
    engine = str(db.get("ENGINE", "")).rsplit(".", 1)[-1]
    if engine == "sqlite3":
        return f"sqlite:///{os.path.abspath(str(db['NAME']))}"
    scheme = {"postgresql": "postgresql", "mysql": "mysql"}.get(engine)
    if scheme is None:
        raise ConfigurationError(
            f"DATABASES[{backend.database!r}]: the {db.get('ENGINE')} engine is not one qgen "
            "runs on; use Django's postgresql, mysql or sqlite3 backend"
        )
    user = quote(str(db.get("USER") or ""), safe="")
    password = quote(str(db.get("PASSWORD") or ""), safe="")
    auth = f"{user}{':' + password if password else ''}@" if user else ""
    host = str(db.get("HOST") or "localhost")
    port = f":{db['PORT']}" if db.get("PORT") else ""
    return f"{scheme}://{auth}{host}{port}/{quote(str(db['NAME']), safe='')}"


def run(backend_alias: str = "default", queue_names: Sequence[str] = (), **options: Any) -> int:
    """``manage.py qgen_worker``: consume the backend's queues (or ``queue_names``, Django's
    names) until SIGTERM or SIGINT, as ``qgen worker`` does; returns the exit code."""
    try:
        backend = task_backends[backend_alias]
    except Exception as exc:
        print(f"qgen_worker: {exc}", file=sys.stderr)
        return 2
    if not isinstance(backend, QgenBackend):
        print(
            f"qgen_worker: TASKS[{backend_alias!r}] is not runtime.django.QgenBackend",
            file=sys.stderr,
        )
        return 2
    try:
        unknown = [q for q in queue_names if backend.queues and q not in backend.queues]
        if unknown:
            raise ConfigurationError(
                f"--queue {unknown[0]!r} is not one of TASKS[{backend_alias!r}]'s queues "
                f"({', '.join(sorted(backend.queues))})"
            )
        names = sorted({backend.qgen_queue(q) for q in queue_names}) or backend.qgen_queues()
        dialect = dialect_of(connections[backend.database])
        targets = [(backend.path(name, dialect), HANDLER) for name in names]
        url = database_url(backend)
    except Exception as exc:
        print(f"qgen_worker: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    finally:
        connections.close_all()
    return run_worker(None, None, db=url, queues=targets, **options)
