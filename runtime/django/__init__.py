"""qgen as a Django tasks backend: ``@task`` functions enqueued into qgen queue tables on
Django's own connection (in the request's ``transaction.atomic()``), run by
``python manage.py qgen_worker``, their outcome read back with ``get_result``.

Django 6's ``django.tasks``, or the ``django-tasks`` backport on Django 5.2 (one code path,
the import chosen once in ``runtime.django.compat``). Settings::

    INSTALLED_APPS = [..., "runtime.django"]
    TASKS = {
        "default": {
            "BACKEND": "runtime.django.QgenBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"SQL": BASE_DIR / "sql", "QUEUES": {"default": "tasks"}},
        }
    }

Nothing here imports Django until Django loads it: ``import runtime`` stays free of it.
"""

from __future__ import annotations

from typing import Any

__all__ = ["QgenBackend"]


def __getattr__(name: str) -> Any:
    # the backend's class is imported by Django from TASKS["BACKEND"]: loading it needs settings
    if name == "QgenBackend":
        from runtime.django.backend import QgenBackend

        return QgenBackend
    raise AttributeError(f"module 'runtime.django' has no attribute {name!r}")
