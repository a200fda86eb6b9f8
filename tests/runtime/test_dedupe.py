"""dedupe_key: one pending message per key, on every engine and form, under concurrent enqueuers."""

from __future__ import annotations

import asyncio

import pytest
from support.engines import engine_params, run, unique_table
from support.queues import make_queue
from support.services import sync_connection

import runtime
from runtime.forms import form_for
from runtime.settle import decide

FORMS = ["row_lock", "lease", "advisory"]
COLS = ("attempt", "retry_after", "processed_at", "dedupe_key")


async def _settle_first(qt, outcome):
    form = form_for(qt.queue)
    async with await runtime.connect(qt.url) as db:
        (d,) = await form.claim(db, 1, qt.queue.default_group)
        await form.settle(db, d, decide(qt.queue, d, outcome))
        await form.end_batch(db)


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize(
    "columns,dead",
    [(COLS, "group"), (("attempt", "retry_after", "dedupe_key"), "table")],
    ids=["kept-deadgroup", "deleted-deadtable"],
)
def test_a_pending_key_returns_the_existing_id_until_its_message_finishes(
    engine, form, columns, dead
):
    async def go():
        qt = await make_queue(engine, form, columns=columns, dead=dead, max_attempts=2)
        try:
            async with await runtime.connect(qt.url) as db:
                first = await qt.queue.enqueue(db, {"n": 1}, dedupe_key="k")
                again = await qt.queue.enqueue(db, {"n": 2}, dedupe_key="k")
                other = await qt.queue.enqueue(db, {"n": 3}, dedupe_key="other")
                free = [await qt.queue.enqueue(db, {"n": 4}) for _ in range(2)]
            assert first.duplicate is False and again.duplicate is True
            assert again == first and other != first and other.duplicate is False
            assert len(set(free)) == 2 and not any(f.duplicate for f in free)
            payloads = [r["payload"] for r in await qt.rows()]
            assert payloads == [{"n": 1}, {"n": 3}, {"n": 4}, {"n": 4}]
            # a retry keeps the message pending: the key still holds
            await _settle_first(qt, runtime.retry_after(60))
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.enqueue(db, {"n": 5}, dedupe_key="k") == first
            # finished: the key is free again
            await qt.make_due()
            await _settle_first(qt, runtime.ack())
            async with await runtime.connect(qt.url) as db:
                fresh = await qt.queue.enqueue(db, {"n": 6}, dedupe_key="k")
                assert fresh != first and not fresh.duplicate
                assert (await qt.queue.enqueue(db, {"n": 7}, dedupe_key="k")) == fresh
        finally:
            await qt.drop()

    run(go())


def test_enqueue_many_without_keys_adds_every_message_to_a_dedupe_queue(engine):
    """A queue with a dedupe_key column still takes unkeyed batches: every message is added."""

    async def go():
        qt = await make_queue(engine, "lease", columns=COLS, dead="group", max_attempts=2)
        try:
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.enqueue_many(db, [{"n": i} for i in range(3)]) == 3
                ids = await qt.queue.enqueue_many(db, [{"n": 3}, {"n": 4}], dedupe_keys=["k", "k"])
            assert [r["payload"] for r in await qt.rows()] == [{"n": i} for i in range(4)]
            assert ids[1] == ids[0] and ids[1].duplicate
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("dead", ["group", "table"])
def test_a_dead_lettered_message_frees_its_key_and_redrive_refuses_a_taken_one(engine, dead):
    async def go():
        cols = COLS if dead == "group" else ("attempt", "retry_after", "dedupe_key")
        qt = await make_queue(engine, "lease", columns=cols, dead=dead, max_attempts=1)
        try:
            async with await runtime.connect(qt.url) as db:
                doomed = await qt.queue.enqueue(db, {"n": 1}, dedupe_key="k")
            await _settle_first(qt, runtime.retry())  # at the cap: dead letter
            assert [r["id"] for r in await qt.dead_rows()] == [doomed]
            async with await runtime.connect(qt.url) as db:
                fresh = await qt.queue.enqueue(db, {"n": 2}, dedupe_key="k")
                assert fresh != doomed and not fresh.duplicate
                with pytest.raises(runtime.BrokerError, match=f"{doomed}.*dedupe_key"):
                    await qt.queue.redrive(db, [doomed])
                with pytest.raises(runtime.BrokerError, match="dedupe_key"):
                    await qt.queue.redrive(db)
                assert [r["id"] for r in await qt.dead_rows()] == [doomed]
            await _settle_first(qt, runtime.ack())  # the fresh one finishes
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.redrive(db, [doomed]) == 1
                assert (await qt.queue.enqueue(db, {"n": 3}, dedupe_key="k")).duplicate
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_concurrent_enqueuers_of_one_key_leave_one_pending_row(engine, form):
    async def go():
        qt = await make_queue(engine, form, columns=COLS)
        try:
            conns = [await runtime.connect(qt.url) for _ in range(6)]
            try:
                for round_ in range(3):
                    key = f"k{round_}"
                    ids = await asyncio.gather(
                        *(qt.queue.enqueue(c, {"r": round_}, dedupe_key=key) for c in conns)
                    )
                    assert len(set(ids)) == 1, ids
                    assert sum(not i.duplicate for i in ids) == 1
            finally:
                for c in conns:
                    await c.close()
            assert len(await qt.rows()) == 3
        finally:
            await qt.drop()

    run(go())


