"""PostgreSQL advisory and lease: a small batch whose handlers all acked is finished by the
worker's next claim, in the same statement (``ack_claim``): under the keys the connection
holds (advisory), or where each row still holds its delivery's token (lease). SQLite's lease
form does the same with the file's ``ack_many`` and claim, run together in one transaction
(one trip to the connection's thread): every lease test here runs on both engines.

The claim lists none of those rows (advisory: the session holds their keys, a try would take
each again), and their keys are released once, by the claim after. After a lost connection
advisory rows are not finished (the keys went with it, and the rows return); leased rows are,
by the next claim on a new connection (the tokens are in the rows). A leased row another
claim took since is not finished, and its delivery met LeaseLost. Only what finishes as
``ack_many`` does is deferred, a group of at most ``DEFER_MAX``: a retry, a mixed or larger
batch, or a transactional form settles at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from support.engines import engine_for, run
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.contract.errors import LeaseLost
from runtime.forms import form_for
from runtime.forms.base import DEFER_MAX
from runtime.settle import decide

COLUMNS = ("attempt", "retry_after")
#: where the next claim finishes the last batch: engine, form
CASES = [("postgres", "advisory"), ("postgres", "lease"), ("sqlite", "lease")]
#: the engines whose lease form does
LEASE_ENGINES = ("postgres", "sqlite")


async def ids_in_table(qt: QueueUnderTest) -> list[int]:
    return [r["id"] for r in await qt.rows()]


def acks(qt: QueueUnderTest, deliveries: list[Any]) -> list[tuple[Any, Any]]:
    """Each delivery with the decision its handler's ack() makes."""
    return [(d, decide(qt.queue, d, runtime.ack())) for d in deliveries]


@pytest.mark.parametrize(("engine_name", "form_name"), CASES)
def test_only_what_finishes_as_ack_many_does_waits_for_the_next_claim(
    tmp_path: Path, engine_name: str, form_name: str
) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), form_name, columns=COLUMNS)
        form = form_for(qt.queue)
        tx_form = form_for(qt.queue, transactional=True)
        try:
            await qt.enqueue(*({"n": i} for i in range(DEFER_MAX + 1)))
            async with await runtime.connect(qt.url) as conn:
                many = await form.claim(conn, DEFER_MAX + 1, None)
                assert not form.defer(acks(qt, many))  # too large: settled on its own
                ds = many[-3:]
                acked = acks(qt, ds)
                mixed = [*acked[:2], (ds[2], decide(qt.queue, ds[2], runtime.retry()))]
                drops = [(d, decide(qt.queue, d, runtime.drop())) for d in ds]
                assert not form.defer(mixed)
                assert not tx_form.defer(acked)  # each commits its handler's writes
                assert not form.defer([acked[0], acked[0]])  # one row, one statement
                assert not any(d.settled for d in many)
                assert form.defer(drops)  # drop_many is ack_many's statement
                assert form.defer(acks(qt, many[:DEFER_MAX]))  # as large as it may be
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize(("engine_name", "form_name"), CASES)
def test_a_consumer_settles_every_batch_through_the_next_claim(
    tmp_path: Path, engine_name: str, form_name: str
) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), form_name, columns=COLUMNS)
        try:
            await qt.enqueue(*({"n": i} for i in range(40)))
            seen: list[int] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append(message.id)
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=2, batch=5)
            claims: list[int] = []  # how many rows each claim that settled finished
            claim_settling = consumer.form.claim_settling

            async def counted(*args: Any) -> Any:
                settled = await claim_settling(*args)
                claims.append(len(settled.met))
                return settled

            consumer.form.claim_settling = counted  # type: ignore[method-assign]
            counts = await asyncio.wait_for(consumer.drain(), 30)
            # every batch was finished by the claim after it (the last by the claim that
            # found nothing)
            assert sum(claims) == 40, claims
            assert counts.get("ack") == 40 and counts.get("lease_lost", 0) == 0, counts
            assert len(seen) == 40 == len(set(seen))
            assert await qt.rows() == []  # the last claim, finding none, finished the last
        finally:
            await qt.drop()

    run(go())


async def keys_held(conn: runtime.Connection) -> int:
    rows = await conn.fetchall(
        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()",
        {},
    )
    return int(rows[0]["n"])


