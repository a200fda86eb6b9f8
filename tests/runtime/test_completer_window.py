"""The completer's window (``WindowedCompleter``), on a real SQLite queue: settlements of
handlers that finish within ``window`` seconds wait and commit together; a window that closed
while a handler runs is written at once, one that closed between handlers before the next
starts; nothing counts before it is written."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from support.engines import engine_for, run
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.completer import WindowedCompleter
from runtime.forms import form_for
from runtime.settle import decide


async def written(qt: QueueUnderTest, d: Any) -> bool:
    """Whether the row of ``d`` is settled (read on a connection of its own)."""
    rows = {r["id"]: r for r in await qt.rows()}
    return rows[d.message.id]["processed_at"] is not None


def watching(
    qt: QueueUnderTest, watched: Any, settles: Any, checks: list[tuple[str, float]]
) -> tuple[Any, dict[str, bool]]:
    """A slow handler, and what it saw: at each ``(label, at)`` of ``checks``, once the event
    loop's clock reads ``at``, whether ``watched``'s settlement is written; then it acks
    ``settles``."""
    seen: dict[str, bool] = {}

    async def handler(_conn: Any, _d: Any) -> Any:
        loop = asyncio.get_running_loop()
        for label, at in checks:
            await asyncio.sleep(max(at - loop.time(), 0))
            seen[label] = await written(qt, watched)
        return decide(qt.queue, settles, runtime.ack())

    return handler, seen


def test_settlements_wait_for_the_window_and_commit_together_at_the_end(tmp_path: Path) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("sqlite", tmp_path), "lease")
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            async with await runtime.connect(qt.url) as conn:
                ds = await form.claim(conn, 3, None)
                counts, held = runtime.Counts(), set(ds)
                completer = WindowedCompleter(form, counts, held, window=60.0)
                for d in ds:

                    async def handler(_conn: Any, d: Any) -> Any:
                        # the earlier handlers' settlements are still waiting
                        assert not any([await written(qt, e) for e in ds])
                        return decide(qt.queue, d, runtime.ack())

                    await completer.handle(conn, d, handler)
                assert counts == {} and held == set(ds) and len(completer.waiting) == 3
                await completer.finish(conn)
                assert counts == {"ack": 3} and not held
                assert all([await written(qt, d) for d in ds])
        finally:
            await qt.drop()

    run(go())


def test_a_window_that_closes_while_a_handler_runs_is_written_at_once(tmp_path: Path) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("sqlite", tmp_path), "lease")
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as conn:
                first, second = await form.claim(conn, 2, None)
                counts, held = runtime.Counts(), {first, second}
                completer = WindowedCompleter(form, counts, held, window=0.3)

                async def quick(_conn: Any, _d: Any) -> Any:
                    return decide(qt.queue, first, runtime.ack())

                await completer.handle(conn, first, quick)
                now = asyncio.get_running_loop().time()
                # the window closes between the two looks
                slow, seen = watching(qt, first, second, [("at_start", now), ("later", now + 1)])
                await completer.handle(conn, second, slow)
                assert seen == {"at_start": False, "later": True}
                assert counts == {"ack": 1} and held == {second}
                await completer.finish(conn)
                assert counts == {"ack": 2} and not held
        finally:
            await qt.drop()

    run(go())


def test_a_window_closed_between_handlers_is_written_before_the_next_starts(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("sqlite", tmp_path), "lease")
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as conn:
                first, second = await form.claim(conn, 2, None)
                counts, held = runtime.Counts(), {first, second}
                completer = WindowedCompleter(form, counts, held, window=0.05)

                async def quick(_conn: Any, _d: Any) -> Any:
                    return decide(qt.queue, first, runtime.ack())

                # the worker's connection is busy with the first handler's settlement only
                # once the next one starts: the timer does not write between handlers
                await completer.handle(conn, first, quick)
                await asyncio.sleep(0.3)
                assert not await written(qt, first) and counts == {}

                async def next_handler(_conn: Any, _d: Any) -> Any:
                    assert await written(qt, first) and counts == {"ack": 1}
                    return decide(qt.queue, second, runtime.ack())

                await completer.handle(conn, second, next_handler)
                await completer.finish(conn)
                assert counts == {"ack": 2} and not held
        finally:
            await qt.drop()

    run(go())


def test_a_completer_kept_for_the_next_batch_closes_each_window_at_its_own_deadline(
    tmp_path: Path,
) -> None:
    """A worker keeps one completer, and its one timer, from batch to batch: the timer of a
    window written early (its batch ended) fires at that window's deadline and finds the next
    window still open; it waits for that one's deadline, then writes it while a handler runs."""

    async def go() -> None:
        qt = await make_queue(engine_for("sqlite", tmp_path), "lease")
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            async with await runtime.connect(qt.url) as conn:
                first, second, third = await form.claim(conn, 3, None)
                counts, held = runtime.Counts(), {first, second, third}
                completer = WindowedCompleter(form, counts, held, window=1.0)

                def quick(d: Any) -> Any:
                    async def handler(_conn: Any, _d: Any) -> Any:
                        return decide(qt.queue, d, runtime.ack())

                    return handler

                loop = asyncio.get_running_loop()
                opened = loop.time()
                await completer.handle(conn, first, quick(first))  # the timer: opened + 1.0
                await completer.finish(conn)  # the batch ends: written before its deadline
                completer.drop()
                assert counts == {"ack": 1}
                await asyncio.sleep(0.5)
                # the next batch: a window that closes at opened + 1.5 or later
                await completer.handle(conn, second, quick(second))
                slow, seen = watching(
                    qt,
                    second,
                    third,
                    [("past the first deadline", opened + 1.2), ("past its own", opened + 2.5)],
                )
                await completer.handle(conn, third, slow)
                assert seen == {"past the first deadline": False, "past its own": True}
                assert counts == {"ack": 2} and held == {third}
                await completer.finish(conn)
                completer.close()
                assert counts == {"ack": 3} and not held
        finally:
            await qt.drop()

    run(go())
