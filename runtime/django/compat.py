"""The tasks framework, imported once: Django 6's ``django.tasks``, else the ``django-tasks``
backport (``django_tasks``, Django 5.2). Everything in runtime.django takes these names from
here, so the rest is one code path for both."""

from __future__ import annotations

try:
    from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started

    FRAMEWORK = "django.tasks"
except ImportError:
    try:
        from django_tasks import (  # type: ignore[no-redef]
            TaskContext,
            TaskResult,
            TaskResultStatus,
            task_backends,
        )
        from django_tasks.backends.base import BaseTaskBackend  # type: ignore[no-redef]
        from django_tasks.base import Task, TaskError  # type: ignore[no-redef]
        from django_tasks.exceptions import (  # type: ignore[no-redef]
            InvalidTaskBackendError as InvalidTaskBackend,
        )
        from django_tasks.exceptions import (  # type: ignore[no-redef]
            InvalidTaskError as InvalidTask,
        )
        from django_tasks.exceptions import TaskResultDoesNotExist  # type: ignore[no-redef]
        from django_tasks.signals import (  # type: ignore[no-redef]
            task_enqueued,
            task_finished,
            task_started,
        )

        FRAMEWORK = "django_tasks"
    except ImportError:
        raise ImportError(
            "runtime.django needs Django 6 (django.tasks) or, on Django 5.2, the django-tasks "
            "backport: pip install 'qgen-sql[django]'"
        ) from None

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
