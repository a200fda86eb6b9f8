"""The two ordering roles, on every engine and form: ``priority`` (the claim takes higher
priority first, then id) and ``fifo_key`` (one message of a key at a time, in id order)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, run
from support.ordering import hold, serial, settle
from support.queues import QueueUnderTest, make_queue
from support.services import sync_connection
from support.statements import namespace, params_for, run_file, statements_in

import runtime
from runtime.contract.errors import ConfigurationError
from runtime.forms import form_for
from runtime.settle import decide
from runtime.verify import verify

FORMS = ["row_lock", "lease", "advisory"]
GOLDEN = Path(__file__).resolve().parents[1] / "golden"
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


# ----------------------------------------------------------------------------- fifo_key


@pytest.mark.parametrize("form", FORMS)
def test_fifo_key_delivers_one_message_of_a_key_at_a_time_in_id_order(
    engine: Engine, form: str
) -> None:
    async def go() -> None:
        qt = await make_queue(engine, form, columns=(*BASE, "fifo_key"))
        try:
            (a1,) = await qt.enqueue({"n": 1}, fifo_key="A")
            (b1,) = await qt.enqueue({"n": 2}, fifo_key="B")
            (a2,) = await qt.enqueue({"n": 3}, fifo_key="A")
            free = await qt.enqueue({"n": 4}, {"n": 5})  # NULL: no ordering constraint
            (b2,) = await qt.enqueue({"n": 6}, fifo_key="B")
            (a3,) = await qt.enqueue({"n": 7}, fifo_key="A")
            async with await runtime.connect(qt.url) as one:
                first = await hold(qt, one)
                # only each key's head is claimable, however large the batch
                assert sorted(d.message.id for d in first) == [a1, b1, *free]
                if not serial(engine, form):
                    async with await runtime.connect(qt.url) as two:
                        # the heads are in flight: their keys' later messages wait
                        assert await hold(qt, two) == []
                # a1 finishes (kept, marked processed); b1 and the free ones return, unfinished
                await settle(
                    qt,
                    one,
                    [(d, runtime.ack() if d.message.id == a1 else runtime.retry()) for d in first],
                )
            # a2 is A's head now; b1 still blocks b2
            assert sorted(await take(qt, limit=10)) == sorted([b1, a2, *free])
            assert await drain_order(qt) == [b2, a3]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_fifo_key_a_head_waiting_for_its_retry_still_holds_its_key(
    engine: Engine, form: str
) -> None:
    async def go() -> None:
        qt = await make_queue(engine, form, columns=(*BASE, "fifo_key"))
        try:
            (a1,) = await qt.enqueue({"n": 1}, fifo_key="A")
            (a2,) = await qt.enqueue({"n": 2}, fifo_key="A")
            (b1,) = await qt.enqueue({"n": 3}, fifo_key="B")
            async with await runtime.connect(qt.url) as db:
                (d,) = await hold(qt, db, limit=1)
                assert d.message.id == a1
                await settle(qt, db, [(d, runtime.retry_after(3600))])
            # a1 waits an hour: a2 waits behind it, other keys do not
            assert await drain_order(qt) == [b1]
            await qt.make_due()
            assert await drain_order(qt) == [a1, a2]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("dead", ["group", "table"])
@pytest.mark.parametrize("form", FORMS)
def test_fifo_key_a_dead_head_no_longer_blocks_its_key(
    engine: Engine, form: str, dead: str
) -> None:
    async def go() -> None:
        columns = ("attempt", "retry_after", "fifo_key")  # finished rows are deleted
        qt = await make_queue(engine, form, columns=columns, dead=dead, max_attempts=1)
        try:
            (a1,) = await qt.enqueue({"n": 1}, fifo_key="A")
            (a2,) = await qt.enqueue({"n": 2}, fifo_key="A")
            async with await runtime.connect(qt.url) as db:
                (d,) = await hold(qt, db, limit=1)
                assert d.message.id == a1
                await settle(qt, db, [(d, runtime.retry())])  # at the cap: dead
            assert [r["id"] for r in await qt.dead_rows()] == [a1]
            assert await drain_order(qt) == [a2]
        finally:
            await qt.drop()

    run(go())


def test_fifo_key_an_expired_lease_returns_the_head_not_the_next(engine: Engine) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease", columns=(*BASE, "fifo_key"))
        try:
            (a1,) = await qt.enqueue({"n": 1}, fifo_key="A")
            await qt.enqueue({"n": 2}, fifo_key="A")
            async with await runtime.connect(qt.url) as db:
                (d,) = await hold(qt, db)
                await qt.expire_leases()  # the consumer stalled past its lease
                (again,) = await hold(qt, db)
                assert d.message.id == again.message.id == a1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_priority_and_fifo_key_within_a_key_id_order_wins(engine: Engine, form: str) -> None:
    async def go() -> None:
        qt = await make_queue(engine, form, columns=(*BASE, "priority", "fifo_key"))
        try:
            (a1,) = await qt.enqueue({"n": 1}, fifo_key="A", priority=0)
            (a2,) = await qt.enqueue({"n": 2}, fifo_key="A", priority=9)
            (b1,) = await qt.enqueue({"n": 3}, fifo_key="B", priority=5)
            (c1,) = await qt.enqueue({"n": 4}, priority=1)
            # heads by priority: b1 (5), c1 (1), a1 (0); a2 (9) waits for a1 all the same
            assert await drain_order(qt) == [b1, c1, a1, a2]
        finally:
            await qt.drop()

    run(go())


def test_fifo_key_is_checked_at_enqueue_and_verified(engine: Engine) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "advisory", columns=(*BASE, "priority", "fifo_key"))
        plain = await make_queue(engine, "advisory")
        try:
            for bad in ("", "x" * 192, 7):
                with pytest.raises(ValueError, match="fifo_key"):
                    await qt.enqueue({"n": 1}, fifo_key=bad)
            with pytest.raises(ConfigurationError, match="no fifo_key column"):
                await plain.enqueue({"n": 1}, fifo_key="A")
            await qt.enqueue({"n": 1}, fifo_key="k" * 191)
            async with await runtime.connect(qt.url) as db:
                assert await verify(db, qt.queue) == []
                await db.execute(
                    f"DROP INDEX {qt.q(qt.table + '_fifo')}"
                    + (f" ON {qt.q(qt.table)}" if engine.name in ("mariadb", "mysql") else "")
                )
                (finding,) = await verify(db, qt.queue)
                assert "fifo_key" in str(finding) and "earlier rows" in str(finding)
        finally:
            await qt.drop()
            await plain.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_fifo_key_under_concurrent_consumers(engine: Engine, form: str) -> None:
    """Four workers drain keyed messages, each first delivery retried: never two messages of
    a key in flight at once, and each key handled in id order."""

    async def go() -> None:
        qt = await make_queue(engine, form, columns=(*BASE, "fifo_key"))
        try:
            keys = ["A", "B", "C"]
            ids: dict[str, list[int]] = {k: [] for k in keys}
            async with await runtime.connect(qt.url) as db:
                for n in range(24):
                    k = keys[n % 3] if n % 4 else keys[(n // 4) % 3]
                    ids[k].append(await qt.queue.enqueue(db, {"n": n, "k": k}, fifo_key=k))
            in_flight: dict[str, int] = {}
            handled: dict[str, list[int]] = {k: [] for k in keys}
            overlaps: list[str] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                k = message.payload["k"]
                if k in in_flight:
                    overlaps.append(f"{k}: {in_flight[k]} and {message.id}")
                in_flight[k] = message.id
                await asyncio.sleep(0.01)
                del in_flight[k]
                if ctx.attempt == 1:
                    return runtime.retry()
                handled[k].append(message.id)
                return runtime.ack()

            consumer = runtime.Consumer(
                qt.url, qt.queue, handle, concurrency=4, batch=3, retry_policy=runtime.Immediate()
            )
            await asyncio.wait_for(consumer.drain(), 120)
            assert overlaps == []
            assert handled == ids
        finally:
            await qt.drop()

    run(go())


def test_every_statement_of_the_ordering_golden_files_runs(engine: Engine) -> None:
    """The golden files of both roles (every form, dead letters, priority with fifo_key): each
    statement runs on the engine, as tests/engines/test_engine_statements.py runs the examples'."""
    files = sorted(GOLDEN.glob(f"priority_fifo_*/expected/{engine.dialect_name}/*.sql"))
    assert len(files) == 6

    async def go() -> tuple[int, list[str]]:
        total, failures = 0, []
        async with namespace(engine) as conn:
            for path in files:
                ran, failed = await run_file(conn, path, params_for(engine.dialect_name))
                total += ran
                failures += failed
        return total, failures

    ran, failures = run(go())
    assert not failures, "\n".join(failures)
    assert ran == sum(statements_in(f)[1] for f in files)
