"""The tasks framework, imported once: Django 6's ``django.tasks``, else the ``django-tasks``
backport (``django_tasks``, Django 5.2). Everything in runtime.django takes these names from
here, so the rest is one code path for both (Django ships no types: they are Any)."""

from __future__ import annotations

import importlib
from typing import Any


def _framework() -> str:
    for name in ("django.tasks", "django_tasks"):
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name
    raise ImportError(
        "runtime.django needs Django 6 (django.tasks) or, on Django 5.2, the django-tasks "
        "backport: pip install 'qgen-sql[django]'"
    )


#: the module the names below come from: "django.tasks" or "django_tasks"
FRAMEWORK = _framework()
#: the backport's names where they differ from Django's
_RENAMED = {"InvalidTask": "InvalidTaskError", "InvalidTaskBackend": "InvalidTaskBackendError"}


def _name(module: str, name: str) -> Any:
    found = importlib.import_module(f"{FRAMEWORK}{module}")
    return getattr(found, name if FRAMEWORK == "django.tasks" else _RENAMED.get(name, name))


task_backends: Any = _name("", "task_backends")
TaskContext: Any = _name(".base", "TaskContext")
TaskResult: Any = _name(".base", "TaskResult")
TaskResultStatus: Any = _name(".base", "TaskResultStatus")
Task: Any = _name(".base", "Task")
TaskError: Any = _name(".base", "TaskError")
BaseTaskBackend: Any = _name(".backends.base", "BaseTaskBackend")
InvalidTask: Any = _name(".exceptions", "InvalidTask")
InvalidTaskBackend: Any = _name(".exceptions", "InvalidTaskBackend")
TaskResultDoesNotExist: Any = _name(".exceptions", "TaskResultDoesNotExist")
task_enqueued: Any = _name(".signals", "task_enqueued")
task_started: Any = _name(".signals", "task_started")
task_finished: Any = _name(".signals", "task_finished")

__all__ = [
    "FRAMEWORK",
    "BaseTaskBackend",
    "InvalidTask",
    "InvalidTaskBackend",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
