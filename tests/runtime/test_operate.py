"""Operating a queue on every engine and form: stats, the dead letter (list, show, redrive,
purge) and prune."""

from __future__ import annotations

import dataclasses

import pytest
from support.engines import drop_tables, run, unique_table
from support.queues import PAST, make_queue

import runtime
import runtime.operate as operate
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.contract.rendered import parse_rendered
from runtime.forms import form_for
from runtime.queue import Queue

FORMS = ["row_lock", "lease", "advisory"]
COLUMNS = ("attempt", "retry_after", "processed_at", "enqueued_at")


def _by_payload(outcomes):
    async def handle(message, ctx):
        return outcomes[message.payload["n"]]

    return handle


@pytest.mark.parametrize("form", FORMS)
def test_stats_count_what_the_test_made(engine, form):
    async def go():
        qt = await make_queue(engine, form, columns=COLUMNS, dead="group", max_attempts=1)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            await qt.enqueue({"n": 3}, delay=600)
            # 1 is acked (processed), 2 fails at the cap (dead); 3 is delayed
            handle = _by_payload({1: runtime.ack(), 2: runtime.retry()})
            await runtime.Consumer(qt.url, qt.queue, handle, concurrency=1).drain()
            await qt.enqueue({"n": 4}, {"n": 5})
            async with await runtime.connect(qt.url) as db:
                # one of the two ready rows leased, or its advisory key held (PostgreSQL
                # lists the keys in pg_locks): in flight
                seen = form == "lease" or (form == "advisory" and engine.name == "postgres")
                if seen:
                    (_held,) = await form_for(qt.queue).claim(db, 1, None)
                stats = await qt.queue.stats(db)
            ready, in_flight = (1, 1) if seen else (2, None)
            oldest = stats.pop("oldest_ready_s")
            assert stats == {
                "ready": ready,
                "delayed": 1,
                "in_flight": in_flight,
                "dead": 1,
                "processed": 1,
                "processed_capped": False,
                "capped": [],
                "paused": False,
            }
            assert oldest is not None and 0 <= oldest < 60
        finally:
            await qt.drop()

    run(go())


def test_stats_without_the_optional_columns_say_none(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=())
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as db:
                stats = await qt.queue.stats(db)
            assert stats == {
                "ready": 2,
                "delayed": 0,
                "in_flight": 0,
                "dead": None,
                "processed": None,
                "processed_capped": False,
                "capped": [],
                "oldest_ready_s": None,
                "paused": False,
            }
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", ["row_lock", "lease"])
def test_stats_counts_processed_rows_up_to_its_cap(engine, form):
    """The count of kept rows reads them, so stats stops at processed_cap and says so:
    a table with a million kept rows answers as fast as one with a few."""

    async def go():
        qt = await make_queue(engine, form, columns=COLUMNS)
        try:
            await qt.enqueue(*({"n": n} for n in range(5)))
            await runtime.Consumer(qt.url, qt.queue, lambda m, ctx: runtime.ack()).drain()
            await qt.enqueue({"n": 5})  # one pending: never counted as processed
            async with await runtime.connect(qt.url) as db:
                seen = {
                    cap: (s["processed"], s["processed_capped"], s["capped"])
                    for cap in (0, 3, 5, 6, None)
                    for s in [await qt.queue.stats(db, processed_cap=cap)]
                }
                default = await qt.queue.stats(db)
                with pytest.raises(runtime.InvalidArgument, match="processed_cap"):
                    await qt.queue.stats(db, processed_cap=-1)
            assert seen == {
                0: (0, True, ["processed"]),
                3: (3, True, ["processed"]),
                5: (5, False, []),
                6: (5, False, []),
                None: (5, False, []),
            }
            assert (default["processed"], default["processed_capped"], default["ready"]) == (
                5,
                False,
                1,
            )
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("dead", ["group", "table"])
def test_stats_counts_unfinished_and_dead_rows_up_to_count_cap(engine, dead):
    """count_cap bounds what the counts read: exact while the unfinished rows (and the dead
    ones) are no more than the cap; past it, ready, delayed and in_flight count the oldest
    unfinished rows only, each listed in capped, and dead stops at the cap."""

    async def go():
        qt = await make_queue(engine, "lease", columns=COLUMNS, dead=dead, max_attempts=1)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            handle = _by_payload({1: runtime.ack(), 2: runtime.retry()})
            await runtime.Consumer(qt.url, qt.queue, handle, concurrency=1).drain()
            # in id order: 3 delayed, 4 in flight (leased below), 5 ready; 2 dead, 1 processed
            await qt.enqueue({"n": 3}, delay=600)
            await qt.enqueue({"n": 4}, {"n": 5})
            async with await runtime.connect(qt.url) as db:
                (_held,) = await form_for(qt.queue).claim(db, 1, None)
                seen = {
                    cap: (
                        [s[k] for k in ("ready", "delayed", "in_flight", "dead", "processed")],
                        s["capped"],
                    )
                    for cap in (0, 1, 2, 3, None)
                    for s in [await qt.queue.stats(db, processed_cap=cap, count_cap=cap)]
                }
                with pytest.raises(runtime.InvalidArgument, match="count_cap"):
                    await qt.queue.stats(db, count_cap=-1)
            live = ["ready", "delayed", "in_flight"]
            assert seen == {
                0: ([0, 0, 0, 0, 0], [*live, "dead", "processed"]),
                1: ([0, 1, 1, 1, 1], live),  # the oldest two: 3 delayed, 4 in flight
                2: ([1, 1, 1, 1, 1], live),  # all three read, but more than 2
                3: ([1, 1, 1, 1, 1], []),
                None: ([1, 1, 1, 1, 1], []),
            }
        finally:
            await qt.drop()

    run(go())