def test_enqueue_many_reports_duplicates_and_the_sync_api_dedupes(engine):
    async def go():
        return await make_queue(engine, "lease", columns=COLS)

    qt = run(go())
    try:

        async def many():
            async with await runtime.connect(qt.url) as db:
                return await qt.queue.enqueue_many(
                    db, [{"n": i} for i in range(4)], dedupe_keys=["a", "b", "a", None]
                )

        ids = run(many())
        assert [i.duplicate for i in ids] == [False, False, True, False]
        assert ids[2] == ids[0]
        with sync_connection(qt.engine, "driver") as (conn, commit, _rollback, _execute):
            again = qt.queue.sync.enqueue(conn, {"n": 9}, dedupe_key="b")
            assert again == ids[1] and again.duplicate
            new = qt.queue.sync.enqueue(conn, {"n": 9}, dedupe_key="c")
            commit()
            assert not new.duplicate
        with sync_connection(qt.engine, "sqlalchemy") as (conn, commit, _rollback, _execute):
            (a, c) = qt.queue.sync.enqueue_many(conn, [{}, {}], dedupe_keys=["a", "c"])
            commit()
            assert (a, c) == (ids[0], new) and a.duplicate and c.duplicate
        assert len(run(qt.rows())) == 4
    finally:
        run(qt.drop())


def test_a_dedupe_key_on_a_queue_without_the_column_is_refused(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as db:
                with pytest.raises(runtime.ConfigurationError, match="no dedupe_key column"):
                    await qt.queue.enqueue(db, {}, dedupe_key="k")
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("postgres", "mariadb", "mysql"), indirect=True)
def test_a_duplicate_enqueue_neither_waits_for_nor_disturbs_a_row_lock_claim(engine):
    """The claim holds the pending row locked while its handler runs: a duplicate enqueue
    answers at once (MySQL's ON DUPLICATE KEY UPDATE would wait, then deadlock the ack)."""

    async def go():
        qt = await make_queue(engine, "row_lock", columns=COLS)
        form = form_for(qt.queue)
        try:
            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                first = await qt.queue.enqueue(b, {"n": 1}, dedupe_key="k")
                (d,) = await form.claim(a, 1, None)
                again = await asyncio.wait_for(
                    qt.queue.enqueue(b, {"n": 2}, dedupe_key="k"), timeout=5
                )
                assert again == first and again.duplicate
                await form.settle(a, d, decide(qt.queue, d, runtime.ack()))
                await form.end_batch(a)
                fresh = await qt.queue.enqueue(b, {"n": 3}, dedupe_key="k")
                assert fresh != first and not fresh.duplicate
            rows = await qt.rows()
            assert [r["processed_at"] is not None for r in rows] == [True, False]
        finally:
            await qt.drop()

    run(go())


