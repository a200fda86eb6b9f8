"""The operator console: a web page and a JSON API over the queues' stats and dead letters.

``qgen serve`` runs it; a service mounts it in its own Starlette or FastAPI app with
``create_app`` (needs the ``console`` extra: ``pip install 'qgen-sql[console]'``)::

    from runtime.console import create_app
    app.mount("/ops/queues", create_app([orders, emails], db=DATABASE_URL))
"""

from __future__ import annotations

from runtime.console.core import Console, ConsoleError
from runtime.console.security import TOKEN_ENV, read_token
from runtime.console.web import create_app

__all__ = ["TOKEN_ENV", "Console", "ConsoleError", "create_app", "read_token"]
