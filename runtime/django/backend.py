"""``runtime.django.QgenBackend``: Django's tasks enqueued as qgen messages on Django's own
database connection, in the transaction ``transaction.atomic()`` has open, and read back
with ``get_result``.

A Django queue name maps to a qgen queue (``OPTIONS["QUEUES"]``, default: the same name),
whose rendered file for the connection's dialect is ``OPTIONS["SQL"]/<dialect>/<queue>.sql``.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from django.db import connections
from django.utils import timezone

from runtime.adapters import Adapted, adapt, run_sync
from runtime.django.compat import (
    BaseTaskBackend,
    InvalidTask,
    InvalidTaskBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from runtime.django.results import (
    from_status,
    parse_result_id,
    payload_of,
    result_id,
    task_result,
)
from runtime.loading import load
from runtime.queue import Queue

#: what OPTIONS may hold
OPTIONS = {
    "SQL": "the folder `qgen render` writes (qgen.toml's out), e.g. BASE_DIR / 'sql'",
    "QUEUES": "Django queue name → qgen queue name (default: the same name)",
    "DATABASE": "the DATABASES alias the queue tables live in (default 'default')",
    "URL": "the worker's database URL (default: built from DATABASES)",
}


class QgenBackend(BaseTaskBackend):
    """``TASKS = {"default": {"BACKEND": "runtime.django.QgenBackend", "OPTIONS": {"SQL":
    BASE_DIR / "sql"}}}``: each task is a message in a qgen queue table."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]['OPTIONS']"
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise InvalidTaskBackend(
                f"{where} has no option {unknown[0]!r}; it takes "
                + "; ".join(f"{k} ({v})" for k, v in OPTIONS.items())
            )
        if not self.options.get("SQL"):
            raise InvalidTaskBackend(f"{where}['SQL'] is missing: {OPTIONS['SQL']}")
        self.sql_dir = Path(self.options["SQL"])
        routes = self.options.get("QUEUES") or {}
        if not isinstance(routes, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in routes.items()
        ):
            raise InvalidTaskBackend(f"{where}['QUEUES'] must map Django queue names to qgen's")
        if routes and "QUEUES" not in params:
            self.queues = set(routes)
        self.routes: dict[str, str] = dict(routes)
        self.database: str = self.options.get("DATABASE", "default")
        self._loaded: dict[Path, Queue] = {}

    # ----------------------------------------------------------------- queues

    def qgen_queue(self, queue_name: str) -> str:
        """The qgen queue a Django queue name goes to."""
        return self.routes.get(queue_name, queue_name)

    def qgen_queues(self) -> list[str]:
        """Every qgen queue this backend's Django queues go to, in name order."""
        return sorted({self.qgen_queue(q) for q in self.queues or ["default"]})

    def queue(self, name: str, connection: Any = None) -> Queue:
        """The loaded rendered file of qgen queue ``name`` for the dialect ``connection``
        (default: this backend's database) reaches; a MySQL file serves MariaDB too."""
        conn = connections[self.database] if connection is None else connection
        return self._load(self.path(name, dialect_of(conn)))

    def path(self, name: str, dialect: str) -> Path:
        """``SQL/<dialect>/<name>.sql`` (MariaDB: the mysql folder when it has no folder of its own)."""
        tried = [self.sql_dir / d / f"{name}.sql" for d in _FALLBACKS.get(dialect, (dialect,))]
        for path in tried:
            if path.is_file():
                return path
        raise InvalidTaskBackend(
            f"TASKS[{self.alias!r}]: no rendered file for qgen queue {name!r} on {dialect}: "
            f"{tried[0]} does not exist; declare [queues.{name}] in qgen.toml, list "
            f'"{dialect}" in its dialects and run `qgen render` (OPTIONS["SQL"] is its out folder)'
        )

    def _load(self, path: Path) -> Queue:
        if path not in self._loaded:
            loaded = load(path)
            if not isinstance(loaded, Queue):
                raise InvalidTaskBackend(f"{path} is an outbox file; tasks go to a queue's file")
            self._loaded[path] = loaded
        return self._loaded[path]

    # ----------------------------------------------------------------- Django's API

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Write the task's message on Django's connection, inside the open ``atomic()``
        block if there is one (it commits or rolls back with it); returns its TaskResult."""
        self.validate_task(task)
        payload = payload_of(task, args, kwargs, self.alias)
        conn = connections[self.database]
        queue = self.queue(self.qgen_queue(task.queue_name), conn)
        cols = queue.columns
        if task.priority and "priority" not in cols:
            raise InvalidTask(
                f"task {task.module_path}: priority {task.priority} needs qgen queue "
                f"'{queue.name}' to have a priority column: declare columns.priority and render again"
            )
        delay = None
        if task.run_after is not None:
            if "retry_after" not in cols:
                raise InvalidTask(
                    f"task {task.module_path}: run_after needs qgen queue '{queue.name}' to "
                    "have a retry_after column: declare columns.retry_after and render again"
                )
            delay = max(task.run_after - timezone.now(), timedelta(0))
        id_ = queue.sync.enqueue(
            conn, payload, delay=delay, priority=task.priority if "priority" in cols else None
        )
        result = task_result(
            task,
            result_id(queue, id_),
            payload,
            TaskResultStatus.READY,
            self.alias,
            enqueued_at=timezone.now(),
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        """The task's TaskResult as its row says now (READY, RUNNING, SUCCESSFUL with the
        return value, FAILED with the error); TaskResultDoesNotExist for an unknown id (or a
        row deleted: ack without processed_at, prune)."""
        name, id_ = parse_result_id(result_id)
        if name not in self.qgen_queues():
            raise TaskResultDoesNotExist(
                f"{result_id!r}: qgen queue {name!r} is not one of backend {self.alias!r}'s "
                f"({', '.join(self.qgen_queues())})"
            )
        conn = connections[self.database]
        status = self.queue(name, conn).sync.status(conn, id_)
        if status is None:
            raise TaskResultDoesNotExist(f"no task {result_id!r} (unknown, or its row is gone)")
        return from_status(result_id, status, self.alias)


#: the rendered folders a dialect may read, in order
_FALLBACKS = {"mariadb": ("mariadb", "mysql")}


def dialect_of(connection: Any) -> str:
    """The qgen dialect Django's connection reaches: postgres, mysql, mariadb or sqlite."""
    adapted = adapt(connection, sync=True)
    if isinstance(adapted, Adapted):
        run_sync(adapted.ready())
    return adapted.dialect.name
