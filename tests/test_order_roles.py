"""The two ordering roles, on every engine and form: ``priority`` (the claim takes higher
priority first, then id) and ``fifo_key`` (one message of a key at a time, in id order)."""

from __future__ import annotations

from typing import Any

import pytest
from engines import Engine, run
from queues import QueueUnderTest, make_queue
from test_service import sync_connection

import runtime
from runtime.errors import ConfigurationError
from runtime.forms import form_for
from runtime.settle import decide
from runtime.verify import verify

FORMS = ["row_lock", "lease", "advisory"]
BASE = ("attempt", "retry_after", "processed_at")


async def take(qt: QueueUnderTest, limit: int = 1) -> list[int]:
    """Claim up to limit messages on a connection of their own and ack them: their ids in
    the order the claim handed them out."""
    form = form_for(qt.queue, keyspace=qt.url)
    async with await runtime.connect(qt.url) as db:
        batch = await form.claim(db, limit, None)
        for d in batch:
            await form.settle(db, d, decide(qt.queue, d, runtime.ack()))
        await form.end_batch(db)
        return [d.message.id for d in batch]


async def drain_order(qt: QueueUnderTest) -> list[int]:
    """Every message, one claim at a time: the order the queue hands them out."""
    out: list[int] = []
    while got := await take(qt):
        out += got
    return out


# ----------------------------------------------------------------------------- priority


@pytest.mark.parametrize("form", FORMS)
def test_priority_claims_higher_priority_first_then_id(engine: Engine, form: str) -> None:
    async def go() -> None:
        qt = await make_queue(engine, form, columns=(*BASE, "priority"))
        try:
            low = await qt.enqueue({"n": 0}, priority=-1)
            zero = await qt.enqueue({"n": 1}, {"n": 2})  # None: the column's default, 0
            high = await qt.enqueue({"n": 3}, {"n": 4}, priority=5)
            mid = await qt.enqueue({"n": 5}, priority=0)
            assert [r["priority"] for r in await qt.rows()] == [-1, 0, 0, 5, 5, 0]
            # a batch is the highest priorities
            assert sorted(await take(qt, limit=2)) == high
            assert await drain_order(qt) == [*zero, *mid, *low]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_priority_through_enqueue_many_and_a_services_own_connection(
    engine: Engine, form: str
) -> None:
    async def go() -> tuple[QueueUnderTest, list[int]]:
        qt = await make_queue(engine, form, columns=(*BASE, "priority"))
        async with await runtime.connect(qt.url) as db:
            await qt.queue.enqueue_many(db, [{"n": 1}, {"n": 2}])
            await qt.queue.enqueue_many(db, [{"n": 3}], priority=9)
        return qt, []

    qt, _ = run(go())
    try:
        with sync_connection(engine, "driver") as (conn, commit, _, _):
            one = qt.queue.sync.enqueue(conn, {"n": 4}, priority=7)
            qt.queue.sync.enqueue_many(conn, [{"n": 5}], priority=8)
            commit()
        got = run(drain_order(qt))
        assert got[0] == 3 and got[2] == one and got[3:] == [1, 2]
    finally:
        run(qt.drop())


def test_priority_is_checked_at_enqueue(engine: Engine) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease", columns=(*BASE, "priority"))
        plain = await make_queue(engine, "lease")
        try:
            for bad in (1.5, True, "3", 2**31):
                with pytest.raises(ValueError, match="priority"):
                    await qt.enqueue({"n": 1}, priority=bad)
            with pytest.raises(ConfigurationError, match="no priority column"):
                await plain.enqueue({"n": 1}, priority=1)
            assert await qt.rows() == []
            # the rendered schema matches what verify expects, claim index included
            async with await runtime.connect(qt.url) as db:
                assert await verify(db, qt.queue) == []
        finally:
            await qt.drop()
            await plain.drop()

    run(go())


def test_priority_with_a_group_claims_within_the_group(engine: Engine) -> None:
    async def go() -> list[Any]:
        qt = await make_queue(engine, "lease", columns=(*BASE, "priority"), dead="group")
        try:
            a = await qt.enqueue({"n": 1}, priority=1)
            b = await qt.enqueue({"n": 2}, priority=3, group="other")
            c = await qt.enqueue({"n": 3}, priority=2)
            assert await drain_order(qt) == [*c, *a]
            return b
        finally:
            await qt.drop()

    run(go())
