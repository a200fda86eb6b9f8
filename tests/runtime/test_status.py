"""Results and progress: ack(result=), ctx.progress() and queue.status() on every form and engine."""

from __future__ import annotations

import asyncio
import json
from datetime import datetime
from pathlib import Path

import pytest
from support.engines import run
from support.queues import make_queue
from support.services import sync_connection

import runtime
from qgen.cli import main
from qgen.declaration import DeclarationError, parse_declaration

FORMS = ["row_lock", "lease", "advisory"]
ALL = ("attempt", "retry_after", "processed_at", "enqueued_at", "last_error", "result", "progress")
RESULT = {"rows": 3, "name": "Zoë", "ratio": 0.5, "tags": ["a", None]}


def _consumer(qt, handle, **kw):
    kw.setdefault("retry_policy", runtime.Immediate())
    return runtime.Consumer(qt.url, qt.queue, handle, concurrency=1, batch=1, **kw)


def _sees_running(form: str, engine: str) -> bool:
    """Whether status can tell a held row from a pending one (see runtime.status)."""
    return form == "lease" or (form == "advisory" and engine in ("postgres", "sqlite"))


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dead", ["group", "table"])
def test_ack_with_result_reads_back_as_done(engine, form, dead):
    async def go():
        qt = await make_queue(engine, form, columns=ALL, dead=dead, max_attempts=3)
        try:
            (id_,) = await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as db:
                before = await qt.queue.status(db, id_)
            assert before is not None
            assert (before.state, before.attempts, before.result) == ("pending", 0, None)
            assert (before.payload, before.payload_error) == ({"n": 1}, None)
            assert isinstance(before.enqueued_at, datetime) and before.processed_at is None

            async def handle(message, ctx):
                return runtime.ack(result=RESULT)

            counts = await _consumer(qt, handle).drain()
            assert counts["ack"] == 1
            async with await runtime.connect(qt.url) as db:
                after = await qt.queue.status(db, id_)
                assert await qt.queue.status(db, id_ + 1000) is None  # unknown id
            assert after == runtime.Status(
                id=id_,
                state="done",
                attempts=1,
                result=RESULT,
                progress=None,
                last_error=None,
                enqueued_at=before.enqueued_at,
                processed_at=after.processed_at,
                payload={"n": 1},
            )
            assert after.processed_at is not None and after.processed_at >= before.enqueued_at
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dead", ["group", "table"])
def test_retries_show_attempts_and_last_error_then_dead(engine, form, dead):
    async def go():
        qt = await make_queue(engine, form, columns=ALL, dead=dead, max_attempts=2)
        try:
            (id_,) = await qt.enqueue({"n": 1})

            async def fail(message, ctx):
                raise RuntimeError(f"boom {ctx.attempt}")

            consumer = _consumer(qt, fail)
            # one delivery, then stop: the retry is pending again
            consumer.batch = 1
            first = asyncio.create_task(consumer.run())
            for _ in range(200):
                async with await runtime.connect(qt.url) as db:
                    s = await qt.queue.status(db, id_)
                if s is not None and s.attempts == 1 and s.last_error:
                    break
                await asyncio.sleep(0.02)
            consumer.stop()
            await first
            async with await runtime.connect(qt.url) as db:
                s = await qt.queue.status(db, id_)
            assert s is not None and s.state in ("pending", "dead")
            if s.state == "pending":  # the run may have reached the second delivery
                assert (s.attempts, s.last_error) == (1, "RuntimeError: boom 1")
            await _consumer(qt, fail).drain()
            async with await runtime.connect(qt.url) as db:
                s = await qt.queue.status(db, id_)
            assert s is not None
            assert (s.state, s.attempts, s.last_error) == ("dead", 2, "RuntimeError: boom 2")
            assert s.result is None and s.processed_at is None
            assert s.payload == {"n": 1}  # from the dead-letter group or table
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_progress_is_seen_while_the_handler_runs(engine, form):
    async def go():
        qt = await make_queue(engine, form, columns=ALL, dead="group")
        try:
            (id_,) = await qt.enqueue({"n": 1})
            reported, release = asyncio.Event(), asyncio.Event()

            async def handle(message, ctx):
                await ctx.progress({"done": 40, "of": 100})
                await ctx.progress(50)  # the last one written is what status reads
                reported.set()
                await release.wait()
                return runtime.ack(result="ok")

            task = asyncio.create_task(_consumer(qt, handle).drain())
            await asyncio.wait_for(reported.wait(), 10)
            serial = form == "row_lock" and engine.name == "sqlite"  # the file's write lock
            if not serial:
                async with await runtime.connect(qt.url) as db:
                    s = await asyncio.wait_for(qt.queue.status(db, id_), 10)
                assert s is not None
                if _sees_running(form, engine.name):
                    assert s.state == "running"
                else:
                    assert s.state == "pending"  # a hold SQL cannot see (documented)
                if form == "row_lock":
                    assert s.progress is None  # written in the claim's transaction
                else:
                    assert s.progress == 50
            release.set()
            await asyncio.wait_for(task, 10)
            async with await runtime.connect(qt.url) as db:
                s = await qt.queue.status(db, id_)
            assert s is not None
            assert (s.state, s.progress, s.result) == ("done", 50, "ok")
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_a_result_that_cannot_be_stored_is_a_retry_saying_why(engine, form):
    async def go():
        qt = await make_queue(engine, form, columns=ALL, dead="table", max_attempts=2)
        try:
            (id_,) = await qt.enqueue({"n": 1})
            seen = []

            async def handle(message, ctx):
                seen.append(ctx.attempt)
                if ctx.attempt == 1:
                    return runtime.ack(result={"when": object()})
                return runtime.ack(result=[1, 2])

            counts = await _consumer(qt, handle).drain()
            assert seen == [1, 2] and counts["unstorable_result"] == 1
            async with await runtime.connect(qt.url) as db:
                s = await qt.queue.status(db, id_)
            assert s is not None and (s.state, s.result, s.attempts) == ("done", [1, 2], 2)
            assert s.last_error is not None
            assert s.last_error.startswith("the handler's result cannot be stored: a object")
        finally:
            await qt.drop()

    run(go())