def test_a_literal_in_ddl_reads_back_as_written(engine):
    """The dead group goes into the unique index's predicate as text: quotes and backslashes
    must mean themselves on every engine."""
    from runtime.contract.dialects import DIALECTS

    text = "it's a \\ dead\\'group"

    async def go():
        async with await runtime.connect(engine.url) as db:
            lit = DIALECTS[engine.dialect_name].quote_text(text)
            return await db.fetchall(f"SELECT {lit} AS v", {})

    assert run(go())[0]["v"] == text


def test_keys_compare_byte_for_byte_on_every_engine(engine):
    """MySQL's default collations would make Key, key, kéy and 'key ' one key: not here."""

    async def go():
        qt = await make_queue(engine, "lease", columns=COLS)
        try:
            keys = ["key", "Key", "kéy", " key", "it's", "a\\b"]
            async with await runtime.connect(qt.url) as db:
                first = [await qt.queue.enqueue(db, {}, dedupe_key=k) for k in keys]
                again = [await qt.queue.enqueue(db, {}, dedupe_key=k) for k in keys]
            assert len(set(first)) == len(keys) and not any(i.duplicate for i in first)
            assert again == first and all(i.duplicate for i in again)
            assert [r["dedupe_key"] for r in await qt.rows()] == keys
            async with await runtime.connect(qt.url) as db:
                for bad in ("key ", "", "k" * 192, 7):
                    with pytest.raises(ValueError, match="dedupe_key must be"):
                        await qt.queue.enqueue(db, {}, dedupe_key=bad)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("variant", ["kept-deadgroup", "deleted-deadtable"])
def test_verify_finds_the_dedupe_index_and_misses_it_when_dropped(engine, variant):
    from runtime.verify import verify

    async def go():
        cols, dead = (
            (COLS, "group") if variant == "kept-deadgroup" else (COLS[:2] + COLS[3:], "table")
        )
        qt = await make_queue(engine, "lease", columns=cols, dead=dead)
        try:
            async with await runtime.connect(qt.url) as db:
                assert [str(f) for f in await verify(db, qt.queue)] == []
                index = qt.q(f"{qt.table}_dedupe")
                on = "" if engine.name in ("sqlite", "postgres") else f" ON {qt.q(qt.table)}"
                await db.execute(f"DROP INDEX {index}{on}")
                (finding,) = await verify(db, qt.queue)
                assert "no unique" in str(finding) and "dedupe_key" in str(finding)
        finally:
            await qt.drop()

    run(go())


# A BEFORE INSERT trigger that skips the row: the enqueue's RETURNING gives no id. (On MySQL and
# MariaDB a trigger can only refuse an insert with an error, and LAST_INSERT_ID always answers.)
_SKIP_INSERTS = {
    "sqlite": [
        "CREATE TRIGGER {name} BEFORE INSERT ON {table} BEGIN SELECT RAISE(IGNORE); END",
    ],
    "postgres": [
        "CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; END $$",
        "CREATE TRIGGER {name} BEFORE INSERT ON {table} FOR EACH ROW EXECUTE FUNCTION {name}()",
    ],
}


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres"), indirect=True)
def test_an_enqueue_that_adds_no_row_says_so(engine):
    """An unkeyed enqueue the database skips (a trigger) raises one clear DatabaseError."""

    async def go():
        qt = await make_queue(engine, "lease")
        name = unique_table("skip")
        try:
            for sql in _SKIP_INSERTS[engine.name]:
                await qt.sql(sql.format(name=name, table=qt.q(qt.table)))
            async with await runtime.connect(qt.url) as db:
                with pytest.raises(runtime.DatabaseError, match="added no row") as caught:
                    await qt.queue.enqueue(db, {"n": 1})
            assert qt.table in str(caught.value) and "nothing was enqueued" in str(caught.value)
            assert await qt.rows() == []
        finally:
            await qt.drop()
            if engine.name == "postgres":
                await qt.sql(f"DROP FUNCTION IF EXISTS {name}()")

    run(go())
