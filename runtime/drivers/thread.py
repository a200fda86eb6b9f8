"""One thread that runs a blocking driver's calls in the order they were made, for asyncio.

``loop.run_in_executor`` on a one-thread executor does the same with more on every call: a
``concurrent.futures.Future`` and a work item beside the caller's asyncio future, the two
futures chained by callbacks, a lock taken to set each. A queue's connection makes such a
call for every statement, and a thread switch is the most expensive thing in it: here the
caller's asyncio future is put on a queue with the call, and the thread sets it with one
``call_soon_threadsafe``. What an executor promises is kept: calls run one at a time in the
order they were made, and a call whose caller was cancelled before the thread reached it does
not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: a call: the caller's future (None: nobody waits for it), the function, its arguments
_Call = tuple["asyncio.Future[Any] | None", Callable[..., Any], tuple[Any, ...]]


class CallThread:
    """A daemon thread that runs calls in turn: ``await thread.call(fn, *args)``."""

    def __init__(self, name: str) -> None:
        self._calls: queue.SimpleQueue[_Call | None] = queue.SimpleQueue()
        self._open = True
        threading.Thread(target=_serve, args=(self._calls,), name=name, daemon=True).start()
        # a thread whose owner was dropped without shutdown() ends too
        weakref.finalize(self, self._calls.put, None)

    @property
    def running(self) -> bool:
        """It takes calls (``shutdown`` not called yet)."""
        return self._open

    def call(self, fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``fn(*args)`` on the thread, after the calls made before it: a future of its result
        (or its exception). From the event loop's thread; RuntimeError after ``shutdown``."""
        future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._put((future, fn, args))
        return future

    def post(self, fn: Callable[..., Any], *args: Any) -> None:
        """``fn(*args)`` on the thread, after the calls made before it; nobody waits for it
        and what it returns or raises is dropped. RuntimeError after ``shutdown``."""
        self._put((None, fn, args))

    def _put(self, item: _Call) -> None:
        if not self._open:
            raise RuntimeError("cannot call on a thread that was shut down")
        self._calls.put(item)

    def shutdown(self) -> None:
        """No call from now on; the thread ends once the calls already made have run."""
        if self._open:
            self._open = False
            self._calls.put(None)


def _serve(calls: queue.SimpleQueue[_Call | None]) -> None:
    """The thread: each call in turn until the end mark."""
    get = calls.get
    while (item := get()) is not None:
        _run(*item)
        del item  # nothing of a finished call kept alive while the thread waits


def _run(future: asyncio.Future[Any] | None, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    if future is None:
        with contextlib.suppress(BaseException):
            fn(*args)
        return
    if future.cancelled():  # its caller gave up before its turn came: not run
        return
    try:
        result = fn(*args)
    except BaseException as exc:
        _reply(future, _fail, exc)
    else:
        _reply(future, _done, result)


def _reply(future: asyncio.Future[Any], set_it: Callable[..., None], value: Any) -> None:
    with contextlib.suppress(RuntimeError):  # the loop was closed: nobody waits any more
        future.get_loop().call_soon_threadsafe(set_it, future, value)


def _done(future: asyncio.Future[Any], result: Any) -> None:
    if not future.done():  # cancelled while the call ran
        future.set_result(result)


def _fail(future: asyncio.Future[Any], exc: BaseException) -> None:
    if not future.done():
        future.set_exception(exc)