def test_progress_that_cannot_be_stored_raises_in_the_handler(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=ALL)
        try:
            (id_,) = await qt.enqueue({"n": 1})
            errors = []

            async def handle(message, ctx):
                try:
                    await ctx.progress(float("nan"))
                except runtime.PayloadError as exc:
                    errors.append(str(exc))
                return None

            await _consumer(qt, handle).drain()
            assert errors and errors[0].startswith("progress cannot be stored: nan")
            async with await runtime.connect(qt.url) as db:
                s = await qt.queue.status(db, id_)
            assert s is not None and (s.state, s.progress) == ("done", None)
        finally:
            await qt.drop()

    run(go())


def test_without_the_columns(engine):
    """No result or progress column: ack(result=) acks with a warning, ctx.progress raises
    ConfigurationError; without processed_at an ack deletes the row and status says None."""

    async def go():
        qt = await make_queue(engine, "lease", columns=("attempt",))
        try:
            a, b = await qt.enqueue({"n": 1}, {"n": 2})
            errors = []

            async def handle(message, ctx):
                try:
                    await ctx.progress(1)
                except runtime.ConfigurationError as exc:
                    errors.append(str(exc))
                return runtime.ack(result=1)

            async with await runtime.connect(qt.url) as db:
                s = await qt.queue.status(db, a)
                assert s is not None and (s.state, s.attempts, s.result) == ("pending", 0, None)
                assert s.payload == {"n": 1}
            counts = await _consumer(qt, handle).drain()
            assert counts["ack"] == 2 and len(errors) == 2 and "no progress column" in errors[0]
            async with await runtime.connect(qt.url) as db:
                assert await qt.queue.status(db, a) is None  # deleted by its ack
                assert await qt.queue.status(db, b) is None
        finally:
            await qt.drop()

    run(go())


def test_sync_status(engine):
    async def setup():
        qt = await make_queue(engine, "lease", columns=ALL)
        (id_,) = await qt.enqueue({"n": 1})
        return qt, id_

    qt, id_ = run(setup())
    try:
        with sync_connection(engine, "driver") as (conn, _commit, _rollback, _execute):
            s = qt.queue.sync.status(conn, id_)
            assert s is not None and s.state == "pending" and s.id == id_
            assert s.payload == {"n": 1}
            assert qt.queue.sync.status(conn, id_ + 99) is None
    finally:
        run(qt.drop())


