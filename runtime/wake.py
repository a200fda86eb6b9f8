"""Waking idle consumers: the signal a consumer's workers wait on, and the process-local
registry through which an enqueue in the same process wakes them on engines without
LISTEN/NOTIFY.

On PostgreSQL the enqueue notifies the queue's channel in its own transaction and each
consumer listens on one dedicated connection (see ``Consumer``). On MySQL, MariaDB and
SQLite consumers poll; a consumer in the process that enqueues is also woken directly,
right after the enqueue's statement ran. That may be before the caller's transaction
commits: the consumer then claims once, finds nothing, and polls as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections import deque


class Wakeup:
    """What a consumer's idle workers wait on: ``poke()`` wakes one of them (the one idle the
    longest), ``poke(everyone=True)`` all.

    One worker is enough for one message; a worker that claims a full batch pokes the next,
    so a burst still gets every worker. A worker takes ``signal()`` before it claims and
    passes it to ``wait``, which returns at once when a poke came in between: no poke is
    lost while every worker is busy. ``poke()`` may be called from any thread.
    """

    def __init__(self) -> None:
        self._waiting: deque[asyncio.Future[None]] = deque()
        self._pokes = 0
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        """Remember the running loop, for pokes from other threads."""
        self._loop = asyncio.get_running_loop()

    def signal(self) -> int:
        """A mark to pass to ``wait``: the pokes so far."""
        return self._pokes

    def poke(self, everyone: bool = False) -> None:
        """Wake one waiting worker (``everyone``: all of them)."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            self._wake(everyone)
        else:  # another thread or loop: hand it to the consumer's loop
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(self._wake, everyone)

    def _wake(self, everyone: bool) -> None:
        self._pokes += 1
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():  # not timed out
                waiter.set_result(None)
                if not everyone:
                    return

    async def wait(self, since: int, timeout: float) -> bool:
        """Sleep at most ``timeout`` seconds unless poked; True when poked (also when a poke
        came after ``since = signal()`` was taken)."""
        if self._pokes != since:
            return True
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiting.append(waiter)
        try:
            await asyncio.wait_for(waiter, max(timeout, 0))
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(ValueError):
                self._waiting.remove(waiter)
        return True


# table → the wakeups of this process's consumers of it, each with its database identity; an
# enqueue's identity of None (a service's own connection, whose database the runtime cannot
# name) wakes them all
_waiting: dict[str, dict[Wakeup, str]] = {}
_lock = threading.Lock()


def register(table: str, identity: str, wakeup: Wakeup) -> None:
    """A consumer of ``table`` on the database ``identity`` (its connection URL) waits."""
    with _lock:
        _waiting.setdefault(table, {})[wakeup] = identity


def unregister(table: str, wakeup: Wakeup) -> None:
    with _lock:
        waiting = _waiting.get(table, {})
        waiting.pop(wakeup, None)
        if not waiting:
            _waiting.pop(table, None)


def enqueued(table: str, identity: str | None) -> None:
    """Wake this process's consumers of ``table`` on the database ``identity`` (None: on any)."""
    with _lock:
        woken = [w for w, ident in _waiting.get(table, {}).items() if identity in (None, ident)]
    for wakeup in woken:
        wakeup.poke()
