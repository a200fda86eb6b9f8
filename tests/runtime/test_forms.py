"""What each claim form promises beyond the outcome table: tokens, extension, keys, transactions, failures."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from types import SimpleNamespace

import pytest
from support.engines import engine_params, run
from support.queues import make_queue

import runtime
from runtime.completer import WindowedCompleter
from runtime.forms import form_for
from runtime.settle import dead_letter_now, decide

FORMS = ["row_lock", "lease", "advisory"]
SERVERS = ["postgres", "mariadb"]


def test_stale_lease_settlement_raises_lease_lost_and_leaves_the_new_claim(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                (first,) = await form.claim(a, 1, None)
                await qt.expire_leases()  # the first worker stalled past its lease
                (second,) = await form.claim(b, 1, None)
                assert second.attempt == 2 and second.token != first.token
                with pytest.raises(runtime.LeaseLost):
                    await form.settle(a, first, decide(qt.queue, first, runtime.ack()))
                (row,) = await qt.rows()
                assert row["processed_at"] is None and row["locked_until"] is not None
                await form.settle(b, second, decide(qt.queue, second, runtime.ack()))
                (row,) = await qt.rows()
                assert row["processed_at"] is not None and row["locked_until"] is None
        finally:
            await qt.drop()

    run(go())


def test_a_slow_handler_keeps_its_lease_and_extension_stops_at_settle(engine):
    async def go():
        qt = await make_queue(engine, "lease", lease_s=0.6)
        try:
            (_mid,) = await qt.enqueue({"n": 1})
            tokens = []

            async def slow(message, ctx):
                await asyncio.sleep(1.5)  # longer than two leases
                tokens.extend(r["locked_until_future"] for r in await qt.rows())
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, slow, concurrency=1)
            task = asyncio.create_task(consumer.drain())
            await asyncio.sleep(1.0)
            # a competing claim finds nothing: the lease was extended past its first expiry
            other = form_for(qt.queue)
            async with await runtime.connect(qt.url) as db:
                assert await other.claim(db, 1, None) == []
            counts = await task
            assert counts["ack"] == 1 and counts["extended"] >= 2
            assert tokens == [1]  # still held, in the future, when the handler finished
            (row,) = await qt.rows()
            assert row["locked_until"] is None and row["processed_at"] is not None
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("postgres", "mariadb"), indirect=True)
def test_a_lease_group_waits_for_an_extension_in_flight_and_binds_its_new_token(engine):
    # the extender moves a token while a group of settlements is about to bind it: the
    # group waits for that extension and binds the new token (a stale one would touch no
    # row and report a lease lost that was never lost)
    async def go():
        qt = await make_queue(engine, "lease")
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            t, idc = qt.q(qt.table), qt.col("id")
            async with (
                await runtime.connect(qt.url) as a,
                await runtime.connect(qt.url) as b,
                await runtime.connect(qt.url) as c,
            ):
                d1, d2 = await form.claim(a, 2, None)
                first = d1.token
                await c.begin()  # holds d1's row, so the extension waits in flight
                await c.fetchall(
                    f"SELECT {idc} FROM {t} WHERE {idc} = {qt.p('id')} FOR UPDATE",
                    {"id": d1.message.id},
                )
                extending = asyncio.create_task(form.extend(b, d1))
                await asyncio.sleep(0.3)
                assert not extending.done() and d1.lock.locked()
                items = [(d, decide(qt.queue, d, runtime.ack())) for d in (d1, d2)]
                settling = asyncio.create_task(form.settle_group(a, items))
                await asyncio.sleep(0.3)
                # still running: it waits for the extension (with the wait removed, its
                # statement would block on the same row lock, so this alone cannot tell;
                # the stale token it would then bind fails the last assertion)
                assert not settling.done()
                await c.commit()
                assert await extending is True and d1.token != first
                assert await settling == [None, None]
            assert all(r["processed_at"] for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())


def test_a_consumer_stopped_mid_batch_settles_in_flight_and_gives_back_the_rest(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue(*[{"n": i} for i in range(5)])
            consumer: runtime.Consumer

            async def handle(message, ctx):
                consumer.stop()  # stop while the first delivery is in flight
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=5)
            counts = await asyncio.wait_for(consumer.run(), 20)
            assert counts["ack"] == 1 and counts["released"] == 4
            rows = await qt.rows()
            assert sum(r["processed_at"] is not None for r in rows) == 1
            assert all(r["locked_until"] is None for r in rows)  # released at once
            assert await runtime.Consumer(qt.url, qt.queue, handle).drain() == {"ack": 4}
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("outcome", ["ack", "retry", "drop"])
def test_transactional_writes_commit_with_an_ack_only(engine, form, outcome):
    async def go():
        qt = await make_queue(engine, form)
        side = f"{qt.table}_side"
        qt.tables.append(side)
        await qt.sql(f"CREATE TABLE {qt.q(side)} (msg_id INTEGER NOT NULL)")
        try:
            (mid,) = await qt.enqueue({"n": 1})
            insert = f"INSERT INTO {qt.q(side)} (msg_id) VALUES ({qt.p('m')})"

            async def handle(message, ctx):
                await ctx.db.execute(insert, {"m": message.id})
                return getattr(runtime, outcome)() if ctx.attempt == 1 else runtime.ack()

            counts = await runtime.Consumer(
                qt.url,
                qt.queue,
                handle,
                transactional=True,
                concurrency=1,
                retry_policy=runtime.Immediate(),
            ).drain()
            written = await qt.sql(f"SELECT msg_id FROM {qt.q(side)}")
            # only the acked delivery's write is kept: one row per acked message
            assert written == ([] if outcome == "drop" else [{"msg_id": mid}])
            assert counts[outcome] == 1
        finally:
            await qt.drop()

    run(go())


def test_transactional_ack_rolls_back_the_handlers_writes_on_lease_lost(engine):
    if engine.name == "sqlite":
        pytest.skip(
            "SQLite: the handler's open write transaction holds the database's only "
            "write lock, so no other claim can take the row while it runs"
        )

    async def go():
        qt = await make_queue(engine, "lease")
        side = f"{qt.table}_side"
        qt.tables.append(side)
        await qt.sql(f"CREATE TABLE {qt.q(side)} (msg_id INTEGER NOT NULL)")
        form = form_for(qt.queue, transactional=True)
        try:
            await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as db:
                (d,) = await form.claim(db, 1, None)
                await form.begin_handler(db, d)
                await db.execute(
                    f"INSERT INTO {qt.q(side)} (msg_id) VALUES ({qt.p('m')})", {"m": d.message.id}
                )
                await qt.expire_leases()
                async with await runtime.connect(qt.url) as other:
                    await form_for(qt.queue).claim(other, 1, None)  # another claim takes it
                with pytest.raises(runtime.LeaseLost):
                    await form.settle(db, d, decide(qt.queue, d, runtime.ack()))
            assert await qt.sql(f"SELECT msg_id FROM {qt.q(side)}") == []
        finally:
            await qt.drop()

    run(go())


def test_a_row_lock_batch_settled_in_two_groups_commits_both_and_a_rollback_neither(engine):
    # a group's last statement waits for the batch's COMMIT and goes with it: a second
    # group in the same batch writes the first's before its own, a rollback drops it, and
    # the next batch on the connection never runs it
    async def go():
        qt = await make_queue(engine, "row_lock")
        form = form_for(qt.queue)
        try:
            a, b, c = (int(i) for i in await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3}))
            async with await runtime.connect(qt.url) as db:
                batch = await form.claim(db, 2, None)
                assert [d.message.id for d in batch] == [a, b]
                retried = [(batch[0], decide(qt.queue, batch[0], runtime.retry("x")))]
                await form.settle_group(db, retried)
                await form.abort_batch(db)  # rolled back: nothing of it stands
                assert [r["processed_at"] for r in await qt.rows()] == [None, None, None]

                batch = await form.claim(db, 3, None)
                assert [d.message.id for d in batch] == [a, b, c]
                first, second, _third = batch
                await form.settle_group(db, [(first, decide(qt.queue, first, runtime.ack()))])
                await form.settle_group(
                    db, [(second, decide(qt.queue, second, runtime.retry("again")))]
                )
                await form.end_batch(db)  # third never settled: it returns
                assert not db.in_transaction
            rows = {r["id"]: r for r in await qt.rows()}
            assert rows[a]["processed_at"] is not None and rows[a]["attempt"] == 1
            assert rows[b]["processed_at"] is None and rows[b]["attempt"] == 2  # retried
            assert rows[c]["processed_at"] is None and rows[c]["attempt"] == 1  # as it was
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("dead", [None, "table"])
def test_a_row_lock_worker_that_claims_again_claims_in_the_transaction_its_commit_opened(
    engine, dead
):
    # end_batch(again=True): the batch commits (others see it) and, where the driver sends
    # COMMIT and BEGIN in one trip (PostgreSQL), the next claim runs in the transaction
    # that opened; a claim that finds nothing ends it, so a worker never idles inside one.
    # A claim that counts first (max_attempts with a dead letter) commits that count on its
    # own: no early transaction then
    async def go():
        qt = await make_queue(engine, "row_lock", dead=dead)
        form = form_for(qt.queue)
        assert (form.steps.take is None) == (dead is None)
        try:
            a, b = (int(i) for i in await qt.enqueue({"n": 1}, {"n": 2}))
            async with await runtime.connect(qt.url) as db:
                chained = db.chains_transactions and form.steps.take is None
                for mid in (a, b):
                    (d,) = await form.claim(db, 1, None)
                    assert d.message.id == mid and d.attempt == 1
                    await form.settle_group(db, [(d, decide(qt.queue, d, runtime.ack()))])
                    await form.end_batch(db, again=True)
                    assert db.in_transaction is chained
                    done = {r["id"]: r["processed_at"] is not None for r in await qt.rows()}
                    assert done[mid]  # committed: seen from another connection
                assert await form.claim(db, 1, None) == []
                assert not db.in_transaction
            assert all(r["processed_at"] is not None for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())


def test_advisory_keys_of_two_tables_never_collide(engine):
    async def go():
        a = await make_queue(engine, "advisory")
        b = await make_queue(engine, "advisory")
        try:
            await a.enqueue({"n": 1})
            await b.enqueue({"n": 1})
            fa, fb = form_for(a.queue, keyspace=a.url), form_for(b.queue, keyspace=b.url)
            async with await runtime.connect(a.url) as c1, await runtime.connect(a.url) as c2:
                (ta,) = await fa.claim(c1, 1, None)
                (tb,) = await fb.claim(c2, 1, None)  # both keys held at once
                assert ta.message.id == tb.message.id  # the same id in both tables
                # while held, a second consumer of table a cannot take the same row
                async with await runtime.connect(a.url) as c3:
                    other = await fa.claim(c3, 1, None)
                    assert other == [] and other.contended  # ready, but its key is held
                await fa.settle(c1, ta, decide(a.queue, ta, runtime.ack()))
                await fb.settle(c2, tb, decide(b.queue, tb, runtime.ack()))
            assert await a.rows() == [] or all(r["processed_at"] for r in await a.rows())
        finally:
            await a.drop()
            await b.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("mariadb", "sqlite"), indirect=True)
def test_a_drain_worker_whose_held_rows_were_settled_meanwhile_claims_again(engine):
    # the claim holds a ready row's key; before its take, another worker's settlement of
    # that row commits (and its key is released): the take finds nothing. The queue moved
    # on, so the worker claims again at once; taken for "nothing claimable", a drain's
    # worker stopped there with rows still ready.
    async def go():
        qt = await make_queue(engine, "advisory")
        try:
            first, *rest = [int(i) for i in await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})]
            handled: list[int] = []

            async def handle(message, ctx):
                handled.append(message.id)
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=1)
            form = consumer.form
            take, raced = form._take, []

            async def settled_meanwhile(conn, held, group):
                if not raced:  # the first take: the row was settled since the listing
                    raced.append(list(held))
                    await qt.sql(
                        f"DELETE FROM {qt.q(qt.table)} WHERE {qt.col('id')} = {qt.p('id')}",
                        {"id": first},
                    )
                return await take(conn, held, group)

            form._take = settled_meanwhile
            counts = await consumer.drain()
            assert raced == [[first]]
            assert sorted(handled) == rest and counts["ack"] == 2
            assert all(r["processed_at"] is not None for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("mariadb"), indirect=True)
@pytest.mark.parametrize("form_name", ["row_lock", "lease"])
def test_a_claim_that_lists_ready_rows_others_lock_is_contended_not_empty(engine, form_name):
    # MariaDB's row-lock and lease claims list ready rows, then lock them skipping locked
    # ones: when another transaction locks every listed row in between, the claim is empty
    # but "contended" (the rows are there, held for now: a short pause, then claim again),
    # not "nothing claimable", which ends a drain's worker while rows are still ready.
    async def go():
        qt = await make_queue(engine, form_name)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as holder, await runtime.connect(qt.url) as db:
                await holder.begin()
                await holder.fetchall(f"SELECT {qt.col('id')} FROM {qt.q(qt.table)} FOR UPDATE")
                batch = await form_for(qt.queue).claim(db, 2, None)
                assert batch == [] and batch.contended
                assert not db.in_transaction  # row lock: its empty batch rolled back
                await holder.rollback()
                assert len(await form_for(qt.queue).claim(db, 2, None)) == 2
                await db.rollback()
                await qt.sql(f"DELETE FROM {qt.q(qt.table)}")
                empty = await form_for(qt.queue).claim(db, 2, None)
                assert empty == [] and not empty.contended  # nothing ready at all
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
def test_a_claim_that_takes_and_finds_its_held_rows_settled_is_raced_not_empty(engine):
    # PostgreSQL's claim takes in the statement that holds the keys: a kept key whose row
    # was settled since the listing comes back held and not taken. A batch of nothing but
    # those is "raced" (claim again at once), not "nothing claimable", and its keys go.
    async def go():
        qt = await make_queue(engine, "advisory")
        form = form_for(qt.queue, keyspace=qt.url)
        try:
            (mid,) = await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as db:
                names, rows = await form._listing(db, 1, None)
                (row,) = rows
                assert row[names.index("held")] and row[names.index("taken")]
                gone = list(row)
                gone[names.index("taken")] = 0  # as if settled between listing and take
                batch = await form._batch_of(db, (names, [tuple(gone)]))
                assert batch == [] and batch.raced and not batch.contended
                async with await runtime.connect(qt.url) as other:  # its key was released
                    (d,) = await form_for(qt.queue, keyspace=qt.url).claim(other, 1, None)
                    assert d.message.id == mid
        finally:
            await qt.drop()

    run(go())


def test_advisory_failed_statement_still_unlocks_and_the_row_returns(engine):
    statements = {"ack": "UPDATE {t} SET payload = NULL WHERE id = :id"}  # violates NOT NULL

    async def go():
        qt = await make_queue(engine, "advisory", statements=statements)
        form = form_for(qt.queue, keyspace=qt.url)
        try:
            await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as db:
                (d,) = await form.claim(db, 1, None)
                with pytest.raises(runtime.DatabaseError):
                    await form.settle(db, d, decide(qt.queue, d, runtime.ack()))
            async with await runtime.connect(qt.url) as other:
                (again,) = await form.claim(other, 1, None)
                assert again.attempt == 2  # unlocked; the row as it was
                assert again.message.payload == {"n": 1}
                await form.settle(other, again, decide(qt.queue, again, runtime.retry()))
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_two_consumers_never_hold_the_same_row(engine, form):
    async def go():
        qt = await make_queue(engine, form)
        try:
            async with await runtime.connect(qt.url) as db:
                await qt.queue.enqueue_many(db, [{"n": i} for i in range(60)])
            held: set[int] = set()
            handled: list[int] = []

            async def handle(message, ctx):
                assert message.id not in held, "two deliveries of one row at once"
                held.add(message.id)
                await asyncio.sleep(0.001)
                held.discard(message.id)
                handled.append(message.id)
                return runtime.ack()

            c1 = runtime.Consumer(qt.url, qt.queue, handle, concurrency=2, batch=5)
            c2 = runtime.Consumer(qt.url, qt.queue, handle, concurrency=2, batch=5)
            r1, r2 = await asyncio.gather(c1.drain(), c2.drain())
            assert sorted(handled) == sorted(set(handled)) and len(handled) == 60
            assert r1.get("ack", 0) + r2.get("ack", 0) == 60
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", SERVERS)
@pytest.mark.parametrize("form", FORMS)
def test_a_connection_killed_mid_delivery_loses_nothing(engine_name, form, tmp_path, caplog):
    from support.engines import engine_for

    engine = engine_for(engine_name, tmp_path)
    kill = {
        "postgres": ("SELECT pg_backend_pid() AS pid", "SELECT pg_terminate_backend(%(pid)s)"),
        "mariadb": ("SELECT CONNECTION_ID() AS pid", "KILL %(pid)s"),
    }[engine_name]

    async def go():
        qt = await make_queue(engine, form)
        try:
            (_mid,) = await qt.enqueue({"n": 1})
            calls = []

            async def handle(message, ctx):
                calls.append(ctx.attempt)
                if len(calls) == 1:  # kill this delivery's own connection under it
                    pid = (await ctx.db.fetchone(kill[0], {}))["pid"]
                    async with await runtime.connect(qt.url) as admin:
                        await admin.execute(kill[1], {"pid": pid})
                return runtime.ack()

            with caplog.at_level(logging.WARNING, logger="runtime"):
                counts = await runtime.Consumer(
                    qt.url, qt.queue, handle, transactional=True, concurrency=1
                ).drain()
            assert counts["ack"] == 1 and len(calls) == 2
            (row,) = await qt.rows()
            assert row["processed_at"] is not None
            assert any("connection lost" in r.getMessage() for r in caplog.records)
        finally:
            await qt.drop()

    run(go())


def test_enqueue_joins_the_callers_transaction_with_delay_and_group(engine):
    async def go():
        qt = await make_queue(engine, "lease", dead="group", max_attempts=3)
        try:
            async with await runtime.connect(qt.url) as db:
                await db.begin()
                await qt.queue.enqueue(db, {"n": "rolled back"})
                await db.rollback()
                await db.begin()
                await qt.queue.enqueue(db, {"n": "later"}, delay=3600)
                await qt.queue.enqueue_many(db, [{"n": 1}, {"n": 2}], group="other")
                await db.commit()
            rows = await qt.rows()
            assert [r["payload"]["n"] for r in rows] == ["later", 1, 2]
            assert rows[0]["retry_after_future"] == 1 and rows[0]["group"] == "q"
            assert [r["group"] for r in rows[1:]] == ["other", "other"]
            got = []

            async def handle(message, ctx):
                got.append((message.payload["n"], message.group))
                return runtime.ack()

            await runtime.Consumer(qt.url, qt.queue, handle).drain()
            assert got == []  # the default group's only message is not due yet
            await runtime.Consumer(qt.url, qt.queue, handle, group="other").drain()
            assert sorted(got) == [(1, "other"), (2, "other")]
        finally:
            await qt.drop()

    run(go())


def test_a_file_for_another_dialect_is_refused(engine, tmp_path):
    other = "sqlite" if engine.dialect_name != "sqlite" else "postgres"
    path = f"generated_examples/sql/{other}/orders.sql"

    async def go():
        queue = runtime.load(path)
        async with await runtime.connect(engine.url) as db:
            with pytest.raises(runtime.DialectMismatch, match="rendered for"):
                await queue.enqueue(db, {"n": 1})
        with pytest.raises(runtime.DialectMismatch):
            await runtime.Consumer(engine.url, queue, None).drain()  # type: ignore[arg-type]

    run(go())


def test_a_hand_edited_or_missing_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "orders.sql"
    bad.write_text("SELECT 1;\n")
    with pytest.raises(runtime.RenderedFileError, match="DO NOT EDIT"):
        runtime.load(bad)
    with pytest.raises(runtime.RenderedFileError, match="qgen render"):
        runtime.load(tmp_path / "missing.sql")


@pytest.mark.parametrize("form", FORMS)
def test_a_delivery_that_outlives_stop_timeout_is_dropped_unsettled(engine, form):
    async def go():
        qt = await make_queue(engine, form)
        try:
            (mid,) = await qt.enqueue({"n": 1})
            started = asyncio.Event()

            async def hang(message, ctx):
                started.set()
                await asyncio.sleep(60)
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, hang, concurrency=1, stop_timeout=0.2)
            task = asyncio.create_task(consumer.run())
            await asyncio.wait_for(started.wait(), 10)
            consumer.stop()
            await asyncio.wait_for(task, 10)
            (row,) = await qt.rows()
            # dropped unsettled: rolled back, released at once, or unlocked with its connection
            assert row["processed_at"] is None and row.get("locked_until") is None
            seen = []

            async def ack(message, ctx):
                seen.append((message.id, ctx.attempt))
                return runtime.ack()

            assert await runtime.Consumer(qt.url, qt.queue, ack).drain() == {"ack": 1}
            # row lock returned the row as it was; lease and advisory counted the first claim
            assert seen == [(mid, 1 if form == "row_lock" else 2)]
        finally:
            await qt.drop()

    run(go())


def test_advisory_claim_skips_held_keys_and_unlocks_what_it_does_not_keep(engine):
    async def go():
        qt = await make_queue(engine, "advisory")
        form = form_for(qt.queue, keyspace=qt.url, spread=3)
        try:
            for n in range(6):
                await qt.enqueue({"n": n})
            async with (
                await runtime.connect(qt.url) as a,
                await runtime.connect(qt.url) as b,
                await runtime.connect(qt.url) as c,
            ):
                first = await form.claim(a, 2, None)  # looks at 6 rows, keeps the first 2
                second = await form.claim(b, 2, None)  # the next 2 free ones
                assert [d.message.payload["n"] for d in first] == [0, 1]
                assert [d.message.payload["n"] for d in second] == [2, 3]
                for d in first:
                    await form.settle(a, d, decide(qt.queue, d, runtime.ack()))
                # the keys a's claim did not keep were unlocked at once: c takes rows 4 and 5
                third = await form.claim(c, 5, None)
                assert [d.message.payload["n"] for d in third] == [4, 5]
                for d in [*second, *third]:
                    await form.settle(
                        b if d in second else c, d, decide(qt.queue, d, runtime.ack())
                    )
            assert await qt.rows() == [] or all(r["processed_at"] for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())


def test_advisory_take_skips_a_row_settled_since_the_claim_listed_it(engine):
    # the claim reads its candidates, then takes their keys: a row another worker settled in
    # between has its key free again, and only the take (which re-reads it) sees it is gone
    async def go():
        qt = await make_queue(engine, "advisory")
        form = form_for(qt.queue, keyspace=qt.url)
        try:
            await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as a:
                (d,) = await form.claim(a, 1, None)
                await form.settle(a, d, decide(qt.queue, d, runtime.ack()))
                if qt.queue.steps.take is not None:  # PostgreSQL's claim takes (test below)
                    # the key is free and the row finished: a take of it finds nothing
                    assert await form._take(a, [d.message.id], None) == []
                assert await form.claim(a, 1, None) == []
            assert await qt.rows() == [] or all(r["processed_at"] for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
@pytest.mark.parametrize("change", ["ack", "retry_after"])
def test_advisory_claim_that_takes_skips_a_row_settled_after_its_snapshot(engine, change):
    # PostgreSQL's claim lists its candidates, takes their keys and counts them in one
    # statement: a row another session settled after the statement's snapshot was taken
    # (here: while the claim waited for that session's row lock) is re-read as it is now,
    # skipped, and its key unlocked; the other rows are delivered and counted
    async def go():
        qt = await make_queue(engine, "advisory")
        form = form_for(qt.queue, keyspace=qt.url)
        assert qt.queue.steps.take is None, "the PostgreSQL claim takes in one statement"
        t, idc = qt.q(qt.table), qt.col("id")
        settle = {
            "ack": f"DELETE FROM {t} WHERE {idc} = %(id)s",
            "retry_after": f"UPDATE {t} SET {qt.col('retry_after')} = now() + interval '1 hour' "
            f"WHERE {idc} = %(id)s",
        }[change]
        try:
            ids = [(await qt.enqueue({"n": n}))[0] for n in range(3)]
            async with (
                await runtime.connect(qt.url) as a,
                await runtime.connect(qt.url) as b,
            ):
                await b.begin()
                await b.execute(settle, {"id": ids[1]})  # holds the row until commit
                claiming = asyncio.create_task(form.claim(a, 3, None))
                await asyncio.sleep(0.5)
                assert not claiming.done()  # the claim's count waits for b's row lock
                await b.commit()
                batch = await claiming
                assert [d.message.id for d in batch] == [ids[0], ids[2]]
                assert [d.attempt for d in batch] == [1, 1]
                assert form._held[a] == {ids[0], ids[2]}
                key = f"hashtextextended('qgen:{qt.table}:' || CAST(%(id)s AS TEXT), 0)"
                held = await b.fetchall(
                    f"SELECT pg_try_advisory_lock({key}) AS free, pg_advisory_unlock({key})",
                    {"id": ids[1]},
                )
                assert held[0]["free"], "the skipped row's key was unlocked"
                for d in batch:
                    await form.settle(a, d, decide(qt.queue, d, runtime.ack()))
            rows = {r["id"]: r for r in await qt.rows()}
            if change == "retry_after":  # not taken: its attempt was not counted
                assert rows[ids[1]]["attempt"] == 1 and rows[ids[1]]["processed_at"] is None
            else:
                assert ids[1] not in rows
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
def test_advisory_keys_of_finished_rows_go_with_the_next_claim_a_retry_at_once(engine):
    # PostgreSQL: the claim releases the keys of the rows its connection's last batch
    # finished (committed before it ran), so a batch costs no unlock statement; a row that
    # stays ready (a retry) is unlocked at once, for any worker to claim again
    async def go():
        qt = await make_queue(engine, "advisory")
        form = form_for(qt.queue, keyspace=qt.url)
        try:
            ids = [(await qt.enqueue({"n": n}))[0] for n in range(3)]
            async with (
                await runtime.connect(qt.url) as a,
                await runtime.connect(qt.url) as b,
            ):

                async def keys_a() -> int:
                    rows = await b.fetchall(
                        "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' "
                        "AND pid = (SELECT pid FROM pg_stat_activity WHERE pid <> "
                        "pg_backend_pid() AND backend_type = 'client backend' AND "
                        "application_name = 'qgen_test_a')"
                    )
                    return int(rows[0]["n"])

                await a.execute("SET application_name = 'qgen_test_a'")
                batch = await form.claim(a, 3, None)
                assert [d.message.id for d in batch] == ids and await keys_a() == 3
                acked, retried, dropped = batch
                items = [
                    (acked, decide(qt.queue, acked, runtime.ack())),
                    (retried, decide(qt.queue, retried, runtime.retry())),
                    (dropped, decide(qt.queue, dropped, runtime.drop())),
                ]
                assert await form.settle_group(a, items) == [None, None, None]
                assert await keys_a() == 2  # the retried row's key went at once
                (again,) = await form.claim(b, 3, None)  # another worker takes the retry
                assert again.message.id == retried.message.id and again.attempt == 2
                await form.settle(b, again, decide(qt.queue, again, runtime.ack()))
                assert await form.claim(a, 3, None) == []  # it releases the other two first
                assert await keys_a() == 0
            assert all(r["processed_at"] for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_failing_settlement_returns_the_rows_and_the_consumer_goes_on(engine, form, caplog):
    # an ack the engine refuses (NOT NULL), while retry works: the consumer survives the
    # failed batches, the message is never lost, and drain gives up only after several
    guard = " AND locked_until = :token" if form == "lease" else ""
    statements = {"ack": f"UPDATE {{t}} SET payload = NULL WHERE id = :id{guard}"}

    async def go():
        qt = await make_queue(engine, form, statements=statements)
        try:
            (mid,) = await qt.enqueue({"n": 1})

            async def ack(message, ctx):
                return runtime.ack()

            with caplog.at_level(logging.ERROR, logger="runtime"), pytest.raises(Exception):  # noqa: B017
                await runtime.Consumer(
                    qt.url, qt.queue, ack, concurrency=1, poll_interval=0.01
                ).drain()
            assert sum("a batch failed" in r.getMessage() for r in caplog.records) == 5
            (row,) = await qt.rows()
            assert row["payload"] == {"n": 1} and row["processed_at"] is None
            assert row.get("locked_until") is None  # released, not left leased

            async def drop(message, ctx):
                assert message.id == mid
                return runtime.drop()

            counts = await runtime.Consumer(qt.url, qt.queue, drop, concurrency=1).drain()
            assert counts == {"drop": 1}
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", ["lease", "advisory"])
def test_a_quick_ack_is_written_while_the_next_handler_is_still_running(engine, form):
    # settlements of quick handlers wait to commit together, but never past settle_window:
    # a slow handler that follows does not hold the ack before it back
    async def go():
        qt = await make_queue(engine, form)
        try:
            first, _second = await qt.enqueue({"n": 0}, {"n": 1})
            seen: list[bool] = []

            async def handle(message, ctx):
                if message.payload["n"] == 1:
                    await asyncio.sleep(0.5)
                    rows = {r["id"]: r for r in await qt.rows()}
                    seen.append(first not in rows or rows[first]["processed_at"] is not None)
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=2)
            assert await consumer.drain() == {"ack": 2}
            assert seen == [True]
        finally:
            await qt.drop()

    run(go())


def test_a_row_lock_settlement_never_waits_for_another_consumers_open_batch(engine):
    # MariaDB once left a claim's locking read holding the index entries it skipped, so a
    # settlement of one of those rows by the batch that held it waited for the other batch
    if engine.name == "sqlite":
        pytest.skip("SQLite: BEGIN IMMEDIATE lets one batch be open at a time")

    async def go():
        qt = await make_queue(engine, "row_lock")
        form = form_for(qt.queue)
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                first = await form.claim(a, 3, None)  # a's batch holds rows 1-3
                await qt.enqueue({"n": 4})
                (fourth,) = await form.claim(b, 1, None)  # b's batch, open, holds row 4
                assert fourth.message.payload == {"n": 4}
                for d in first:  # a settles while b's batch is still open: no lock wait
                    await asyncio.wait_for(
                        form.settle(a, d, decide(qt.queue, d, runtime.ack())), 10
                    )
                await form.end_batch(a)
                await form.settle(b, fourth, decide(qt.queue, fourth, runtime.ack()))
                await form.end_batch(b)
            assert all(r["processed_at"] is not None for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())


def test_each_drain_returns_its_own_counts_outcomes_apart_from_operations(engine) -> None:
    """drain() counts only its own work, and says which counts are outcomes and which are the
    consumer's own (the lease extended while a slow handler ran)."""

    async def go() -> tuple[runtime.Counts, runtime.Counts]:
        qt = await make_queue(engine, "lease", lease_s=0.6)
        try:
            await qt.enqueue({"slow": True}, {"slow": False}, {"slow": False})

            async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
                if message.payload["slow"]:
                    await asyncio.sleep(0.7)  # past its lease: the lease form extends it
                    return runtime.drop()
                return runtime.ack()

            consumer = runtime.Consumer(qt.url, qt.queue, handle, concurrency=1)
            first = await consumer.drain()
            await qt.enqueue({"slow": False})
            return first, await consumer.drain()
        finally:
            await qt.drop()

    first, second = run(go())
    assert first.outcomes == {"ack": 2, "drop": 1}, first
    assert first.operations.get("extended", 0) >= 1 and "ack" not in first.operations
    assert second.outcomes == {"ack": 1} and second == {"ack": 1}