@pytest.mark.parametrize("dead", ["group", "table"])
def test_status_decodes_the_payload_with_the_queues_decoder(engine, dead):
    """The payload reads back as a handler receives it (the queue's decoder); one the decoder
    refuses, and so dead-lettered unhandled, reads back as its text and why."""

    class Money(tuple):
        pass

    def decoder(obj):
        if obj.get("poison"):
            raise ValueError("poison pill")
        return Money((obj["amount"], obj["currency"])) if "currency" in obj else obj

    async def go():
        qt = await make_queue(engine, "lease", columns=ALL, dead=dead, max_attempts=1)
        queue = runtime.Queue(qt.queue.rendered, decoder=decoder)
        try:
            good, bad = await qt.enqueue(
                {"price": {"amount": 5, "currency": "EUR"}, "tags": ["a"]}, {"poison": True}
            )

            async def handle(message, ctx):
                return runtime.ack()

            counts = await runtime.Consumer(qt.url, queue, handle).drain()
            assert (counts["ack"], counts["dead_letter"]) == (1, 1), counts
            async with await runtime.connect(qt.url) as db:
                s = await queue.status(db, good)
                d = await queue.status(db, bad)
            assert s is not None and s.state == "done" and s.payload_error is None
            assert s.payload == {"price": Money((5, "EUR")), "tags": ["a"]}
            assert isinstance(s.payload["price"], Money)
            assert d is not None and d.state == "dead"
            assert d.payload_error is not None and "(poison pill)" in d.payload_error
            assert isinstance(d.payload, str) and json.loads(d.payload) == {"poison": True}
        finally:
            await qt.drop()

    run(go())


def test_status_refuses_an_id_that_is_not_one(engine):
    async def go():
        qt = await make_queue(engine, "lease", columns=ALL)
        try:
            async with await runtime.connect(qt.url) as db:
                with pytest.raises(runtime.InvalidArgument, match="message id"):
                    await qt.queue.status(db, "7")
        finally:
            await qt.drop()

    run(go())


def _decl(columns, **extra):
    queue = {"table": "t", "form": "lease", "lease_s": 30, "columns": columns, **extra}
    return {"dialects": ["sqlite"], "queues": {"q": queue}}


def test_declaration_keeps_a_result_only_on_a_row_that_stays():
    base = {"id": "id", "payload": "payload", "locked_until": "locked_until", "result": "r"}
    with pytest.raises(DeclarationError, match=r"columns\.result.*processed_at"):
        parse_declaration(_decl(base))
    ack = "UPDATE t SET processed_at = CURRENT_TIMESTAMP WHERE id = :id AND locked_until = :token"
    with pytest.raises(DeclarationError, match=r"statements\.ack.*ack_result"):
        parse_declaration(_decl(base | {"processed_at": "p"}, statements={"ack": ack}))
    parse_declaration(_decl(base | {"processed_at": "p", "progress": "pr"}))


def test_cli_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    url = f"sqlite:///{tmp_path / 'q.db'}?mode=rwc"
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(
        'dialects = ["sqlite"]\nout = "sql"\n[queues.jobs]\ntable = "jobs"\nform = "lease"\n'
        "lease_s = 30\n[queues.jobs.columns]\n"
        'id = "id"\npayload = "payload"\nlocked_until = "locked_until"\nattempt = "attempt"\n'
        'processed_at = "processed_at"\nresult = "result"\nprogress = "progress"\n',
        encoding="utf-8",
    )
    assert main(["render", "--config", str(cfg)]) == 0
    queue = runtime.load(tmp_path / "sql" / "sqlite" / "jobs.sql")

    async def go():
        async with await runtime.connect(url) as conn:
            await runtime.apply(conn, queue)
            id_ = await queue.enqueue(conn, {"n": 1})

        async def handle(message, ctx):
            return runtime.ack(result={"n": 2})

        await runtime.Consumer(url, queue, handle).drain()
        return id_

    id_ = run(go())
    capsys.readouterr()
    assert main(["status", "jobs", str(id_), "--config", str(cfg), "--db", url]) == 0
    line = capsys.readouterr().out
    assert line.startswith(f'{id_} state=done attempts=1 result={{"n": 2}} progress=null')
    assert "processed_at=" in line and line.count("\n") == 1
    assert main(["status", "jobs", str(id_ + 1), "--config", str(cfg), "--db", url]) == 1
    out = capsys.readouterr()
    assert out.out == "" and "no message" in out.err and out.err.count("\n") == 1
