"""The private parts of driver libraries the runtime relies on, each reached here and only here.

A public API would cost what the runtime exists to save (aiosqlite's one-hop call, a socket
PyMySQL blocks on), so a few private names are used. Each is looked up through `_private`,
which turns a library that renamed or dropped one into a ConfigurationError naming the library,
the attribute and the versions qgen is tested with, instead of an AttributeError deep in a
claim. tests/engines/test_driver_private.py checks every one of them against the installed versions, so
an upgrade that breaks one fails the suite, not a worker.
"""

from __future__ import annotations

import socket
import sys
import threading
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from runtime.contract.errors import ConfigurationError

if TYPE_CHECKING:
    import sqlite3

    import aiosqlite
    import pymysql.connections

T = TypeVar("T")

#: (library, attribute, what the runtime uses it for): every private name, for the test
PRIVATE_NAMES: tuple[tuple[str, str, str], ...] = (
    ("pymysql", "Connection._force_close", "drop a socket without a goodbye to the server"),
    ("pymysql", "Connection._sock", "shut down a socket a blocked recv() waits on; keepalives"),
    ("aiosqlite", "Connection._execute", "run a call on the connection's thread in one hop"),
    ("aiosqlite", "Connection._thread", "wait for the connection's thread to end"),
    ("aiosqlite", "Connection._conn", "the sqlite3 connection the thread runs calls on"),
)


def _private(owner: object, library: str, attribute: str) -> Any:
    try:
        return getattr(owner, attribute)
    except AttributeError:
        version = getattr(sys.modules.get(library), "__version__", "?")
        raise ConfigurationError(
            f"{library} {version} has no {type(owner).__name__}.{attribute}, which qgen's "
            f"runtime uses; install the {library} version pyproject.toml names"
        ) from None


def mysql_force_close(my: pymysql.connections.Connection[Any]) -> None:
    """Drop the socket without a goodbye to the server."""
    _private(my, "pymysql", "_force_close")()


def mysql_socket(my: pymysql.connections.Connection[Any]) -> socket.socket | None:
    """The connection's socket (None once closed)."""
    sock: socket.socket | None = _private(my, "pymysql", "_sock")
    return sock


def aiosqlite_caller(db: aiosqlite.Connection) -> Callable[..., Awaitable[Any]]:
    """What runs ``fn(*args)`` on the connection's thread, one queue hop: ``await
    aiosqlite_caller(db)(fn, *args)``. A connection looks it up once and keeps it."""
    execute: Callable[..., Awaitable[Any]] = _private(db, "aiosqlite", "_execute")
    return execute


def aiosqlite_thread(db: aiosqlite.Connection) -> threading.Thread:
    thread: threading.Thread = _private(db, "aiosqlite", "_thread")
    return thread


def aiosqlite_raw(db: aiosqlite.Connection) -> sqlite3.Connection:
    raw: sqlite3.Connection = _private(db, "aiosqlite", "_conn")
    return raw