@contextlib.asynccontextmanager
async def _group_with_first_stolen(engine, outcomes):
    """Three rows claimed on one connection; the first one's lease expired (its handler
    stalled past it) and a claim on another connection took the row; then the three settle
    together by the windowed completer, with ``outcomes`` in order. Checks what holds for
    any outcomes (nothing counted before the commit; the first alone lost, its row kept by
    the new holder) and yields the rest to check."""
    qt = await make_queue(engine, "lease")
    form = form_for(qt.queue)
    try:
        await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
        async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
            claimed = await form.claim(a, 3, None)
            first = claimed[0]
            await qt.expire_leases(first.message.id)
            (taken,) = await form.claim(b, 1, None)
            assert taken.message.id == first.message.id
            counts = runtime.Counts()
            held = set(claimed)
            completer = WindowedCompleter(form, counts, held, window=60.0)
            for d, outcome in zip(claimed, outcomes, strict=True):

                async def handler(_conn, d, outcome=outcome):
                    return decide(qt.queue, d, outcome)

                await completer.handle(a, d, handler)
            assert counts == {}, "nothing counts as settled before its transaction commits"
            await completer.finish(a)
            assert not held and first.lost and not any(d.lost for d in claimed[1:])
            rows = {r["id"]: r for r in await qt.rows()}
            stolen = rows[first.message.id]
            assert stolen["processed_at"] is None and stolen["locked_until_future"] == 1
            assert taken.attempt == 2 and taken.token != first.token
            yield SimpleNamespace(
                qt=qt, form=form, b=b, claimed=claimed, taken=taken, counts=counts, rows=rows
            )
    finally:
        await qt.drop()


