"""The MySQL driver's thread (runtime.drivers.thread.CallThread): calls run one at a time in
the order they were made, errors reach their caller, a call cancelled before its turn does
not run, and nothing runs after shutdown."""

import asyncio
import threading

import pytest

from runtime.drivers.thread import CallThread


def run(coro):
    return asyncio.run(coro)


def test_calls_run_in_order_on_one_thread_and_errors_reach_their_caller():
    async def go():
        thread = CallThread("qgen-test")
        seen: list[tuple[int, str]] = []

        def note(i: int) -> int:
            seen.append((i, threading.current_thread().name))
            return i * 10

        def fail() -> None:
            raise ValueError("refused")

        try:
            results = await asyncio.gather(*(thread.call(note, i) for i in range(50)))
            assert results == [i * 10 for i in range(50)]
            assert [i for i, _ in seen] == list(range(50))
            assert {name for _, name in seen} == {"qgen-test"}
            with pytest.raises(ValueError, match="refused"):
                await thread.call(fail)
            assert await thread.call(note, 99) == 990  # an error does not end the thread
        finally:
            thread.shutdown()

    run(go())


def test_a_call_cancelled_before_its_turn_does_not_run():
    # as an executor's queued work item: close() gives up on a COM_QUIT stuck behind a
    # statement, and that COM_QUIT must not run later on a socket already dropped
    async def go():
        thread = CallThread("qgen-test")
        gate, ran = threading.Event(), []
        try:
            blocked = thread.call(gate.wait, 10)
            later = thread.call(ran.append, "later")
            later.cancel()
            gate.set()
            assert await blocked is True
            assert await thread.call(ran.append, "next") is None
            assert ran == ["next"]
        finally:
            thread.shutdown()

    run(go())


def test_after_shutdown_the_queued_calls_run_and_no_new_one_is_taken():
    async def go():
        thread = CallThread("qgen-test-shutdown")
        ran: list[str] = []
        queued = thread.call(ran.append, "queued")
        thread.post(ran.append, "posted")
        thread.shutdown()
        assert not thread.running
        await queued
        with pytest.raises(RuntimeError, match="shut down"):
            thread.call(ran.append, "late")
        with pytest.raises(RuntimeError, match="shut down"):
            thread.post(ran.append, "late")
        for _ in range(100):  # the posted call runs, then the thread ends
            if not any(t.name == "qgen-test-shutdown" for t in threading.enumerate()):
                break
            await asyncio.sleep(0.01)
        assert ran == ["queued", "posted"]
        assert not any(t.name == "qgen-test-shutdown" for t in threading.enumerate())

    run(go())
