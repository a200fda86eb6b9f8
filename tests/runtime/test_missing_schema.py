"""A Consumer whose table, dead-letter table or column is missing stops at once with one
ConfigurationError naming it (and how to create it), on every engine: checked before the first
claim, and again when a claim fails because the table went away meanwhile."""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from support.engines import drop_tables, run
from support.queues import make_queue

import runtime
from qgen.build import build_unit
from qgen.declaration import parse_declaration
from runtime.contract.rendered import parse_rendered
from runtime.queue import Queue

#: a consumer that stops on a missing table cancels its other workers mid-connect or
#: mid-close: none of their SQLite connections may be left to finish after the event loop
#: (aiosqlite's thread then fails reporting to a closed loop, seen in the next test)
pytestmark = pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")


async def _ack(message, ctx):
    return None


async def _raises_fast(consumer: runtime.Consumer, how: str, match: str) -> str:
    began = time.monotonic()
    with pytest.raises(runtime.ConfigurationError, match=match) as info:
        await asyncio.wait_for(getattr(consumer, how)(), 30)
    assert time.monotonic() - began < 10
    return str(info.value)


@pytest.mark.parametrize("how", ["drain", "run"])
def test_a_missing_table_stops_the_consumer_with_one_error(engine, how, caplog):
    async def go():
        qt = await make_queue(engine, "lease")
        await qt.drop()
        consumer = runtime.Consumer(qt.url, qt.queue, _ack, concurrency=2)
        with caplog.at_level(logging.INFO, logger="runtime"):
            text = await _raises_fast(consumer, how, "does not exist")
        assert repr(qt.table) in text and "qgen apply --db URL" in text
        assert "\n" not in text
        assert not [r for r in caplog.records if r.exc_info], "no traceback is logged"

    run(go())


def test_a_missing_column_or_dead_letter_table_is_named(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=("attempt", "processed_at"), dead="table")
        try:
            # the same table declared with a retry_after column it does not have
            cols = {**qt.columns, "retry_after": "retry_at"}
            decl = {
                "table": qt.table,
                "form": "lease",
                "lease_s": 30,
                "columns": cols,
                "max_attempts": 2,
                "dead_letter": {"table": qt.dead_table},
            }
            parsed = parse_declaration({"dialects": [engine.dialect_name], "queues": {"q": decl}})
            text = build_unit(parsed.queues["q"], engine.dialect_name)
            wider = Queue(parse_rendered(text, "wider.sql"))
            consumer = runtime.Consumer(qt.url, wider, _ack, concurrency=1)
            said = await _raises_fast(consumer, "drain", "has no column")
            assert "'retry_at'" in said and repr(qt.table) in said
            await drop_tables(qt.url, qt.dead_table)
            consumer = runtime.Consumer(qt.url, qt.queue, _ack, concurrency=1)
            said = await _raises_fast(consumer, "drain", "dead-letter table")
            assert repr(qt.dead_table) in said and "does not exist" in said
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
def test_a_claim_failing_on_a_missing_table_is_not_retried(engine, form, caplog):
    async def go():
        qt = await make_queue(engine, form)
        consumer = runtime.Consumer(qt.url, qt.queue, _ack, concurrency=2)
        assert await consumer.drain() == {}  # checked the table once: it was there
        await qt.drop()  # gone while the consumer lives
        with caplog.at_level(logging.INFO, logger="runtime"):
            said = await _raises_fast(consumer, "drain", "the claim failed")
        assert "qgen apply --db URL" in said
        assert not [r for r in caplog.records if "claim failed (failure" in r.getMessage()]

    run(go())


def test_the_workers_check_the_tables_once_before_the_first_claim(engine):
    # four workers connect side by side: one of them reads the catalogue, the others wait
    # for it and then claim; a later drain() of the same consumer reads it no more
    async def go():
        qt = await make_queue(engine, "lease")
        described: list[str] = []
        columns = qt.queue.rendered.statements["columns"][0]

        async def opener():
            conn = await runtime.connect(qt.url)
            fetchall = conn.fetchall

            async def recorded(sql, params=None):
                if sql == columns:
                    described.append(params["table_name"])
                return await fetchall(sql, params)

            conn.fetchall = recorded  # the real driver runs it: only the call is noted
            return conn

        try:
            await qt.enqueue(*({"n": n} for n in range(8)))
            consumer = runtime.Consumer(opener, qt.queue, _ack, concurrency=4, batch=1)
            assert await consumer.drain() == {"ack": 8}
            assert sorted(described) == sorted([qt.table, qt.queue.rendered.header.pause_table]), (
                described
            )
            await qt.enqueue({"n": 8})
            assert await consumer.drain() == {"ack": 1}
            assert len(described) == 2, described
        finally:
            await qt.drop()

    run(go())