@pytest.mark.parametrize("outcome", ["ack", "retry", "drop"])
def test_a_lost_lease_in_a_group_of_settlements_is_lost_for_that_delivery_alone(engine, outcome):
    # quick handlers' settlements commit together (the windowed completer); one of them lost
    # its lease to another claim: it alone counts lease_lost and its row stays with the new
    # holder, and the others settle as usual
    async def go():
        outcomes = [getattr(runtime, outcome)() for _ in range(3)]
        async with _group_with_first_stolen(engine, outcomes) as g:
            assert g.counts == {outcome: 2, "lease_lost": 1}
            for d in g.claimed[1:]:
                row = g.rows.get(d.message.id)
                assert row is not None and row["locked_until"] is None
                assert (row["processed_at"] is not None) == (outcome != "retry")
            # the other claim still holds its row and settles it
            await g.form.settle(g.b, g.taken, decide(g.qt.queue, g.taken, runtime.ack()))
            assert (await g.qt.rows())[0]["processed_at"] is not None

    run(go())


def test_a_lost_lease_in_a_group_of_several_outcomes_is_lost_for_that_delivery_alone(engine):
    # a group whose outcomes each have a _many statement (two retries and an ack) settles in
    # one transaction, as one script; the first retried row lost its lease to another claim:
    # it alone counts lease_lost, the other retry and the ack settle
    async def go():
        outcomes = [runtime.retry(), runtime.retry(), runtime.ack()]
        async with _group_with_first_stolen(engine, outcomes) as g:
            assert g.counts == {"ack": 1, "retry": 1, "lease_lost": 1}
            retried, acked = (g.rows[d.message.id] for d in g.claimed[1:])
            assert retried["processed_at"] is None and retried["locked_until"] is None
            assert retried["attempt"] == 2, "the retry keeps its one counted claim"
            assert acked["processed_at"] is not None and acked["locked_until"] is None

    run(go())


