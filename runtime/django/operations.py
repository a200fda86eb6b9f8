"""``ApplyQueues``: the migration operation that creates the queue tables of every qgen
tasks backend on the migration's database, from each queue's rendered ``schema`` block for
that connection's dialect (``runtime.apply``: what is missing is created, nothing else).

The app's own migration runs it once; a queue added later gets a migration of the
project's own with ``operations = [ApplyQueues()]``. Migrating backwards leaves the tables
(they may hold messages): drop them by hand when you mean to.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db.migrations.operations.base import Operation

from runtime.adapters import Adapted, adapt, run_sync
from runtime.apply import apply, plain_sql
from runtime.django.compat import task_backends


class ApplyQueues(Operation):
    """Create the qgen queue tables of the TASKS backends (all, or ``backends``) whose
    DATABASE is the one being migrated."""

    reversible = True
    reduces_to_sql = True  # sqlmigrate prints the schema blocks

    def __init__(self, backends: list[str] | None = None) -> None:
        self.backends = backends

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        kwargs = {} if self.backends is None else {"backends": self.backends}
        return self.__class__.__name__, [], kwargs

    def state_forwards(self, app_label: str, state: Any) -> None:
        pass  # no model: the tables are the rendered files'

    def database_forwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        from runtime.django.backend import QgenBackend

        conn = schema_editor.connection
        for alias in self.backends or list(getattr(settings, "TASKS", {})):
            backend = task_backends[alias]
            if not isinstance(backend, QgenBackend) or backend.database != conn.alias:
                continue
            for name in backend.qgen_queues():
                queue = backend.queue(name, conn)
                if schema_editor.collect_sql:  # sqlmigrate: the statements, as apply would run them
                    schema_editor.collected_sql.extend(
                        f"{plain_sql(st, queue.dialect)};" for st in queue.steps.schema
                    )
                    continue
                adapted = adapt(conn, sync=True)
                assert isinstance(adapted, Adapted)  # Django's connection: always adapted
                # MySQL and MariaDB migrate outside a transaction (their DDL commits): say
                # so, and apply runs there as on its own connection
                adapted.in_transaction = conn.in_atomic_block or not conn.get_autocommit()
                run_sync(apply(adapted, queue))

    def database_backwards(
        self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any
    ) -> None:
        pass  # the tables stay: they may hold messages (see the module's docstring)

    def describe(self) -> str:
        return "Create the qgen queue tables of the TASKS backends (runtime.apply)"