async def key_free(qt: QueueUnderTest, conn: runtime.Connection, row_id: int) -> bool:
    """Whether the advisory key of row ``row_id`` is free: ``conn`` can take it (and gives
    it back at once)."""
    key = f"hashtextextended('qgen:{qt.table}:' || CAST(%(id)s AS TEXT), 0)"
    (got,) = await conn.fetchall(f"SELECT pg_try_advisory_lock({key}) AS ok", {"id": row_id})
    if got["ok"]:
        await conn.fetchall(f"SELECT pg_advisory_unlock({key}) AS ok", {"id": row_id})
    return bool(got["ok"])


def test_advisory_the_next_claim_finishes_the_rows_under_their_keys_and_keeps_each_key_once(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("postgres", tmp_path), "advisory", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(9)))
            async with await runtime.connect(qt.url) as conn:
                first = await form.claim(conn, 3, None)
                items = acks(qt, first)
                assert form.defer(items) and all(d.settled for d in first)
                assert await ids_in_table(qt) == ids  # nothing written yet
                second, met = await form.claim_settling(conn, 3, None, items)
                assert met == [None, None, None]
                # finished, and none of them listed again though this session holds their keys
                assert await ids_in_table(qt) == ids[3:]
                assert [d.message.id for d in second] == ids[3:6]
                assert all(d.attempt == 1 for d in second)
                assert await keys_held(conn) == 6  # the first batch's wait for the next claim
                items = acks(qt, second)
                assert form.defer(items)
                third, met = await form.claim_settling(conn, 3, None, items)
                assert met == [None, None, None]
                assert [d.message.id for d in third] == ids[6:]
                # the first batch's keys released once: each was taken once, so each is
                # free now for another session
                assert await keys_held(conn) == 6
                async with await runtime.connect(qt.url) as other:
                    assert all([await key_free(qt, other, d.message.id) for d in first])
                    assert not any([await key_free(qt, other, d.message.id) for d in second])
        finally:
            await qt.drop()

    run(go())


def test_advisory_rows_whose_keys_went_with_a_lost_connection_are_not_finished(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("postgres", tmp_path), "advisory", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(4)))
            async with await runtime.connect(qt.url) as conn:
                async with await runtime.connect(qt.url) as lost:
                    first = await form.claim(lost, 2, None)
                    items = acks(qt, first)
                    assert form.defer(items)
                    assert not any([await key_free(qt, conn, d.message.id) for d in first])
                # the connection is gone, and its keys with it (once its server process has
                # ended, which a closed client does not wait for): another worker may take them
                for _ in range(100):
                    if all([await key_free(qt, conn, d.message.id) for d in first]):
                        break
                    await asyncio.sleep(0.05)
                else:
                    raise AssertionError("the lost connection's keys are still held")
                batch, met = await form.claim_settling(conn, 4, None, items)
            assert all(isinstance(m, LeaseLost) for m in met) and all(d.lost for d in first)
            assert await ids_in_table(qt) == ids  # nothing finished
            assert sorted(d.message.id for d in batch) == ids  # they return at once
        finally:
            await qt.drop()

    run(go())