def test_group_names_lists_the_groups_groups_counts(engine):
    """group_names (one index probe per group) lists exactly the groups that groups counts:
    those with unfinished rows, in order; a group whose rows are all processed is not one."""

    async def go():
        qt = await make_queue(engine, "lease", columns=COLUMNS, dead="group", max_attempts=1)
        try:
            async with await runtime.connect(qt.url) as db:
                assert await operate.group_names(qt.queue, db) == []
                for group in ("b", "a", "c", "b"):
                    await qt.queue.enqueue(db, {"g": group}, group=group)
                await qt.queue.enqueue(db, {"g": "d"}, group="d", delay=600)
            # every row of group c processed: no longer a group with work
            done = runtime.Consumer(qt.url, qt.queue, lambda m, ctx: runtime.ack(), group="c")
            await done.drain()
            async with await runtime.connect(qt.url) as db:
                counted = await operate.groups(qt.queue, db)
                names = await operate.group_names(qt.queue, db)
            assert counted == {"a": 1, "b": 2, "d": 1}
            assert names == ["a", "b", "d"]
            # a file rendered before group_names: the groups groups counts
            statements = dict(qt.queue.rendered.statements)
            del statements["group_names"]
            older = Queue(dataclasses.replace(qt.queue.rendered, statements=statements))
            async with await runtime.connect(qt.url) as db:
                assert await operate.group_names(older, db) == names
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("dead", ["group", "table"])
@pytest.mark.parametrize("form", FORMS)
def test_a_redriven_message_is_delivered_again_exactly_once(engine, form, dead):
    async def go():
        qt = await make_queue(engine, form, columns=COLUMNS, dead=dead, max_attempts=1)
        try:
            ids = await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            fail = _by_payload({1: runtime.retry(), 2: runtime.retry(), 3: runtime.retry()})
            await runtime.Consumer(qt.url, qt.queue, fail, concurrency=1).drain()
            async with await runtime.connect(qt.url) as db:
                page = await qt.queue.dead_list(db, limit=2)
                assert [r["id"] for r in page] == ids[:2]
                assert page[0]["payload"] == {"n": 1}
                nxt = await qt.queue.dead_list(db, limit=2, after_id=page[-1]["id"])
                assert [r["id"] for r in nxt] == ids[2:]
                newest = await qt.queue.dead_list(db, newest_first=True)
                assert [r["id"] for r in newest] == ids[::-1]
                shown = await qt.queue.dead_show(db, ids[0])
                assert shown is not None and shown["payload"] == {"n": 1}
                assert await qt.queue.dead_show(db, 10**9) is None
                assert await qt.queue.redrive(db, [ids[0]]) == 1
                assert await qt.queue.redrive(db, [ids[0]]) == 0  # no longer dead
                assert [r["id"] for r in await qt.queue.dead_list(db)] == ids[1:]
            seen = []

            async def ok(message, ctx):
                seen.append((message.id, message.payload, ctx.attempt))
                return runtime.ack()

            await runtime.Consumer(qt.url, qt.queue, ok, concurrency=2).drain()
            await runtime.Consumer(qt.url, qt.queue, ok, concurrency=2).drain()
            assert seen == [(ids[0], {"n": 1}, 1)]
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.purge_dead(db, [ids[1]]) == 1
                assert await qt.queue.redrive(db) == 1  # all that is left: 3
                assert (await qt.queue.stats(db))["dead"] == 0
            await runtime.Consumer(qt.url, qt.queue, ok, concurrency=2).drain()
            assert seen == [(ids[0], {"n": 1}, 1), (ids[2], {"n": 3}, 1)]
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.purge_dead(db) == 0
        finally:
            await qt.drop()

    run(go())