@pytest.mark.parametrize("alone", ["override", "custom", "dead_letter"])
def test_a_lost_lease_settling_on_its_own_in_a_group_is_lost_for_that_delivery_alone(engine, alone):
    # a settlement with no <outcome>_many statement (a declared override, a custom event, a
    # move into the dead-letter table) runs on its own inside the group's transaction; when
    # its lease was lost (it expired and another claim took the row) its statement touches no
    # row: that delivery alone is lease_lost, the new holder's row keeps its lease, and the
    # others settle and count
    statements = {
        "drop": "UPDATE {t} SET attempt = 42, processed_at = {now}, locked_until = NULL "
        "WHERE id = :id AND locked_until = :token"
    }
    custom = {"bump": "UPDATE {t} SET attempt = 7 WHERE id = :id AND locked_until = :token"}

    async def go():
        qt = await make_queue(
            engine, "lease", statements=statements, custom=custom, dead="table", max_attempts=3
        )
        form = form_for(qt.queue)
        assert not qt.queue.rendered.get("drop_many")
        assert not qt.queue.rendered.get("dead_letter_many")
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                first, second, third = await form.claim(a, 3, None)
                await qt.expire_leases(first.message.id)  # its handler stalled past the lease
                (taken,) = await form.claim(b, 1, None)  # the other claim takes the first row
                assert taken.message.id == first.message.id
                before = {r["id"]: r for r in await qt.rows()}[first.message.id]

                def decision(d):
                    if d is not first:
                        return decide(qt.queue, d, runtime.ack())
                    if alone == "override":
                        return decide(qt.queue, d, runtime.drop())
                    if alone == "custom":
                        return decide(qt.queue, d, runtime.custom("bump"))
                    return dead_letter_now(qt.queue, d, "cannot be handled")

                counts = runtime.Counts()
                held = {first, second, third}
                completer = WindowedCompleter(form, counts, held, window=60.0)
                for d in (first, second, third):

                    async def handler(_conn, d):
                        return decision(d)

                    await completer.handle(a, d, handler)
                await completer.finish(a)
                assert counts == {"ack": 2, "lease_lost": 1}, counts
                assert not held and first.lost and not second.lost and not third.lost
                rows = {r["id"]: r for r in await qt.rows()}
                # the new holder's row as its claim left it, still leased
                assert rows[first.message.id] == before and before["locked_until_future"] == 1
                assert await qt.dead_rows() == []
                for d in (second, third):
                    assert rows[d.message.id]["processed_at"] is not None
                # the other claim still holds its row and settles it
                await form.settle(b, taken, decide(qt.queue, taken, runtime.ack()))
                assert {r["id"]: r for r in await qt.rows()}[taken.message.id]["processed_at"]
        finally:
            await qt.drop()

    run(go())


