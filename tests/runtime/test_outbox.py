"""The transactional outbox on real engines: put in the business transaction, relay by outcome,
concurrent relays, a relay killed mid-batch, prune. No mocks: every engine test talks to its server.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, drop_tables, run, unique_table
from support.outboxes import Handler, make, recorder, records, render_outbox

import runtime
from qgen.build import render_declaration
from qgen.declaration import DeclarationError, parse_declaration
from runtime.connect import connect
from runtime.contract.dialects import DIALECTS
from runtime.contract.errors import ConfigurationError, DialectMismatch
from runtime.delivery import Ctx, Message
from runtime.drivers.base import Connection
from runtime.outbox import Outbox, OutboxMessage


@pytest.fixture
def outbox(engine: Engine, tmp_path: Path) -> Iterator[Outbox]:
    """A fresh outbox table with every column, on the engine under test."""
    with make(engine, tmp_path) as ob:
        yield ob


async def put_all(url: str, ob: Outbox, payloads: list[Any]) -> list[int]:
    """Put payloads (committed), returning their ids in put order."""
    async with await connect(url) as conn:
        for p in payloads:
            await ob.put(conn, p)
    return [r["id"] for r in await records(url, ob)]


# ------------------------------------------------------------- rendering


def test_renders_and_validates_on_every_dialect(tmp_path: Path) -> None:
    raw = {
        "outbox": {
            "table": "events_outbox",
            "statements": {"mark": "DELETE FROM events_outbox WHERE id = :id"},
            "custom": {"park": "UPDATE events_outbox SET topic = 'parked' WHERE id = :id"},
        }
    }
    files = render_declaration(parse_declaration(raw, tmp_path / "qgen.toml"))
    assert len(files) == 4
    for path, text in files.items():
        names = [
            ln.removeprefix("-- name: ") for ln in text.splitlines() if ln.startswith("-- name: ")
        ]
        assert names == [
            "schema",
            "put",
            "fetch",
            "mark",
            "prune",
            "stats",
            "finished_per_minute",
            "enqueued_per_minute",
            "columns",
            "indexes",
            "custom.park",
        ], path
        assert "DELETE FROM events_outbox WHERE id = " in text
    pg = files[Path("sql/postgres/outbox.sql")]
    assert "FOR UPDATE SKIP LOCKED" in pg and "CAST(%(payload)s AS JSONB)" in pg
    assert 'WHERE "processed_at" IS NULL;' in pg  # the partial index
    my = files[Path("sql/mysql/outbox.sql")]
    # the claim's index, with created_at last for the console's per-minute chart
    assert "INDEX `events_outbox_claim` (`processed_at`, `id`, `created_at`)" in my
    assert "FOR UPDATE SKIP LOCKED" in my
    lite = files[Path("sql/sqlite/outbox.sql")]
    assert "FOR UPDATE" not in lite and "-- note: \"the relay's BEGIN IMMEDIATE" in lite


def test_a_custom_event_with_an_unknown_parameter_is_refused(tmp_path: Path) -> None:
    raw = {"outbox": {"custom": {"park": "UPDATE outbox SET topic = :limit WHERE id = :id"}}}
    with pytest.raises(DeclarationError) as err:
        render_declaration(parse_declaration(raw, tmp_path / "qgen.toml"))
    assert "custom.park" in str(err.value) and "unknown parameter :limit" in str(err.value)


# ------------------------------------------------------- the business write


def test_put_commits_and_rolls_back_with_the_business_write(engine: Engine, outbox: Outbox) -> None:
    biz = unique_table("biz")

    async def go() -> None:
        async with await connect(engine.url) as db:
            q = db.dialect.quote_ident
            await db.execute(
                f"CREATE TABLE {q(biz)} (id INTEGER PRIMARY KEY, note VARCHAR(50) NOT NULL)", {}
            )
            ph = DIALECTS[engine.dialect_name].placeholder
            insert = f"INSERT INTO {q(biz)} (id, note) VALUES ({ph('id')}, {ph('note')})"

            await db.begin()
            await db.execute(insert, {"id": 1, "note": "kept"})
            await outbox.put(db, {"order": 1}, topic="orders", key="o-1")
            await db.commit()

            await db.begin()
            await db.execute(insert, {"id": 2, "note": "rolled back"})
            await outbox.put(db, {"order": 2}, topic="orders", key="o-2")
            await db.rollback()

            # what another connection sees
            async with await connect(engine.url) as other:
                notes = await other.fetchall(f"SELECT note FROM {q(biz)} ORDER BY id", {})
                assert [r["note"] for r in notes] == ["kept"]
            assert len(await records(engine.url, outbox)) == 1

            seen, handle = recorder()
            report = await outbox.relay(engine.url, handle)
            assert report == {"ack": 1, "left": 0}
            (m,) = seen
            assert isinstance(m, Message)
            assert (m.payload, m.topic, m.key) == ({"order": 1}, "orders", "o-1")
            assert m.created_at is not None and m.created_at.tzinfo is not None
            age = dt.datetime.now(dt.UTC) - m.created_at
            assert dt.timedelta(seconds=-5) < age < dt.timedelta(seconds=60)

    try:
        run(go())
    finally:
        run(drop_tables(engine.url, biz))


def test_put_returns_the_new_id_on_every_engine(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        async with await connect(engine.url) as db:
            got = await outbox.put(db, {"n": 1})
            assert await outbox.put_many(db, [{"n": 2}, {"n": 3}], topic="t") == 2
            assert await outbox.put_many(db, []) == 0
        ids = [r["id"] for r in await records(engine.url, outbox)]
        assert len(ids) == 3
        assert got == ids[0]  # MySQL/MariaDB read it with LAST_INSERT_ID() in the same step

    run(go())


def test_put_refuses_a_topic_the_table_lacks(engine: Engine, tmp_path: Path) -> None:
    columns = {"id": "id", "payload": "body", "processed_at": "done_at"}
    with make(engine, tmp_path, columns=columns) as ob:

        async def go() -> None:
            async with await connect(engine.url) as db:
                with pytest.raises(ConfigurationError, match="no topic column"):
                    await ob.put(db, {"n": 1}, topic="orders")
                await ob.put(db, {"n": 1})
            seen, handle = recorder()
            assert (await ob.relay(engine.url, handle))["ack"] == 1
            assert (seen[0].topic, seen[0].key, seen[0].created_at) == (None, None, None)

        run(go())


def test_renamed_columns_reach_the_handler_under_their_roles(
    engine: Engine, tmp_path: Path
) -> None:
    columns = {
        "id": "oid",
        "payload": "body",
        "topic": "kind",
        "key": "partition_key",
        "created_at": "made_at",
        "processed_at": "sent_at",
    }
    with make(engine, tmp_path, columns=columns) as ob:

        async def go() -> None:
            async with await connect(engine.url) as db:
                await ob.put(db, {"n": 1}, topic="orders", key="customer-7")
            seen, handle = recorder()
            assert await ob.relay(engine.url, handle) == {"ack": 1, "left": 0}
            (m,) = seen
            assert (m.payload, m.topic, m.key) == ({"n": 1}, "orders", "customer-7")
            assert m.created_at is not None
            assert [r["marked"] for r in await records(engine.url, ob)] == [True]
            await _backdate(engine.url, ob, [m.id], 3600)
            async with await connect(engine.url) as db:
                assert await ob.prune(db, 60) == 1

        run(go())


def test_a_file_for_another_dialect_is_refused(engine: Engine, tmp_path: Path) -> None:
    other = "sqlite" if engine.dialect_name != "sqlite" else "postgres"
    ob = render_outbox(tmp_path, other, unique_table("ob"))

    async def go() -> None:
        async with await connect(engine.url) as db:
            with pytest.raises(DialectMismatch):
                await ob.put(db, {"n": 1})
        with pytest.raises(DialectMismatch):
            await ob.relay(engine.url, recorder()[1])

    run(go())


# ---------------------------------------------------------------- outcomes


def test_ack_and_drop_mark_and_are_never_handed_again(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(4)])
        seen, handle = recorder({1: runtime.drop(), 3: runtime.drop()})
        report = await outbox.relay(engine.url, handle, batch=3)
        assert report == {"ack": 2, "drop": 2, "left": 0}
        assert [m.id for m in seen] == ids
        assert all(r["marked"] for r in await records(engine.url, outbox))
        again, handle = recorder()
        assert await outbox.relay(engine.url, handle) == {"left": 0}
        assert again == []

    run(go())


def test_a_handler_returning_none_marks_and_any_other_value_is_a_retry(
    engine: Engine, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(3)])

        async def handle(message: OutboxMessage, ctx: Ctx) -> Any:
            return {0: None, 1: "done", 2: runtime.drop()}[message.payload["n"]]

        with caplog.at_level(logging.ERROR, logger="runtime"):
            report = await outbox.relay(engine.url, handle)
        assert report == {"ack": 1, "retry": 1, "drop": 1, "left": 1}
        assert report.left_ids == (ids[1],)
        (logged,) = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        assert "returned str 'done', not an outcome" in logged
        marks = [r["marked"] for r in await records(engine.url, outbox)]
        assert marks == [True, False, True]

    run(go())


def test_retry_leaves_the_record_for_the_next_relay(
    engine: Engine, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(5)])
        seen: list[int] = []

        async def first(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome:
            seen.append(message.id)
            assert ctx.attempt is None
            n = message.payload["n"]
            if n == 1:
                return runtime.retry()
            if n == 2:
                return runtime.retry_after(30)
            if n == 3:
                raise RuntimeError("the broker is down")
            return runtime.ack()

        with caplog.at_level(logging.WARNING, logger="runtime"):
            report = await outbox.relay(engine.url, first, batch=2)
        # each record once in this run, though the relay passes over the table again
        assert seen == ids
        assert report == {"ack": 2, "retry": 2, "retry_after": 1, "left": 3}
        assert report.left_ids == (ids[1], ids[2], ids[3])
        raised = [r for r in caplog.records if r.name == "runtime" and r.exc_info]
        assert len(raised) == 1 and "raised" in raised[0].getMessage()
        assert isinstance(raised[0].exc_info[1], RuntimeError)  # type: ignore[index]
        marks = [r["marked"] for r in await records(engine.url, outbox)]
        assert marks == [True, False, False, False, True]

        again, handle = recorder()
        assert await outbox.relay(engine.url, handle) == {"ack": 3, "left": 0}
        assert [m.id for m in again] == [ids[1], ids[2], ids[3]]
        assert all(r["marked"] for r in await records(engine.url, outbox))

    run(go())


def test_a_plain_def_handler_runs_in_a_thread_and_marks(engine: Engine, outbox: Outbox) -> None:
    """Old code: the relay awaited what a plain def returned, so every record was a retry."""

    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(3)])
        loop_thread = threading.get_ident()
        threads: list[int] = []

        def handle(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome | None:
            threads.append(threading.get_ident())
            time.sleep(0.01)  # a blocking client call, allowed here
            return runtime.drop() if message.payload["n"] == 1 else None

        report = await outbox.relay(engine.url, handle)
        assert report == {"ack": 2, "drop": 1, "left": 0}
        assert len(threads) == len(ids) and loop_thread not in threads
        assert all(r["marked"] for r in await records(engine.url, outbox))

    run(go())


def test_a_handler_past_handler_timeout_leaves_its_record(
    engine: Engine, outbox: Outbox, caplog: pytest.LogCaptureFixture
) -> None:
    """Old code: relay() had no handler_timeout, and a hung handler held the batch forever."""

    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(3)])

        async def handle(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome:
            if message.payload["n"] == 1:
                await asyncio.sleep(30)
            return runtime.ack()

        began = time.monotonic()
        with caplog.at_level(logging.ERROR, logger="runtime"):
            report = await outbox.relay(engine.url, handle, handler_timeout=0.2)
        assert time.monotonic() - began < 10
        assert report == {"ack": 2, "retry": 1, "left": 1}
        assert report.left_ids == (ids[1],)
        assert f"handler for record {ids[1]} ran past 0.2s" in caplog.text
        marks = [r["marked"] for r in await records(engine.url, outbox)]
        assert marks == [True, False, True]

    run(go())


def test_keyboard_interrupt_in_a_handler_stops_the_relay_after_committing(
    engine: Engine, outbox: Outbox
) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(5)])
        seen: list[int] = []

        async def handle(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome:
            seen.append(message.id)
            if message.payload["n"] == 2:
                raise KeyboardInterrupt
            return runtime.ack()

        with pytest.raises(KeyboardInterrupt):
            await outbox.relay(engine.url, handle, batch=10)
        assert seen == ids[:3]  # no record handed after it
        marks = [r["marked"] for r in await records(engine.url, outbox)]
        assert marks == [True, True, False, False, False]

    run(go())


def test_records_are_handed_in_id_order(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        async with await connect(engine.url) as db:
            await db.begin()
            await outbox.put_many(db, [{"n": i} for i in range(23)], topic="t", key="k")
            await db.commit()
        seen, handle = recorder()
        report = await outbox.relay(engine.url, handle, batch=5)
        assert report == {"ack": 23, "left": 0}
        assert [m.payload["n"] for m in seen] == list(range(23))
        assert [m.id for m in seen] == sorted(m.id for m in seen)

    run(go())


def test_custom_events_and_a_mark_override(
    engine: Engine, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    declared = {
        "statements": {"mark": "DELETE FROM {t} WHERE id = :id"},
        "custom": {"park": "UPDATE {t} SET topic = 'parked' WHERE id = :id AND topic = :topic"},
    }
    with make(engine, tmp_path, **declared) as ob:

        async def go() -> None:
            async with await connect(engine.url) as db:
                for n in range(3):
                    await ob.put(db, {"n": n}, topic="orders")
            ids = [r["id"] for r in await records(engine.url, ob)]
            _, handle = recorder({1: runtime.custom("park"), 2: runtime.custom("nope")})
            with caplog.at_level(logging.ERROR, logger="runtime"):
                report = await ob.relay(engine.url, handle)
            assert report == {"ack": 1, "custom.park": 1, "retry": 1, "left": 1}
            assert report.left_ids == (ids[2],)
            assert any("no custom event 'nope'" in r.getMessage() for r in caplog.records)
            # the override deleted the acked record; park changed its record in place
            rows = await records(engine.url, ob)
            assert [(r["id"], r["topic"], r["marked"]) for r in rows] == [
                (ids[1], "parked", False),
                (ids[2], "orders", False),
            ]

        run(go())


# -------------------------------------------------------------- concurrency


def test_two_relays_at_once_hand_each_record_exactly_once(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(40)])
        handed: dict[str, list[int]] = {"a": [], "b": []}

        def relay_handler(name: str) -> Handler:
            async def handle(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome:
                handed[name].append(message.id)
                await asyncio.sleep(0.005)
                return runtime.ack()

            return handle

        a, b = await asyncio.gather(
            outbox.relay(engine.url, relay_handler("a"), batch=4),
            outbox.relay(engine.url, relay_handler("b"), batch=4),
        )
        assert sorted(handed["a"] + handed["b"]) == ids
        assert a.get("ack", 0) + b.get("ack", 0) == len(ids)
        for name in ("a", "b"):  # each relay in id order
            assert handed[name] == sorted(handed[name])
        if DIALECTS[engine.dialect_name].skip_locked:
            assert handed["a"] and handed["b"], "the relays did not run side by side"
        assert all(r["marked"] for r in await records(engine.url, outbox))

    run(go())


def test_a_relay_skips_or_waits_for_the_batch_another_holds(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(6)])
        reached, release = asyncio.Event(), asyncio.Event()
        first: list[int] = []

        async def slow(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome:
            first.append(message.id)
            if message.id == ids[1]:
                reached.set()
                await release.wait()
            return runtime.ack()

        holder = asyncio.create_task(outbox.relay(engine.url, slow, batch=3))
        await asyncio.wait_for(reached.wait(), 10)
        second, handle = recorder()
        other = asyncio.create_task(outbox.relay(engine.url, handle, batch=3))
        await asyncio.sleep(0.5)
        if DIALECTS[engine.dialect_name].skip_locked:
            # the held batch is skipped: the other relay hands the rest and is done
            assert other.done()
            assert (await other)["ack"] == 3
            assert [m.id for m in second] == ids[3:]
        else:
            # SQLite: BEGIN IMMEDIATE makes the other relay wait for the batch's COMMIT
            assert not other.done() and second == []
        release.set()
        await asyncio.wait_for(asyncio.gather(holder, other), 30)
        assert sorted(first + [m.id for m in second]) == ids
        assert all(r["marked"] for r in await records(engine.url, outbox))

    run(go())


def test_a_relay_killed_mid_batch_loses_nothing(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(7)])
        reached = asyncio.Event()
        first: list[int] = []

        async def hangs(message: OutboxMessage, ctx: Ctx) -> runtime.Outcome:
            first.append(message.id)
            if message.id == ids[4]:  # the second batch: ids[3] acked, not committed
                reached.set()
                await asyncio.Event().wait()
            return runtime.ack()

        task = asyncio.create_task(outbox.relay(engine.url, hangs, batch=3))
        await asyncio.wait_for(reached.wait(), 10)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert first == ids[:5]
        marks = [r["marked"] for r in await records(engine.url, outbox)]
        assert marks == [True, True, True, False, False, False, False]

        again, handle = recorder()
        assert await outbox.relay(engine.url, handle, batch=3) == {"ack": 4, "left": 0}
        assert [m.id for m in again] == ids[3:]
        assert all(r["marked"] for r in await records(engine.url, outbox))

    run(go())


def test_a_continuous_relay_hands_new_records_until_stopped(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        stop = asyncio.Event()
        seen, handle = recorder()
        task = asyncio.create_task(
            outbox.relay(engine.url, handle, until_empty=False, poll_interval=0.05, stop=stop)
        )
        async with await connect(engine.url) as db:
            for n in range(3):
                await outbox.put(db, {"n": n})
                await asyncio.sleep(0.1)
        for _ in range(100):
            if len(seen) == 3:
                break
            await asyncio.sleep(0.05)
        stop.set()
        report = await asyncio.wait_for(task, 10)
        assert report == {"ack": 3, "left": 0}
        assert [m.payload["n"] for m in seen] == [0, 1, 2]

    run(go())


def test_a_record_committed_late_below_the_relays_position_is_handed(
    engine: Engine, outbox: Outbox
) -> None:
    """Ids are taken at insert, records become visible at commit: a business transaction that
    commits late leaves a record below what the relay went past. The next pass finds it."""

    async def wait_for(cond: Callable[[], bool]) -> None:
        for _ in range(200):
            if cond():
                return
            await asyncio.sleep(0.025)
        raise AssertionError("timed out")

    async def go() -> None:
        stop = asyncio.Event()
        seen, handle = recorder()
        slow = await connect(engine.url)
        try:
            await slow.begin()
            await outbox.put(slow, {"n": "late"})  # the lower id, committed last
            task = asyncio.create_task(
                outbox.relay(engine.url, handle, until_empty=False, poll_interval=0.02, stop=stop)
            )
            if DIALECTS[engine.dialect_name].skip_locked:
                async with await connect(engine.url) as fast:
                    await outbox.put(fast, {"n": "early"})
                await wait_for(lambda: len(seen) == 1)
                await asyncio.sleep(0.1)
                assert [m.payload["n"] for m in seen] == ["early"]
            else:
                # SQLite: the open write transaction holds the relay off until it commits
                await asyncio.sleep(0.3)
                assert seen == []
            await slow.commit()
            await wait_for(lambda: any(m.payload["n"] == "late" for m in seen))
        finally:
            stop.set()
            await slow.close()
        report = await asyncio.wait_for(task, 10)
        assert report["ack"] == len(seen) and len({m.id for m in seen}) == len(seen)
        assert all(r["marked"] for r in await records(engine.url, outbox))

    run(go())


# ------------------------------------------------------------------- prune


async def _backdate(url: str, ob: Outbox, ids: list[int], seconds: int) -> None:
    """Move the records' processed_at into the past (the test's stand-in for waiting)."""
    c = ob.columns
    async with await connect(url) as conn:
        q, d = conn.dialect.quote_ident, conn.dialect.name
        pa = q(c["processed_at"])
        if d == "postgres":
            expr = f"{pa} - make_interval(secs => {seconds})"
        elif d == "sqlite":
            expr = f"strftime('%Y-%m-%d %H:%M:%f', {pa}, '-{seconds} seconds')"
        else:
            expr = f"{pa} - INTERVAL {seconds} SECOND"
        for i in ids:
            ph = DIALECTS[ob.dialect.name].placeholder("id")
            await conn.execute(
                f"UPDATE {q(ob.table)} SET {pa} = {expr} WHERE {q(c['id'])} = {ph}", {"id": i}
            )


def test_prune_deletes_only_marked_records_older_than_age(engine: Engine, outbox: Outbox) -> None:
    async def go() -> None:
        ids = await put_all(engine.url, outbox, [{"n": i} for i in range(4)])
        _, handle = recorder({3: runtime.retry()})
        await outbox.relay(engine.url, handle)  # ids[0..2] marked, ids[3] left
        await _backdate(engine.url, outbox, ids[:2], 3600)
        async with await connect(engine.url) as db:
            assert await outbox.prune(db, 7200) == 0
            assert await outbox.prune(db, 1800) == 2
            assert await outbox.prune(db, 1800) == 0
        rows = await records(engine.url, outbox)
        assert [(r["id"], r["marked"]) for r in rows] == [(ids[2], True), (ids[3], False)]
        async with await connect(engine.url) as db:
            await _backdate(engine.url, outbox, [ids[3]], 3600)  # unmarked: NULL stays NULL
            assert await outbox.prune(db, 0) == 1  # ids[2], marked just now
        assert [r["id"] for r in await records(engine.url, outbox)] == [ids[3]]

    run(go())


def test_put_joins_the_callers_open_transaction(engine: Engine, outbox: Outbox) -> None:
    """put runs on the caller's connection: until its transaction commits no relay sees the
    record (SQLite: the relay would wait for the caller's write lock, so it is not run then)."""

    async def go() -> None:
        db: Connection = await connect(engine.url)
        try:
            await db.begin()
            await outbox.put(db, {"n": 0})
            if DIALECTS[engine.dialect_name].skip_locked:
                _, handle = recorder()
                assert await outbox.relay(engine.url, handle) == {"left": 0}
            await db.commit()
        finally:
            await db.close()
        _, handle = recorder()
        assert (await outbox.relay(engine.url, handle))["ack"] == 1

    run(go())
