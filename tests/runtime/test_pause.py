"""Pausing a queue or one group: no claim takes a paused scope's messages, in any process;
deliveries in flight settle as usual; resume lets them flow again. Every engine and form."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time
from typing import Any

import pytest
from support.engines import run, unique_table
from support.queues import QueueUnderTest, make_queue

import runtime
from qgen.build import build_unit
from qgen.declaration import DeclarationError, parse_declaration
from runtime.contract.errors import ConfigurationError, InvalidArgument
from runtime.contract.rendered import parse_rendered
from runtime.forms import form_for
from runtime.settle import decide

FORMS = ["row_lock", "lease", "advisory"]


async def ack(message: Any, ctx: Any) -> runtime.Outcome:
    return runtime.ack()


async def _unfinished(qt: QueueUnderTest, group: str | None = None) -> list[dict[str, Any]]:
    return [
        r
        for r in await qt.rows()
        if r["processed_at"] is None and (group is None or r.get("group") == group)
    ]


@pytest.mark.parametrize("form", FORMS)
def test_a_paused_queue_is_not_claimed_until_resumed(engine, form):
    async def go():
        qt = await make_queue(engine, form)
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, {"n": 3})
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.paused(db) == []
                assert (await qt.queue.stats(db))["paused"] is False
                assert await qt.queue.pause(db) is True
                assert await qt.queue.pause(db) is False  # idempotent: paused already
                assert await qt.queue.paused(db) == [None]
                stats = await qt.queue.stats(db)
                assert stats["paused"] is True and stats["ready"] == 3  # they wait, ready
            assert await runtime.Consumer(qt.url, qt.queue, ack).drain() == {}
            rows = await qt.rows()
            assert [r["attempt"] for r in rows] == [1, 1, 1]  # never claimed, nothing counted
            assert all(r["processed_at"] is None for r in rows)

            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.resume(db) is True
                assert await qt.queue.resume(db) is False  # idempotent: nothing held
                assert await qt.queue.paused(db) == []
            assert await runtime.Consumer(qt.url, qt.queue, ack).drain() == {"ack": 3}
            assert await _unfinished(qt) == []
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_paused_group_is_skipped_while_other_groups_flow(engine, form):
    async def go():
        qt = await make_queue(engine, form, dead="group", max_attempts=3)
        try:
            await qt.enqueue({"n": 1}, {"n": 2}, group="eu")
            await qt.enqueue({"n": 3}, group="us")
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.pause(db, group="eu") is True
                assert await qt.queue.paused(db) == ["eu"]
                assert (await qt.queue.stats(db, group="eu"))["paused"] is True
                assert (await qt.queue.stats(db, group="us"))["paused"] is False
            eu = runtime.Consumer(qt.url, qt.queue, ack, group="eu")
            us = runtime.Consumer(qt.url, qt.queue, ack, group="us")
            assert await eu.drain() == {}
            assert await us.drain() == {"ack": 1}
            assert len(await _unfinished(qt, "eu")) == 2

            # the whole queue's pause holds every group; resuming it leaves eu's own pause
            await qt.enqueue({"n": 4}, group="us")
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.pause(db) is True
                assert await qt.queue.paused(db) == [None, "eu"]
            assert await runtime.Consumer(qt.url, qt.queue, ack, group="us").drain() == {}
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.resume(db) is True
                assert await qt.queue.paused(db) == ["eu"]
            assert await runtime.Consumer(qt.url, qt.queue, ack, group="us").drain() == {"ack": 1}
            assert await runtime.Consumer(qt.url, qt.queue, ack, group="eu").drain() == {}
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.resume(db, group="eu") is True
            assert await runtime.Consumer(qt.url, qt.queue, ack, group="eu").drain() == {"ack": 2}
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_delivery_in_flight_settles_and_the_next_claim_takes_nothing(engine, form):
    serial = form == "row_lock" and engine.name == "sqlite"  # BEGIN IMMEDIATE holds the file

    async def go():
        qt = await make_queue(engine, form)
        f = form_for(qt.queue)
        try:
            first, _ = await qt.enqueue({"n": 1}, {"n": 2})
            async with await runtime.connect(qt.url) as a, await runtime.connect(qt.url) as b:
                (d,) = await f.claim(a, 1, None)  # a handler runs: in flight
                assert d.message.id == first
                pausing = asyncio.create_task(qt.queue.pause(b))
                if serial:  # the pause waits for the batch to end
                    await asyncio.sleep(0.3)
                    assert not pausing.done()
                else:
                    assert await asyncio.wait_for(pausing, 5) is True
                await f.settle(a, d, decide(qt.queue, d, runtime.ack()))
                await f.end_batch(a)
                assert await pausing is True
                assert await f.claim(a, 1, None) == []  # paused: the second waits
                await f.end_batch(a)
            rows = {r["id"]: r for r in await qt.rows()}
            assert rows[first]["processed_at"] is not None  # the one in flight finished
            assert len(await _unfinished(qt)) == 1
        finally:
            await qt.drop()

    run(go())


_CONSUMER = textwrap.dedent(
    """
    import asyncio, json, signal, sys
    import runtime

    async def main(url, path):
        queue = runtime.load(path)
        handled = []

        async def handle(message, ctx):
            handled.append(message.id)
            return runtime.ack()

        consumer = runtime.Consumer(url, queue, handle, max_poll_interval=0.2)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, consumer.stop)
        print("running", flush=True)
        await consumer.run()
        print(json.dumps(handled), flush=True)

    asyncio.run(main(sys.argv[1], sys.argv[2]))
    """
)


@pytest.mark.parametrize("form", FORMS)
def test_consumers_in_other_processes_obey_the_pause(engine, form, tmp_path):
    """Two consumer processes (one on SQLite's advisory form: its keys live in the process)
    run while this one pauses, enqueues, and resumes."""
    procs_n = 1 if (engine.name == "sqlite" and form == "advisory") else 2

    async def go():
        qt = await make_queue(engine, form)
        path = tmp_path / f"{qt.table}.sql"
        path.write_text(qt.text, encoding="utf-8")
        script = tmp_path / "consumer.py"
        script.write_text(_CONSUMER, encoding="utf-8")
        procs: list[subprocess.Popen[str]] = []
        try:
            async with await runtime.connect(qt.url) as db:
                await qt.queue.pause(db)
            for _ in range(procs_n):
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(script), qt.url, str(path)],
                        stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE,
                        text=True,
                    )
                )
            for p in procs:
                assert p.stdout is not None and p.stdout.readline().strip() == "running"
            ids = await qt.enqueue(*({"n": n} for n in range(6)))
            await asyncio.sleep(1.5)  # several claims of each consumer: none takes a row
            rows = await qt.rows()
            assert [r["attempt"] for r in rows] == [1] * 6 and all(
                r["processed_at"] is None for r in rows
            )
            async with await runtime.connect(qt.url) as db:
                await qt.queue.resume(db)
            deadline = time.monotonic() + 30
            while await _unfinished(qt) and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            assert await _unfinished(qt) == []
            handled: list[int] = []
            for p in procs:
                p.terminate()
                out, err = p.communicate(timeout=30)
                assert p.returncode == 0, err
                handled += json.loads(out.strip().splitlines()[-1])
            assert sorted(handled) == sorted(ids)  # each once
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_pause_refuses_a_group_on_a_queue_without_one_and_an_empty_group(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        grouped = await make_queue(engine, "lease", dead="group", max_attempts=2)
        try:
            async with await runtime.connect(qt.url) as db:
                with pytest.raises(InvalidArgument, match="no group column"):
                    await qt.queue.pause(db, group="eu")
                with pytest.raises(InvalidArgument, match="group must be"):
                    await grouped.queue.pause(db, group="")
                assert await qt.queue.paused(db) == [] == await grouped.queue.paused(db)
        finally:
            await qt.drop()
            await grouped.drop()

    run(go())


def _render(extra: dict[str, Any], dialect: str = "postgres") -> str:
    decl = {
        "table": "app.jobs",
        "form": "lease",
        "columns": {"id": "id", "payload": "payload", "locked_until": "locked_until"},
    }
    parsed = parse_declaration({"dialects": [dialect], "queues": {"jobs": decl | extra}})
    return build_unit(parsed.queues["jobs"], dialect)


def test_the_pause_table_is_in_the_queue_schema_by_default_and_can_be_left_out():
    text = _render({})
    f = parse_rendered(text, "jobs.sql")
    assert f.header.pause_table == "app.jobs_pause"
    assert 'FROM "app"."jobs_pause" AS qgen_paused' in f.statements["claim"][0]
    assert {"pause", "resume", "paused"} <= set(f.statements)

    named = parse_rendered(_render({"pause_table": "ops.paused_queues"}), "jobs.sql")
    assert named.header.pause_table == "ops.paused_queues"
    assert '"ops"."paused_queues"' in named.statements["claim"][0]

    off = parse_rendered(_render({"pause_table": False}), "jobs.sql")
    assert off.header.pause_table is None
    assert not {"pause", "resume", "paused"} & set(off.statements)
    assert all("_pause" not in sql for step in off.statements.values() for sql in step)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (True, "is neither a table name nor false"),
        ("not a name", "is not a table name"),
        ("app.jobs", "the pause table is the queue's own"),
    ],
)
def test_a_bad_pause_table_is_one_clear_error(value, says):
    with pytest.raises(DeclarationError, match=says) as exc:
        _render({"pause_table": value})
    assert "pause_table" in str(exc.value) and "fix:" in str(exc.value)


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_a_queue_rendered_without_a_pause_table_says_how_to_get_one(engine):
    async def go():
        qt = await make_queue(engine, "lease", extra={"pause_table": False})
        try:
            async with await runtime.connect(qt.url) as db:
                with pytest.raises(ConfigurationError, match="cannot be paused"):
                    await qt.queue.pause(db)
                assert "paused" not in await qt.queue.stats(db)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", ["sqlite", "postgres"], indirect=True)
def test_a_missing_pause_table_stops_the_consumer_with_the_fix(engine, tmp_path):
    """A queue table made before qgen had pausing: the consumer says to run `qgen apply`,
    and apply creates the pause table alone."""
    pause = unique_table("pause")

    async def go():
        qt = await make_queue(engine, "lease", extra={"pause_table": pause})
        qt.tables.append(pause)
        try:
            await qt.sql(f"DROP TABLE {qt.q(pause)}")
            with pytest.raises(ConfigurationError, match=f"pause table '{pause}'.*qgen apply"):
                await runtime.Consumer(qt.url, qt.queue, ack).drain()
            created = await runtime.apply(qt.url, qt.queue)
            assert [str(o) for o in created] == [f"table {pause}"]
            await qt.enqueue({"n": 1})
            assert await runtime.Consumer(qt.url, qt.queue, ack).drain() == {"ack": 1}
        finally:
            await qt.drop()

    run(go())
