"""PostgreSQL lease and advisory: a batch whose handlers all acked is finished by the worker's
next claim, in the same statement (``ack_claim``).

Lease: the claim finishes only the rows that still hold their tokens; a row another
transaction holds locked at that moment is skipped, and ``ack_many`` finishes it once the
lock is gone, while the new batch is already leased and committed. Advisory: the rows are
finished under the keys the connection holds, never listed again by that claim, and their
keys are released once, by the claim after; after a lost connection they are not finished.
Only what finishes as ``ack_many`` does is deferred: a retry, a mixed batch or a
transactional form settles at once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from support.engines import engine_for, run
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.contract.errors import LeaseLost
from runtime.forms import form_for
from runtime.settle import decide

COLUMNS = ("attempt", "retry_after")


async def ids_in_table(qt: QueueUnderTest) -> list[int]:
    return [r["id"] for r in await qt.rows()]


def acks(qt: QueueUnderTest, deliveries: list[Any]) -> list[tuple[Any, Any]]:
    """Each delivery with the decision its handler's ack() makes."""
    return [(d, decide(qt.queue, d, runtime.ack())) for d in deliveries]


def test_the_next_claim_finishes_the_deferred_acks_guarded_by_their_tokens(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("postgres", tmp_path), "lease", columns=COLUMNS)
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(6)))
            async with await runtime.connect(qt.url) as conn:
                first = await form.claim(conn, 3, None)
                assert [d.message.id for d in first] == ids[:3]
                items = acks(qt, first)
                assert form.defer(items)
                assert all(d.settled for d in first)  # no extension starts from here on
                assert await ids_in_table(qt) == ids  # nothing written yet
                # the second row's lease expired and another claim took it: a new token
                await qt.sql(
                    f"UPDATE {qt.q(qt.table)} SET locked_until = clock_timestamp() "
                    f"+ interval '60 seconds' WHERE id = {ids[1]}"
                )
                batch, done, met, left = await form.claim_settling(conn, 3, None, items)
            assert done == items and left == []
            assert met[0] is None and met[2] is None, met
            assert isinstance(met[1], LeaseLost) and first[1].lost
            # the claim leased three others, never a row it was finishing
            assert sorted(d.message.id for d in batch) == ids[3:]
            assert all(d.token is not None and d.attempt == 1 for d in batch)
            rows = {r["id"]: r for r in await qt.rows()}
            assert sorted(rows) == [ids[1], *ids[3:]]  # the other claim's row stays
            assert all(rows[i]["locked_until_future"] for i in rows)
        finally:
            await qt.drop()

    run(go())


def test_a_row_locked_elsewhere_waits_for_the_next_claim_which_never_waits(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(
            engine_for("postgres", tmp_path), "lease", columns=(*COLUMNS, "processed_at")
        )
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(6)))
            async with (
                await runtime.connect(qt.url) as conn,
                await runtime.connect(qt.url) as other,
            ):
                first = await form.claim(conn, 2, None)
                items = acks(qt, first)
                assert form.defer(items)
                await other.begin()  # holds the first row's lock, as a racing claim may
                await other.fetchall(
                    f"SELECT id FROM {qt.q(qt.table)} WHERE id = {ids[0]} FOR UPDATE", {}
                )
                # the claim does not wait for that lock: it finishes the second row, leases
                # two more, and leaves the first for the next claim (still held by its token)
                settled = await asyncio.wait_for(form.claim_settling(conn, 2, None, items), 5)
                assert settled.done == [items[1]] and settled.met == [None]
                assert settled.left == [items[0]] and not first[0].lost
                assert sorted(d.message.id for d in settled.batch) == ids[2:4]
                rows = {r["id"]: r for r in await qt.rows()}
                assert [rows[i]["processed_at"] is not None for i in ids[:2]] == [0, 1]
                await other.commit()
                # the next claim finishes it, with the batch before it
                nxt = [*settled.left, *acks(qt, list(settled.batch))]
                assert form.defer(nxt)
                again = await form.claim_settling(conn, 2, None, nxt)
            assert again.met == [None, None, None] and again.left == []
            assert sorted(d.message.id for d in again.batch) == ids[4:]
            rows = {r["id"]: r for r in await qt.rows()}
            assert [rows[i]["processed_at"] is not None for i in ids] == [1, 1, 1, 1, 0, 0]
        finally:
            await qt.drop()

    run(go())