def test_advisory_a_row_moved_to_a_dead_letter_group_is_unlocked_at_once(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(
            engine_for("postgres", tmp_path),
            "advisory",
            columns=COLUMNS,
            dead="group",
            max_attempts=1,
        )
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as conn:
                dead, acked = await form.claim(conn, 2, None)
                items = [
                    (dead, decide(qt.queue, dead, runtime.retry())),  # at the cap: moved
                    (acked, decide(qt.queue, acked, runtime.ack())),
                ]
                assert [decision.label for _, decision in items] == ["dead_letter", "ack"]
                assert await form.settle_group(conn, items) == [None, None]
                # the moved row stays in the table, claimable by its group's consumers,
                # under the same key: that key is free now; the acked row's waits for the
                # next claim
                assert await keys_held(conn) == 1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize(("engine_name", "form_name"), CASES)
def test_a_drop_the_table_declares_itself_is_never_deferred(
    tmp_path: Path, engine_name: str, form_name: str
) -> None:
    guard = " AND locked_until = :token" if form_name == "lease" else ""

    async def go() -> None:
        qt = await make_queue(
            engine_for(engine_name, tmp_path),
            form_name,
            columns=COLUMNS,
            statements={"drop": "DELETE FROM {qt} WHERE {c_id} = :id" + guard},
        )
        form = form_for(qt.queue)
        try:
            assert form.settles_in_claim  # ack is the file's own: the next claim finishes it
            await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as conn:
                ds = await form.claim(conn, 2, None)
                drops = [(d, decide(qt.queue, d, runtime.drop())) for d in ds]
                assert not form.defer(drops)  # the table's drop runs as declared
                assert not form.defer([acks(qt, ds)[0], drops[1]])
                assert form.defer(acks(qt, ds))
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize(("engine_name", "form_name"), CASES)
def test_a_worker_cancelled_before_its_next_claim_still_finishes_the_acks_that_waited(
    tmp_path: Path, engine_name: str, form_name: str
) -> None:
    """The consumer's task cancelled (a stop that timed out, the caller's own cancel) while a
    batch's acks wait for the next claim: the worker writes them on its way out, so the
    rows are finished, counted once, and not delivered again."""

    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), form_name, columns=COLUMNS)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(4)))
            seen: list[int] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append(message.id)
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=4)
            claim_settling = consumer.form.claim_settling
            reached = asyncio.Event()

            async def slow_network(*args: Any) -> Any:
                reached.set()  # the claim that was to finish the batch never gets out
                await asyncio.sleep(3600)
                return await claim_settling(*args)

            consumer.form.claim_settling = slow_network  # type: ignore[method-assign]
            task = asyncio.create_task(consumer.run())
            await asyncio.wait_for(reached.wait(), 30)
            assert await ids_in_table(qt) == ids  # deferred: nothing written yet
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
            assert await qt.rows() == []  # written on the way out
            assert consumer.counts.get("ack") == 4, consumer.counts
            assert sorted(seen) == sorted(ids)
            # and nothing is delivered again
            again = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=4)
            assert (await asyncio.wait_for(again.drain(), 30)).get("ack", 0) == 0
            assert len(seen) == 4
        finally:
            await qt.drop()

    run(go())


def test_advisory_acks_a_claim_finished_stand_when_its_new_batch_cannot_be_taken_up(
    tmp_path: Path, caplog: Any
) -> None:
    """The claim that finished the last batch committed, then taking up its new batch failed
    (an unlock the server refused): the acks stand and count, the connection is dropped, and
    the rows the claim took return with its keys, for another connection to claim."""

    async def go() -> None:
        qt = await make_queue(engine_for("postgres", tmp_path), "advisory", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(6)))
            conn = await runtime.connect(qt.url)
            try:
                first = await form.claim(conn, 3, None)
                items = acks(qt, first)
                assert form.defer(items)

                async def refused(c: runtime.Connection, listed: Any) -> Any:
                    # a statement the server refuses, where the take-up unlocks keys
                    await c.execute("SELECT pg_advisory_unlock_all(1)")

                form._batch_of = refused  # type: ignore[method-assign]
                batch, met = await form.claim_settling(conn, 3, None, items)
                assert met == [None, None, None]  # committed: they count as acked
                assert list(batch) == [] and conn.closed
            finally:
                await conn.close()
            assert await ids_in_table(qt) == ids[3:]
            assert "could not be taken up" in caplog.text
            async with await runtime.connect(qt.url) as other:
                again = form_for(qt.queue)
                for _ in range(100):  # the dropped session's keys go once its server ends
                    taken = await again.claim(other, 3, None)
                    if taken:
                        break
                    await asyncio.sleep(0.05)
                assert [d.message.id for d in taken] == ids[3:]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", LEASE_ENGINES)
