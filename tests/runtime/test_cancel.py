"""queue.cancel: a pending message no consumer holds finishes as ack would; one in flight stays."""

from __future__ import annotations

import asyncio

import pytest
from support.engines import run
from support.queues import make_queue
from support.services import sync_connection

import runtime
from runtime.forms import form_for
from runtime.settle import decide

FORMS = ["row_lock", "lease", "advisory"]
VARIANTS = {
    # processed rows kept, dead letter a group
    "kept": (("attempt", "retry_after", "processed_at"), "group"),
    # finished rows deleted, dead letter a table
    "deleted": (("attempt", "retry_after"), "table"),
}


def _finished(rows, id, kept):
    """The row as ack leaves it: marked processed, or gone."""
    row = next((r for r in rows if r["id"] == id), None)
    return row is not None and row["processed_at"] is not None if kept else row is None


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cancel_finishes_pending_messages_and_leaves_one_in_flight(engine, form, variant):
    columns, dead = VARIANTS[variant]
    kept = variant == "kept"
    serial = form == "row_lock" and engine.name == "sqlite"  # BEGIN IMMEDIATE holds the file

    async def go():
        qt = await make_queue(engine, form, columns=columns, dead=dead, max_attempts=3)
        form_ = form_for(qt.queue)
        try:
            held_id, ready_id = await qt.enqueue({"n": 1}, {"n": 2})
            (delayed_id,) = await qt.enqueue({"n": 3}, delay=3600)
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.cancel(db, delayed_id) is True
                assert await qt.queue.cancel(db, ready_id) is True
                assert await qt.queue.cancel(db, ready_id) is False  # already finished
                assert await qt.queue.cancel(db, 10**9) is False  # no such id
            rows = await qt.rows()
            assert _finished(rows, ready_id, kept) and _finished(rows, delayed_id, kept)
            assert await qt.dead_rows() == []  # a cancel is no dead letter

            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                (d,) = await form_.claim(a, 1, None)  # a handler runs: in flight
                assert d.message.id == held_id
                if serial:
                    # SQLite's row lock is the database's write lock: the cancel waits for
                    # the batch to end, then finds the row as the batch left it
                    pending = asyncio.create_task(qt.queue.cancel(b, held_id))
                    await asyncio.sleep(0.5)
                    assert not pending.done()
                else:
                    assert await asyncio.wait_for(qt.queue.cancel(b, held_id), 5) is False
                    assert not _finished(await qt.rows(), held_id, kept)
                await form_.settle(a, d, decide(qt.queue, d, runtime.retry()))
                await form_.end_batch(a)
                if serial:
                    assert await pending is True
                else:
                    assert await qt.queue.cancel(b, held_id) is True  # pending again
            assert _finished(await qt.rows(), held_id, kept)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_dead_message_is_not_cancelled(engine, form):
    async def go():
        qt = await make_queue(engine, form, dead="group", max_attempts=1)
        form_ = form_for(qt.queue)
        try:
            (mid,) = await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as db:
                (d,) = await form_.claim(db, 1, None)
                await form_.settle(db, d, decide(qt.queue, d, runtime.retry()))
                await form_.end_batch(db)
                assert [r["id"] for r in await qt.dead_rows()] == [mid]
                assert await qt.queue.cancel(db, mid) is False
            assert [r["id"] for r in await qt.dead_rows()] == [mid]
        finally:
            await qt.drop()

    run(go())


def test_sync_cancel_on_the_services_connection(engine):
    qt = run(make_queue(engine, "lease"))
    try:
        ids = run(qt.enqueue({"n": 1}, {"n": 2}))
        with sync_connection(engine, "driver") as (conn, commit, rollback, _execute):
            assert qt.queue.sync.cancel(conn, ids[0]) is True
            rollback()  # in the service's transaction: undone with it
            assert qt.queue.sync.cancel(conn, ids[1]) is True
            commit()
        rows = run(qt.rows())
        assert [r["processed_at"] is not None for r in rows] == [False, True]
    finally:
        run(qt.drop())
