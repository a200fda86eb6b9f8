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


class Wakeup:
    """What a consumer's idle workers wait on: ``poke()`` wakes every one of them at once.

    A worker takes ``signal()`` before it claims and waits on it after an empty claim, so a
    poke that comes between the two is not lost. ``poke()`` may be called from any thread.
    """

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self) -> None:
        """Remember the running loop, for pokes from other threads."""
        self._loop = asyncio.get_running_loop()

    def signal(self) -> asyncio.Event:
        """The event the next poke sets."""
        return self._event

    def poke(self) -> None:
        """Wake the workers waiting now (and any that took the signal before this poke)."""
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or running is loop:
            self._wake()
        else:  # another thread or loop: hand it to the consumer's loop
            with contextlib.suppress(RuntimeError):  # that loop has closed
                loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        event, self._event = self._event, asyncio.Event()
        event.set()

    @staticmethod
    async def wait(signal: asyncio.Event, timeout: float) -> bool:
        """Wait for ``signal`` at most ``timeout`` seconds; True when it was poked."""
        try:
            await asyncio.wait_for(signal.wait(), max(timeout, 0))
        except TimeoutError:
            return False
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