def test_lease_the_next_claim_finishes_the_rows_that_hold_their_tokens_and_lists_none(
    tmp_path: Path, engine_name: str
) -> None:
    async def go() -> None:
        qt = await make_queue(
            engine_for(engine_name, tmp_path), "lease", columns=(*COLUMNS, "processed_at")
        )
        form = form_for(qt.queue)
        try:
            if not form.settles_in_claim:  # the partitioned layout: finishing moves rows
                pytest.skip("a partitioned layout has no ack_claim")
            ids = await qt.enqueue(*({"n": i} for i in range(6)))
            async with await runtime.connect(qt.url) as conn:
                first = await form.claim(conn, 3, None)
                # a lease extended since the claim: its new token is the one bound
                assert await form.extend(conn, first[0])
                items = acks(qt, first)
                assert form.defer(items) and all(d.settled for d in first)
                second, met = await form.claim_settling(conn, 3, None, items)
                assert met == [None, None, None]
                assert [d.message.id for d in second] == ids[3:]  # none of the first listed
                assert all(d.token is not None and d.attempt == 1 for d in second)
            by_id = {r["id"]: r for r in await qt.rows()}
            for row_id in ids[:3]:  # kept, processed, the lease cleared: as ack_many leaves it
                assert by_id[row_id]["processed_at"] is not None
                assert by_id[row_id]["locked_until"] is None
            for row_id in ids[3:]:  # leased by the claim, not processed
                assert by_id[row_id]["processed_at"] is None
                assert by_id[row_id]["locked_until"] is not None
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", LEASE_ENGINES)
def test_lease_an_extension_in_flight_is_waited_for_and_its_new_token_bound(
    tmp_path: Path, engine_name: str
) -> None:
    """The extender (on a connection of its own) has begun moving a lease forward when the
    handler's ack is deferred and the next claim runs: the claim waits for that extension and
    finishes the row by the token it wrote, so the ack does not miss its own row."""

    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), "lease", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(4)))
            async with (
                await runtime.connect(qt.url) as conn,
                await runtime.connect(qt.url) as extender,
            ):
                first = await form.claim(conn, 2, None)
                old_token = first[0].token
                # a token is the lease's end (to the millisecond on SQLite): let the clock move
                # so that the extension writes a different one
                await asyncio.sleep(0.02)
                extending = asyncio.ensure_future(form.extend(extender, first[0]))
                await asyncio.sleep(0)  # it holds the delivery's lock, its statement on the way
                assert first[0].lock.locked()
                items = acks(qt, first)
                assert form.defer(items)
                second, met = await form.claim_settling(conn, 2, None, items)
                assert await extending  # the extension went through first
                assert first[0].token != old_token
            assert met == [None, None]  # both rows finished, by their current tokens
            assert [d.message.id for d in second] == ids[2:]
            assert await ids_in_table(qt) == ids[2:]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", LEASE_ENGINES)
def test_lease_a_row_another_claim_took_is_not_finished_and_its_delivery_lost_it(
    tmp_path: Path, engine_name: str
) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), "lease", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(3)))
            async with await runtime.connect(qt.url) as conn:
                first = await form.claim(conn, 2, None)
                items = acks(qt, first)
                assert form.defer(items)
                # the first row's lease expired and another claim took it: a new token
                await qt.expire_leases(first[0].message.id)
                async with await runtime.connect(qt.url) as other:
                    (taken,) = await form_for(qt.queue).claim(other, 1, None)
                assert taken.message.id == first[0].message.id
                batch, met = await form.claim_settling(conn, 3, None, items)
            assert isinstance(met[0], LeaseLost) and first[0].lost
            assert met[1] is None
            assert await ids_in_table(qt) == [ids[0], ids[2]]  # only the held row finished
            assert [d.message.id for d in batch] == [ids[2]]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", LEASE_ENGINES)
def test_lease_acks_that_waited_are_finished_by_the_claim_on_a_new_connection(
    tmp_path: Path, engine_name: str
) -> None:
    """The tokens are in the rows: the connection that claimed them is gone, and the next
    claim, on another connection, still finishes them; when it leases nothing it returns
    what it finished all the same."""

    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), "lease", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as lost:
                first = await form.claim(lost, 2, None)
            items = acks(qt, first)
            assert form.defer(items)
            async with await runtime.connect(qt.url) as conn:
                batch, met = await form.claim_settling(conn, 2, None, items)
            assert met == [None, None] and list(batch) == []
            assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", LEASE_ENGINES)
