"""last_error: every retry, delayed retry and move to the dead letter writes why in the
statement that settles, grouped or not, on every form and engine; the dead letter, stats and
`qgen dead` read it back."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import open_project, qgen
from support.engines import Engine, run
from support.queues import make_queue

import runtime
from runtime.outcomes import describe_exception, error_text

FORMS = ["row_lock", "lease", "advisory"]
COLUMNS = ("attempt", "retry_after", "processed_at", "last_error")


def by_n(rows: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    return {r["payload"]["n"]: r for r in rows}


async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    """n 1, 2: a broken deploy (one error for both); 3: an error of its own; 4: a delayed
    retry with its reason; 5: a retry with a reason, then an ack; 6: retry() without one."""
    n = message.payload["n"]
    if n in (1, 2):
        raise RuntimeError("deploy broke")
    if n == 3:
        raise KeyError("user_id")
    if n == 4:
        return runtime.retry_after(3600, reason="upstream answered 503")
    if n == 5:
        return runtime.retry(reason="not yet") if ctx.attempt == 1 else runtime.ack()
    if n == 6 and ctx.attempt == 1:
        return runtime.retry()
    return runtime.ack()


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dead", ["group", "table"])
@pytest.mark.parametrize("window", [0.0, 1.0], ids=["one_by_one", "grouped"])
def test_each_failure_is_written_with_its_settlement(engine, form, dead, window):
    async def go() -> None:
        qt = await make_queue(engine, form, columns=COLUMNS, dead=dead, max_attempts=2)
        try:
            await qt.enqueue(*({"n": n} for n in range(1, 7)))
            counts = await runtime.Consumer(
                qt.url,
                qt.queue,
                handle,
                concurrency=1,
                batch=10,
                settle_window=window,
                retry_policy=runtime.Immediate(),
            ).drain()
            assert counts["dead_letter"] == 3, counts
            dead_rows = by_n(await qt.dead_rows())
            assert {n: r["last_error"] for n, r in dead_rows.items()} == {
                1: "RuntimeError: deploy broke",
                2: "RuntimeError: deploy broke",
                3: "KeyError: 'user_id'",
            }
            live = by_n([r for r in await qt.rows() if r["payload"]["n"] > 3])
            assert live[4]["last_error"] == "upstream answered 503"
            assert live[4]["retry_after_future"] == 1 and live[4]["processed_at"] is None
            # an ack leaves last_error as it was: the row says it failed before it succeeded
            assert live[5]["processed_at"] is not None
            assert live[5]["last_error"] == "not yet"
            assert live[6]["last_error"] == "the handler returned retry() without a reason"

            async with await runtime.connect(qt.url) as db:
                listed = await qt.queue.dead_list(db)
                shown = await qt.queue.dead_show(db, dead_rows[3]["id"])
                stats = await qt.queue.stats(db)
            assert [r["last_error"] for r in listed] == [
                "RuntimeError: deploy broke",
                "RuntimeError: deploy broke",
                "KeyError: 'user_id'",
            ]
            assert shown is not None and shown["deliveries"] == 2
            assert shown["last_error"] == "KeyError: 'user_id'"
            # the newest unfinished row that failed, and the newest dead message
            assert stats["last_error"] == "the handler returned retry() without a reason" or (
                stats["last_error"] == "upstream answered 503"
            )
            assert stats["dead_last_error"] == "KeyError: 'user_id'"
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_timeout_and_a_payload_that_cannot_be_decoded_say_so(engine, form):
    def decoder(obj: dict[str, Any]) -> Any:
        if obj.get("poison"):
            raise ValueError("poison pill")
        return obj

    async def slow(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        await asyncio.sleep(5)
        return runtime.ack()

    async def go() -> None:
        qt = await make_queue(engine, form, columns=COLUMNS, dead="table", max_attempts=1)
        queue = runtime.Queue(qt.queue.rendered, decoder=decoder)
        try:
            await qt.enqueue({"n": 1}, {"poison": True})
            counts = await runtime.Consumer(
                qt.url, queue, slow, concurrency=2, handler_timeout=0.2
            ).drain()
            assert counts["dead_letter"] == 2, counts
            errors = sorted(r["last_error"] for r in await qt.dead_rows())
            assert errors[0] == "handler timed out after 0.2 s", errors
            assert errors[1].startswith("payload cannot be decoded: "), errors
            assert "(poison pill)" in errors[1], errors
        finally:
            await qt.drop()

    run(go())


def test_a_long_reason_is_cut_on_a_character_boundary(engine):
    reason = "é" * 1500 + "\U0001f600" * 1500 + "\x00"

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        if message.payload["n"] == 1:
            return runtime.retry_after(3600, reason=reason)
        return runtime.retry_after(3600, reason="a\x00b")

    async def go() -> None:
        qt = await make_queue(engine, "lease", columns=COLUMNS)
        try:
            await qt.enqueue({"n": 1}, {"n": 2})
            await runtime.Consumer(qt.url, qt.queue, handle, concurrency=1).drain()
            rows = by_n(await qt.rows())
            cut = rows[1]["last_error"]
            assert len(cut) == runtime.LAST_ERROR_MAX
            assert cut == "é" * 1500 + "\U0001f600" * 499 + "…"
            assert rows[2]["last_error"] == "a\\x00b"  # PostgreSQL's text refuses NUL
        finally:
            await qt.drop()

    run(go())


def test_error_text_and_the_exception_line() -> None:
    assert error_text("x" * 5000) == "x" * 1999 + "…"
    assert error_text("\udcff ok") == "? ok"
    assert describe_exception(KeyError("k")) == "KeyError: 'k'"
    assert describe_exception(asyncio.CancelledError()) == "CancelledError"
    with pytest.raises(runtime.InvalidArgument, match="reason must be text"):
        runtime.retry(reason=3)  # type: ignore[arg-type]


# ------------------------------------------------------------------ qgen dead and qgen stats

DECL = """\
dialects = ["{dialect}"]
[queues.jobs]
table = "jobs"
form = "lease"
max_attempts = 3
dead_letter = {{ table = "jobs_dead" }}
[queues.jobs.columns]
id = "id"
payload = "payload"
attempt = "attempt"
locked_until = "locked_until"
enqueued_at = "enqueued_at"
last_error = "why"
"""


@pytest.fixture
def project(engine: Engine, tmp_path: Path) -> Iterator[tuple[Path, str, runtime.Queue]]:
    yield from open_project(engine, tmp_path, DECL)


def test_qgen_dead_shows_the_deliveries_made_and_why(project) -> None:
    cfg, url, queue = project
    c = ["--config", str(cfg), "--db", url]

    async def fail() -> int:
        async with await runtime.connect(url) as conn:
            mid = await queue.enqueue(conn, {"n": 1})

        async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
            raise ValueError("line one\nline two")

        await runtime.Consumer(url, queue, handle, concurrency=1).drain()
        return mid

    mid = run(fail())
    code, out, err = qgen("dead", "show", "jobs", str(mid), *c)
    assert code == 0, err
    assert out.startswith(f"{mid} deliveries=3 enqueued_at="), out
    assert out.rstrip("\n").endswith('last_error="ValueError: line one\\nline two"'), out
    assert len(out.splitlines()) == 1
    code, out, err = qgen("dead", "list", "jobs", *c, "--json")
    (row,) = json.loads(out)
    assert (row["deliveries"], row["attempt"], row["last_error"]) == (
        3,
        4,
        "ValueError: line one\nline two",
    )
    code, out, err = qgen("stats", *c)
    assert code == 0 and "queue 'jobs': last dead error: ValueError: line one\\nline two" in out


def test_a_custom_event_binds_its_reason(engine):
    async def park(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        return runtime.custom("park", reason="waiting for stock")

    async def go() -> None:
        qt = await make_queue(
            engine,
            "row_lock",
            columns=("attempt", "processed_at", "last_error"),
            custom={
                "park": "UPDATE {t} SET processed_at = {now}, last_error = :error WHERE id = :id"
            },
        )
        try:
            await qt.enqueue({"n": 1})
            counts = await runtime.Consumer(qt.url, qt.queue, park, concurrency=1).drain()
            assert counts == {"custom.park": 1}
            (row,) = await qt.rows()
            assert (row["last_error"], row["processed_at"] is not None) == (
                "waiting for stock",
                True,
            )
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_the_default_backoff_keeps_the_reason_of_a_failure(engine, form):
    """Under the default policy a failure comes back later, not at once, and its row says why."""

    async def go() -> None:
        qt = await make_queue(engine, form, columns=COLUMNS, max_attempts=5)
        try:
            await qt.enqueue({"n": 3}, {"n": 6})
            counts = await runtime.Consumer(qt.url, qt.queue, handle, concurrency=1).drain()
            assert counts == {"retry_after": 2}, counts
            rows = by_n(await qt.rows())
            assert rows[3]["last_error"] == "KeyError: 'user_id'"
            assert rows[6]["last_error"] == "the handler returned retry() without a reason"
            assert rows[3]["retry_after_future"] == rows[6]["retry_after_future"] == 1
        finally:
            await qt.drop()

    run(go())