def test_only_what_finishes_as_ack_many_does_waits_for_the_next_claim(tmp_path: Path) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("postgres", tmp_path), "lease", columns=COLUMNS)
        form = form_for(qt.queue)
        tx_form = form_for(qt.queue, transactional=True)
        try:
            await qt.enqueue(*({"n": i} for i in range(3)))
            async with await runtime.connect(qt.url) as conn:
                ds = await form.claim(conn, 3, None)
                acked = acks(qt, ds)
                mixed = [*acked[:2], (ds[2], decide(qt.queue, ds[2], runtime.retry()))]
                drops = [(d, decide(qt.queue, d, runtime.drop())) for d in ds]
                assert not form.defer(mixed)
                assert not tx_form.defer(acked)  # each commits its handler's writes
                assert not form.defer([acked[0], acked[0]])  # one row, one statement
                assert not any(d.settled for d in ds)
                assert form.defer(drops)  # drop_many is ack_many's statement
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", ["lease", "advisory"])
def test_a_consumer_settles_every_batch_through_the_next_claim(tmp_path: Path, form: str) -> None:
    async def go() -> None:
        qt = await make_queue(engine_for("postgres", tmp_path), form, columns=COLUMNS)
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
                claims.append(len(settled.done))
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


def test_a_lease_expired_unclaimed_is_finished_and_never_leased_again_by_that_claim(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(
            engine_for("postgres", tmp_path), "lease", columns=COLUMNS, lease_s=0.5
        )
        form = form_for(qt.queue)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(3)))
            async with await runtime.connect(qt.url) as conn:
                first = await form.claim(conn, 1, None)
                items = acks(qt, first)
                assert form.defer(items)
                await asyncio.sleep(0.8)  # its lease expired; no claim took it: same token
                batch, _, met, _ = await form.claim_settling(conn, 3, None, items)
            assert met == [None]
            assert sorted(d.message.id for d in batch) == ids[1:]
            assert await ids_in_table(qt) == ids[1:]
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
                second, _, met, _ = await form.claim_settling(conn, 3, None, items)
                assert met == [None, None, None]
                # finished, and none of them listed again though this session holds their keys
                assert await ids_in_table(qt) == ids[3:]
                assert [d.message.id for d in second] == ids[3:6]
                assert all(d.attempt == 1 for d in second)
                assert await keys_held(conn) == 6  # the first batch's wait for the next claim
                items = acks(qt, second)
                assert form.defer(items)
                third, _, met, _ = await form.claim_settling(conn, 3, None, items)
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
                batch, _, met, _ = await form.claim_settling(conn, 4, None, items)
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


def test_a_worker_stopping_right_after_losing_its_connection_still_finishes_its_acks(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        qt = await make_queue(
            engine_for("postgres", tmp_path), "lease", columns=COLUMNS, lease_s=60
        )
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            opened: list[runtime.Connection] = []

            async def open_conn() -> runtime.Connection:
                conn = await runtime.connect(qt.url)
                opened.append(conn)
                return conn

            seen: list[int] = []

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                seen.append(message.id)
                if len(seen) == 2:  # the batch's last: its acks wait for the next claim...
                    for conn in opened:  # ...which meets a dropped connection
                        await conn.abort()
                    asyncio.get_running_loop().call_soon(consumer.stop)  # and stop comes
                return runtime.ack()

            consumer = runtime.Consumer(open_conn, qt.queue, handle, concurrency=1, batch=2)
            started = asyncio.get_running_loop().time()
            counts = await asyncio.wait_for(consumer.run(), 30)
            took = asyncio.get_running_loop().time() - started
            assert took < 10, f"{took:.1f} s: the rows waited out their 60 s leases"
            assert counts.get("ack") == 2, counts
            assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


def test_a_drop_the_table_declares_itself_is_never_deferred(tmp_path: Path) -> None:
    async def go() -> None:
        own_drop = "DELETE FROM {qt} WHERE {c_id} = :id AND {c_locked_until} = :token"
        qt = await make_queue(
            engine_for("postgres", tmp_path),
            "lease",
            columns=COLUMNS,
            statements={"drop": own_drop},
        )
        form = form_for(qt.queue)
        try:
            assert qt.queue.steps.ack_claim is not None  # ack is the file's own: it has one
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
