"""The test engines: their URLs, a once-per-session reachability check, and small helpers.

Every test that touches a database imports from here (``from support.engines import ...``;
pytest puts ``tests/``, where conftest.py is, on sys.path) or takes the ``engine`` fixture from conftest.py, which is parametrized
over ENGINES. Tests are plain sync functions that drive the async runtime with ``run(...)``.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, TypeVar
from urllib.parse import urlsplit

import pytest

T = TypeVar("T")

#: every engine a test can run on; "mysql" runs MySQL-dialect files over a mysql:// URL, and
#: executes on the MariaDB server (this machine has no Oracle MySQL server)
ENGINES = ["sqlite", "postgres", "mariadb", "mysql"]

_DEFAULT_URLS = {
    "postgres": ("QGEN_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"),
    "mariadb": ("QGEN_TEST_MARIADB_URL", "mariadb://root@127.0.0.1:3306/test"),
    # There is no Oracle MySQL server here: the mysql:// URL reaches the same MariaDB server,
    # so "mysql" tests check that MySQL-dialect files run there (MySQL 8 itself is untested).
    "mysql": ("QGEN_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
}

# How to start each server on this machine, for the skip/fail message.
_START_HINTS = {
    "postgres": (
        "PostgreSQL",
        "pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start",
    ),
    "mariadb": (
        "MariaDB",
        "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
    ),
    "mysql": (
        "MariaDB (for mysql://)",
        "start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd",
    ),
}

# The driver module and the pip extra each engine needs.
_DRIVERS = {
    "sqlite": ("aiosqlite", "sqlite"),
    "postgres": ("psycopg", "postgres"),
    "mariadb": ("pymysql", "mysql"),
    "mysql": ("pymysql", "mysql"),
}

# engine name → None (reachable) or the reason it is not; filled once per session.
_REACHABLE: dict[str, str | None] = {}


@dataclass(frozen=True)
class Engine:
    """One engine under test, as the ``engine`` fixture yields it."""

    #: the ENGINES name (also the pytest id)
    name: str
    #: the URL to connect to
    url: str
    #: the dialect of the files this engine runs ("mysql" for the mysql param, which executes
    #: on MariaDB; the connection's own dialect there is "mariadb")
    dialect_name: str


def in_ci() -> bool:
    """True when running under CI, where a missing engine must fail, never skip."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def engine_url(name: str, tmp_path: Path) -> str:
    """The URL for engine ``name``; SQLite gets a fresh file under ``tmp_path``."""
    if name == "sqlite":
        return f"sqlite:///{(tmp_path / f'qgen-{uuid.uuid4().hex[:8]}.db').resolve()}"
    try:
        env, default = _DEFAULT_URLS[name]
    except KeyError:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}") from None
    return os.environ.get(env) or default


def engine_params(*names: str) -> list[Any]:
    """pytest params for ``names`` (default: all ENGINES), each marked ``engine(name)``.

    For a test that runs on only some engines, override the ``engine`` fixture's params:
    ``@pytest.mark.parametrize("engine", engine_params("postgres", "mariadb"), indirect=True)``.
    """
    for name in names:
        if name not in ENGINES:
            raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return [pytest.param(n, id=n, marks=pytest.mark.engine(n)) for n in names or ENGINES]


def engine_for(name: str, tmp_path: Path) -> Engine:
    """The Engine for ``name``, after require(name)."""
    require(name)
    return Engine(name=name, url=engine_url(name, tmp_path), dialect_name=name)


def _unavailable(message: str) -> NoReturn:
    # In CI a missing engine is a failure: a run that passes by skipping proves nothing.
    if in_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


def require(name: str) -> None:
    """Skip the test (fail it when CI=true) if engine ``name`` cannot be reached.

    The check runs once per engine per session: the driver must import, and for a server the
    URL's host and port must accept a TCP connection.
    """
    if name not in _REACHABLE:
        _REACHABLE[name] = _probe(name)
    reason = _REACHABLE[name]
    if reason is not None:
        _unavailable(reason)


def _probe(name: str) -> str | None:
    module, _extra = _DRIVERS[name]
    try:
        __import__(module)
    except ImportError as exc:
        return f"{module} is not installed ({exc}); install with: pip install -e '.[dev]'"
    if name == "sqlite":
        return None
    url = engine_url(name, Path("."))
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    port = parts.port or (5432 if name == "postgres" else 3306)
    label, hint = _START_HINTS[name]
    try:
        with socket.create_connection((host, port), timeout=3):
            pass
    except OSError as exc:
        return f"{label} at {host}:{port} unreachable: {exc}; start it with: {hint}"
    return None


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run one coroutine to completion on a fresh event loop (tests are sync functions)."""
    return asyncio.run(coro)


def unique_table(prefix: str = "t") -> str:
    """A short identifier no other test (or earlier run) uses: ``prefix_1a2b3c4d``.

    The servers are shared between tests and runs, so every table a test creates gets one.
    """
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


async def drop_tables(url: str, *names: str) -> None:
    """Drop the named tables if they exist (cleanup; quoting follows the URL's dialect)."""
    from runtime.connect import connect

    if not names:
        return
    conn = await connect(url)
    try:
        for name in names:
            await conn.execute(f"DROP TABLE IF EXISTS {conn.dialect.quote_ident(name)}")
    finally:
        await conn.close()