def test_lease_a_worker_whose_connection_is_gone_finishes_the_acks_that_waited_elsewhere(
    tmp_path: Path, engine_name: str
) -> None:
    """Stopping with acks waiting for the next claim, the worker's connection closed under
    it: they are written on a fresh connection by their tokens, not left to wait out their
    leases and be delivered again."""

    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), "lease", columns=COLUMNS)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(3)))
            consumer = runtime.Consumer(qt.url, qt.queue, lambda m, ctx: None, batch=3)
            claim_settling = consumer.form.claim_settling
            reached = asyncio.Event()

            async def gone(conn: runtime.Connection, *args: Any) -> Any:
                reached.set()
                await conn.close()  # the connection is gone before the claim gets out
                await asyncio.sleep(3600)
                return await claim_settling(conn, *args)

            consumer.form.claim_settling = gone  # type: ignore[method-assign]
            task = asyncio.create_task(consumer.run())
            await asyncio.wait_for(reached.wait(), 30)
            assert await ids_in_table(qt) == ids
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(task, 30)
            assert await qt.rows() == []
            assert consumer.counts.get("ack") == 3, consumer.counts
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", LEASE_ENGINES)
def test_lease_acks_whose_claim_was_lost_with_its_connection_are_finished_on_the_next(
    tmp_path: Path, engine_name: str
) -> None:
    """The claim that was to finish a batch's acks meets a dropped connection: the acks wait,
    and the claim on the worker's next connection finishes them by their tokens (counted
    as resettled), so no row waits out its lease or is handled twice."""

    async def go() -> None:
        qt = await make_queue(engine_for(engine_name, tmp_path), "lease", columns=COLUMNS)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(3)))
            seen: list[int] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> None:
                seen.append(message.id)

            consumer = runtime.Consumer(qt.url, qt.queue, handle, batch=3)
            claim_settling = consumer.form.claim_settling
            calls = 0

            async def dropped_once(conn: runtime.Connection, *args: Any) -> Any:
                nonlocal calls
                calls += 1
                if calls == 1:
                    await conn.abort()  # the connection drops as the claim goes out
                return await claim_settling(conn, *args)

            consumer.form.claim_settling = dropped_once  # type: ignore[method-assign]
            counts = await asyncio.wait_for(consumer.drain(), 30)
            assert calls >= 2
            assert counts.get("ack") == 3 and counts.get("resettled") == 3, counts
            assert counts.get("lease_lost", 0) == 0, counts
            assert sorted(seen) == ids
            assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


def test_sqlite_lease_acks_and_the_claim_commit_together_or_not_at_all(tmp_path: Path) -> None:
    """SQLite runs ``ack_many`` and the claim as one script: a claim the database refuses
    (here a trigger) rolls the acks back with it, and the rows wait, still leased, for the
    next try."""

    async def go() -> None:
        qt = await make_queue(engine_for("sqlite", tmp_path), "lease", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(4)))
            async with await runtime.connect(qt.url) as conn:
                first = await form.claim(conn, 2, None)
                items = acks(qt, first)
                assert form.defer(items)
                await qt.sql(
                    f"CREATE TRIGGER {qt.table}_refuse BEFORE UPDATE ON {qt.q(qt.table)} "
                    "BEGIN SELECT RAISE(ABORT, 'claim refused'); END"
                )
                with pytest.raises(runtime.DatabaseError, match="claim refused"):
                    await form.claim_settling(conn, 2, None, items)
                assert not conn.in_transaction
                assert await ids_in_table(qt) == ids  # the acks rolled back with the claim
                await qt.sql(f"DROP TRIGGER {qt.table}_refuse")
                batch, met = await form.claim_settling(conn, 2, None, items)
            assert met == [None, None]
            assert [d.message.id for d in batch] == ids[2:]
            assert await ids_in_table(qt) == ids[2:]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize(
    ("engine_name", "extra"),
    [
        ("mariadb", {}),  # its lease claim and ack_many stay two trips
        ("sqlite", {"rate_limit": {"per_s": 10, "burst": 5}}),
        ("sqlite", {"max_in_flight": 2}),
    ],
    ids=["mariadb", "sqlite-rate_limit", "sqlite-max_in_flight"],
)
def test_lease_acks_are_written_at_once_where_the_next_claim_cannot_finish_them(
    tmp_path: Path, engine_name: str, extra: dict[str, Any]
) -> None:
    """Limits run their statements before the claim, which one finishing the last batch
    would step around: there (and on engines that do not run the two together) the acks do
    not wait for the next claim."""

    async def go() -> None:
        qt = await make_queue(
            engine_for(engine_name, tmp_path), "lease", columns=COLUMNS, extra=extra
        )
        form = form_for(qt.queue)
        try:
            assert not form.settles_in_claim
            await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as conn:
                batch = await form.claim_within_rate(conn, 1, None)
                assert not form.defer(acks(qt, batch))
        finally:
            await qt.drop()

    run(go())