def test_purge_all_and_a_queue_without_dead_letter(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=COLUMNS, dead="table", max_attempts=1)
        plain = await make_queue(engine, "lease", columns=COLUMNS)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            fail = _by_payload({1: runtime.retry(), 2: runtime.retry()})
            await runtime.Consumer(qt.url, qt.queue, fail, concurrency=1).drain()
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.purge_dead(db) == 2
                assert await qt.queue.dead_list(db) == []
                with pytest.raises(runtime.ConfigurationError, match="declares no dead letter"):
                    await plain.queue.redrive(db)
        finally:
            await qt.drop()
            await plain.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_prune_deletes_old_processed_rows_in_batches_and_leaves_the_rest(engine, form):
    async def go():
        qt = await make_queue(engine, form, columns=COLUMNS)
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            ok = _by_payload({1: runtime.ack(), 2: runtime.ack(), 3: runtime.drop()})
            await runtime.Consumer(qt.url, qt.queue, ok, concurrency=1).drain()
            # the three finished an hour ago; then one new processed row and two unprocessed
            await qt.sql(
                f"UPDATE {qt.q(qt.table)} SET {qt.col('processed_at')} = "
                f"{PAST[engine.dialect_name]}"
            )
            (recent,) = await qt.enqueue({"n": 4})
            await runtime.Consumer(
                qt.url, qt.queue, _by_payload({4: runtime.ack()}), concurrency=1
            ).drain()
            pending = await qt.enqueue({"n": 5}, {"n": 6})
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.prune(db, older_than_s=60, batch=2) == 3
                assert await qt.queue.prune(db, older_than_s=60, batch=2) == 0
            left = await qt.rows()
            assert [r["id"] for r in left] == [recent, *pending]
            assert [r["processed_at"] is None for r in left] == [False, True, True]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("dedupe", [False, True])
def test_redrive_group_moves_only_that_groups_dead_messages(engine, dedupe):
    """A queue serving two groups (a and b, no default_group) keeps their dead messages in
    one dead-letter table: redrive_group sends back every dead message of its group, and
    only those, each to its own group as a first delivery."""

    async def go():
        table = unique_table("q_shared_dead")
        dead_table = table + "_dead"
        cols = {
            "id": "id",
            "payload": "payload",
            "group": "grp",
            "attempt": "attempt",
            "retry_after": "retry_after",
            "locked_until": "locked_until",
        }
        if dedupe:
            cols["dedupe_key"] = "dedupe_key"
        decl = parse_declaration(
            {
                "dialects": [engine.dialect_name],
                "queues": {
                    "q": {
                        "table": table,
                        "form": "lease",
                        "max_attempts": 1,
                        "dead_letter": {"table": dead_table},
                        "columns": cols,
                    }
                },
            }
        )
        q = Queue(parse_rendered(build_unit(decl.queues["q"], engine.dialect_name), "q.sql"))
        assert q.rendered.get("redrive_group")
        assert bool(q.rendered.get("redrive_blocked_group")) == dedupe
        tables = [table, dead_table, f"{table}_pause"]
        await drop_tables(engine.url, *tables)
        try:
            async with await runtime.connect(engine.url) as db:
                for st in q.rendered.require("schema"):
                    await db.execute(st, {})
                a_ids = [await q.enqueue(db, {"n": n}, group="a") for n in (1, 2)]
                b_ids = [await q.enqueue(db, {"n": n}, group="b") for n in (3, 4)]
            fail = _by_payload({n: runtime.retry() for n in (1, 2, 3, 4)})
            for g in ("a", "b"):
                await runtime.Consumer(engine.url, q, fail, concurrency=1, group=g).drain()
            quote = runtime.contract.dialects.DIALECTS[engine.dialect_name].quote_ident

            async def where(t: str) -> dict[int, tuple[str, int]]:
                async with await runtime.connect(engine.url) as db:
                    rows = await db.fetchall(
                        f"SELECT {quote('id')} AS id, {quote('grp')} AS g, "
                        f"{quote('attempt')} AS a FROM {quote(t)}",
                        {},
                    )
                return {int(r["id"]): (r["g"], int(r["a"])) for r in rows}

            assert await where(table) == {}
            dead_before = await where(dead_table)
            assert sorted(dead_before) == sorted(a_ids + b_ids)
            async with await runtime.connect(engine.url) as db:
                assert await q.redrive_group(db, "a") == 2
                assert await q.redrive_group(db, "a") == 0  # none of a's left
                assert await q.redrive_group(db, "nobody") == 0
            assert await where(table) == {i: ("a", 1) for i in a_ids}
            assert await where(dead_table) == {i: dead_before[i] for i in b_ids}
            # group a claims them again; b's stay dead until their own redrive
            seen = []

            async def ok(message, ctx):
                seen.append(message.id)
                return runtime.ack()

            for g in ("a", "b"):
                await runtime.Consumer(engine.url, q, ok, concurrency=1, group=g).drain()
            assert sorted(seen) == a_ids
            async with await runtime.connect(engine.url) as db:
                assert await q.redrive_group(db, "b") == 2
            assert await where(dead_table) == {}
            assert await where(table) == {i: ("b", 1) for i in b_ids}
        finally:
            await drop_tables(engine.url, *tables)

    run(go())


def test_redrive_group_needs_a_dead_letter_table_with_groups(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=COLUMNS, dead="group", max_attempts=1)
        try:
            assert not qt.queue.rendered.get("redrive_group")
            async with await runtime.connect(qt.url) as db:
                with pytest.raises(runtime.ConfigurationError, match="dead-letter table"):
                    await qt.queue.redrive_group(db, "dead")
        finally:
            await qt.drop()

    run(go())
