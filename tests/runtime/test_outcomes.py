"""Every row of SPEC.md's outcome table, per form and engine, read back from the table itself."""

from __future__ import annotations

import asyncio
import logging

import pytest
from support.engines import run
from support.outcomes import drain, handler
from support.queues import make_queue

import runtime

FORMS = ["row_lock", "lease", "advisory"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("keep", [False, True], ids=["delete", "processed_at"])
@pytest.mark.parametrize("outcome", ["ack", "drop"])
def test_ack_and_drop_finish_the_row(engine, form, keep, outcome):
    async def go():
        cols = ("attempt", "retry_after") + (("processed_at",) if keep else ())
        qt = await make_queue(engine, form, columns=cols)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            seen: list = []
            counts = await drain(qt, handler([outcome], seen))
            assert counts == {outcome: 2}
            assert seen == [(seen[0][0], 1), (seen[1][0], 1)]
            rows = await qt.rows()
            if keep:
                assert [r["processed_at"] is not None for r in rows] == [True, True]
                if form == "lease":
                    assert all(r["locked_until"] is None for r in rows)
                # a finished row is never claimed again
                assert await drain(qt, handler([outcome], seen)) == {}
            else:
                assert rows == []
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_retry_counts_the_attempt_once_per_delivery(engine, form):
    async def go():
        qt = await make_queue(engine, form)
        try:
            (mid,) = await qt.enqueue({"n": 1})
            seen: list = []
            counts = await drain(qt, handler(["retry", "retry", "ack"], seen))
            assert counts == {"retry": 2, "ack": 1}
            assert seen == [(mid, 1), (mid, 2), (mid, 3)]
            (row,) = await qt.rows()
            # row lock counts in the statement that returns the row (the ack does not);
            # lease and advisory count every claim or take
            assert row["attempt"] == (3 if form == "row_lock" else 4)
            assert row["processed_at"] is not None
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_retry_after_delays_in_the_row(engine, form):
    async def go():
        qt = await make_queue(engine, form)
        try:
            (mid,) = await qt.enqueue({"n": 1})
            seen: list = []
            counts = await drain(qt, handler(["retry_after:3600", "ack"], seen))
            assert counts == {"retry_after": 1}
            (row,) = await qt.rows()
            assert row["retry_after_future"] == 1 and row["attempt"] == 2
            assert row.get("locked_until") is None
            assert row["processed_at"] is None
            await qt.make_due()  # the delay is the row's: once due it is claimed again
            counts = await drain(qt, handler(["retry_after:3600", "ack"], seen))
            assert counts == {"ack": 1} and seen[-1] == (mid, 2)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dead", ["group", "table"])
def test_the_cap_moves_the_row_to_its_dead_letter(engine, form, dead, caplog):
    async def go():
        qt = await make_queue(engine, form, dead=dead, max_attempts=2)
        try:
            (mid,) = await qt.enqueue({"n": 1, "body": "keep me"})
            seen: list = []
            with caplog.at_level(logging.WARNING, logger="runtime"):
                counts = await drain(qt, handler(["retry", "retry_after:0"], seen))
            assert counts == {"retry": 1, "dead_letter": 1}
            assert seen == [(mid, 1), (mid, 2)]
            (row,) = await qt.dead_rows()
            assert row["payload"] == {"n": 1, "body": "keep me"} and row["attempt"] == 3
            assert row.get("locked_until") is None
            if dead == "table":
                assert await qt.rows() == []
            assert any(
                "dead letter" in r.getMessage() and r.levelno == logging.WARNING
                for r in caplog.records
            )
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_max_attempts_one_moves_at_the_first_failure(engine, form):
    async def go():
        qt = await make_queue(engine, form, dead="table", max_attempts=1)
        try:
            await qt.enqueue({"n": 1})
            counts = await drain(qt, handler(["raise"], []))
            assert counts == {"dead_letter": 1}
            assert len(await qt.dead_rows()) == 1
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_retry_after_without_its_column_is_a_retry_with_a_warning(engine, form, caplog):
    async def go():
        qt = await make_queue(engine, form, columns=("attempt",))
        try:
            (mid,) = await qt.enqueue({"n": 1})
            seen: list = []
            with caplog.at_level(logging.WARNING, logger="runtime"):
                counts = await drain(qt, handler(["retry_after:60", "ack"], seen))
            assert counts == {"retry": 1, "ack": 1}
            assert seen == [(mid, 1), (mid, 2)]
            assert any(
                "taken as retry()" in r.getMessage() and r.levelno == logging.WARNING
                for r in caplog.records
            )
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_without_attempt_ctx_attempt_is_none_and_retry_returns_the_row(engine, form):
    async def go():
        qt = await make_queue(engine, form, columns=())
        try:
            (mid,) = await qt.enqueue({"n": 1})
            seen: list = []
            counts = await drain(qt, handler(["retry", "ack"], seen))
            assert counts == {"retry": 1, "ack": 1}
            assert seen == [(mid, None), (mid, None)]
            assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_handler_that_raises_is_a_retry_and_is_logged(engine, form, caplog):
    async def go():
        qt = await make_queue(engine, form)
        try:
            (_mid,) = await qt.enqueue({"n": 1})
            seen: list = []
            with caplog.at_level(logging.ERROR, logger="runtime"):
                counts = await drain(qt, handler(["raise", "ack"], seen))
            assert counts == {"retry": 1, "ack": 1}
            errors = [
                r for r in caplog.records if r.levelno == logging.ERROR and r.name == "runtime"
            ]
            assert errors and errors[0].exc_info and "handler failed" in str(errors[0].exc_info[1])
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_handler_that_hangs_is_a_retry_after_its_timeout(engine, form):
    async def go():
        import asyncio

        qt = await make_queue(engine, form)
        try:
            await qt.enqueue({"n": 1})
            calls = []

            async def handle(message, ctx):
                calls.append(ctx.attempt)
                if ctx.attempt == 1:
                    await asyncio.sleep(30)
                return runtime.ack()

            counts = await drain(qt, handle, handler_timeout=0.3)
            assert counts == {"retry": 1, "ack": 1} and calls == [1, 2]
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_custom_event_runs_its_sql_and_unknown_is_retried(engine, form, caplog):
    guard = " AND locked_until = :token" if form == "lease" else ""
    lease = ", locked_until = NULL" if form == "lease" else ""
    # parked: out of the queue (processed) with a mark the test can read back
    park = f"UPDATE {{t}} SET attempt = 100, processed_at = {{now}}{lease} WHERE id = :id{guard}"
    custom = {"park": [park]}

    async def go():
        qt = await make_queue(engine, form, custom=custom)
        try:
            (a, b) = await qt.enqueue({"n": 1}, {"n": 2})
            seen: list = []
            plan = {1: ["custom:park"], 2: ["custom:nope", "ack"]}
            with caplog.at_level(logging.ERROR, logger="runtime"):
                counts = await drain(qt, handler(plan, seen))
            rows = {r["id"]: r for r in await qt.rows()}
            assert rows[a]["attempt"] == 100 and rows[a]["processed_at"] is not None
            assert rows[b]["processed_at"] is not None  # retried, then acked: not lost
            assert counts["custom.park"] == 1 and counts["unknown_custom"] == 1
            assert any("no custom event 'nope'" in r.getMessage() for r in caplog.records)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_an_override_runs_in_place_of_the_dialects_statement(engine, form):
    guard = " AND locked_until = :token" if form == "lease" else ""
    lease = ", locked_until = NULL" if form == "lease" else ""
    statements = {
        "drop": f"UPDATE {{t}} SET attempt = 42, processed_at = {{now}}{lease} WHERE id = :id{guard}"
    }

    async def go():
        qt = await make_queue(engine, form, statements=statements)
        try:
            await qt.enqueue({"n": 1})
            assert await drain(qt, handler(["drop"], [])) == {"drop": 1}
            (row,) = await qt.rows()
            assert row["attempt"] == 42 and row["processed_at"] is not None
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_handler_returning_none_acks_and_any_other_value_is_a_logged_retry(engine, form, caplog):
    """No return statement is an ack (the row is finished); an explicit outcome still decides;
    a value that is not an outcome is a retry, logged naming its type."""

    async def go():
        qt = await make_queue(engine, form, dead="table", max_attempts=2)
        try:
            ids = await qt.enqueue({"n": 0}, {"n": 1}, {"n": 2}, {"n": 3})
            returns = {0: None, 1: 42, 2: runtime.retry_after(3600), 3: None}
            seen = []

            async def handle(message, ctx):
                seen.append((message.payload["n"], ctx.attempt))
                if message.payload["n"] == 3:
                    return  # a bare return: None
                return returns[message.payload["n"]]

            with caplog.at_level(logging.ERROR, logger="runtime"):
                counts = await asyncio.wait_for(
                    drain(qt, handle, retry_policy=runtime.Immediate()), 30
                )
            # 42 is a retry at once, then the cap moves it to the dead letter
            assert counts == {"ack": 2, "retry": 1, "dead_letter": 1, "retry_after": 1}, counts
            assert sorted(seen) == [(0, 1), (1, 1), (1, 2), (2, 1), (3, 1)]
            wrong = [r.getMessage() for r in caplog.records if "not an outcome" in r.getMessage()]
            assert len(wrong) == 2 and all("returned int 42" in w for w in wrong), wrong
            rows = {r["id"]: r for r in await qt.rows()}
            assert rows[ids[0]]["processed_at"] is not None
            assert rows[ids[3]]["processed_at"] is not None
            assert rows[ids[2]]["processed_at"] is None and rows[ids[2]]["retry_after_future"]
            assert [r["payload"] for r in await qt.dead_rows()] == [{"n": 1}]
        finally:
            await qt.drop()

    run(go())


def test_a_sync_handler_returning_none_acks(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue({"n": 1})
            seen = []
            counts = await asyncio.wait_for(drain(qt, lambda m, c: seen.append(m.id)), 30)
            assert counts == {"ack": 1} and len(seen) == 1
            assert all(r["processed_at"] is not None for r in await qt.rows())
        finally:
            await qt.drop()

    run(go())