def test_a_group_of_settlements_keeps_overrides_custom_events_and_each_rows_delay(engine):
    # one statement per outcome where the file has it; a declared override (drop here) and a
    # custom event still run, one delivery at a time; each retry_after keeps its own delay
    statements = {
        "drop": "UPDATE {t} SET attempt = 42, processed_at = {now}, locked_until = NULL "
        "WHERE id = :id AND locked_until = :token"
    }
    custom = {"bump": "UPDATE {t} SET attempt = 7 WHERE id = :id AND locked_until = :token"}

    async def go():
        qt = await make_queue(engine, "lease", statements=statements, custom=custom)
        form = form_for(qt.queue)
        assert qt.queue.rendered.get("ack_many") and not qt.queue.rendered.get("drop_many")
        try:
            await qt.enqueue(*({"n": n} for n in range(6)))
            async with await runtime.connect(qt.url) as a:
                ds = await form.claim(a, 6, None)
                outcomes = [
                    runtime.ack(),
                    runtime.drop(),
                    runtime.retry_after(0),
                    runtime.retry_after(3600),
                    runtime.custom("bump"),
                    runtime.ack(),
                ]
                items = [(d, decide(qt.queue, d, o)) for d, o in zip(ds, outcomes, strict=True)]
                assert await form.settle_group(a, items) == [None] * 6
            rows = await qt.rows()
            acked, dropped, due, later, bumped, acked2 = rows
            for r in (acked, acked2):
                assert r["processed_at"] is not None and r["locked_until"] is None
            assert dropped["attempt"] == 42 and dropped["processed_at"] is not None
            assert due["retry_after_future"] == 0 and due["locked_until"] is None
            assert later["retry_after_future"] == 1 and later["locked_until"] is None
            assert later["processed_at"] is None
            assert bumped["attempt"] == 7 and bumped["locked_until"] is not None
        finally:
            await qt.drop()

    run(go())


def test_an_advisory_group_settles_its_rows_by_outcome_and_no_other(engine):
    # one statement per outcome for the rows whose keys the worker holds; a row it does not
    # hold (another claim's, or unclaimed) is never touched
    async def go():
        qt = await make_queue(engine, "advisory")
        form = form_for(qt.queue)
        try:
            await qt.enqueue(*({"n": n} for n in range(5)))
            async with await runtime.connect(qt.url) as a:
                ds = await form.claim(a, 4, None)
                outcomes = [
                    runtime.ack(),
                    runtime.retry_after(3600),
                    runtime.ack(),
                    runtime.retry(),
                ]
                items = [(d, decide(qt.queue, d, o)) for d, o in zip(ds, outcomes, strict=True)]
                assert await form.settle_group(a, items) == [None] * 4
            acked, later, acked2, retried, free = await qt.rows()
            for r in (acked, acked2):
                assert r["processed_at"] is not None
            assert later["retry_after_future"] == 1 and later["processed_at"] is None
            for r in (retried, free):
                assert r["processed_at"] is None and r["retry_after"] is None
            assert free["attempt"] == 1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("transactional", [False, True], ids=["grouped", "transactional"])
def test_a_row_lock_batch_keeps_overrides_with_comments_custom_events_and_the_cap(
    engine, transactional
):
    """A row-lock batch settles by outcome at its end: acks in one statement, while a declared
    override (its SQL carrying a comment), a custom event and a move to the dead letter each
    run their own statement, in the same transaction."""
    statements = {
        "drop": "-- poison: keep the row, marked\n"
        "UPDATE {t} SET attempt = 42, processed_at = {now} WHERE id = :id"
    }
    custom = {
        "bump": "UPDATE {t} SET attempt = 7, grp = 'parked' /* out of the queue */ WHERE id = :id"
    }
    outcomes = {
        0: runtime.ack(),
        1: runtime.drop(),
        2: runtime.custom("bump"),
        3: runtime.retry(),  # back at once; delivery 2 of max_attempts 2: to the dead letter
        4: runtime.ack(),
        5: runtime.retry_after(3600),
    }

    async def go():
        qt = await make_queue(
            engine, "row_lock", dead="group", max_attempts=2, statements=statements, custom=custom
        )
        try:
            await qt.enqueue(*({"n": n} for n in outcomes))

            async def handle(message, ctx):
                return outcomes[message.payload["n"]]

            consumer = runtime.Consumer(
                qt.url,
                qt.queue,
                handle,
                batch=6,
                concurrency=1,
                transactional=transactional,
                retry_policy=runtime.Immediate(),
            )
            counts = await asyncio.wait_for(consumer.drain(), 60)  # a row left ready: no end
            assert counts.outcomes == {
                "ack": 2,
                "drop": 1,
                "custom.bump": 1,
                "retry": 1,
                "dead_letter": 1,
                "retry_after": 1,
            }
            rows = {r["payload"]["n"]: r for r in await qt.rows()}
            for n in (0, 4):
                assert rows[n]["processed_at"] is not None
            assert rows[1]["attempt"] == 42 and rows[1]["processed_at"] is not None
            assert rows[2]["attempt"] == 7 and rows[2]["processed_at"] is None
            assert rows[2]["group"] == "parked"
            assert rows[5]["retry_after_future"] == 1 and rows[5]["processed_at"] is None
            assert [r["payload"] for r in await qt.dead_rows()] == [{"n": 3}]
        finally:
            await qt.drop()

    run(go())
