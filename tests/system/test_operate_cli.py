"""`qgen stats`, `qgen dead list|show|redrive|purge` and `qgen prune` against a real database,
in-process; bad input is one line and exit 2."""

from __future__ import annotations

import json

import pytest
from support.cli import (
    project_fixture,  # noqa: F401 (the project fixture)
    qgen,
)
from support.engines import run

import runtime


def test_stats_dead_and_prune_from_the_command_line(project) -> None:
    cfg, url, queue = project
    c = ["--config", str(cfg), "--db", url]

    async def fill() -> None:
        async with await runtime.connect(url) as conn:
            for n in range(3):
                await queue.enqueue(conn, {"n": n})

        async def handle(message, ctx):
            return runtime.ack() if message.payload["n"] == 0 else runtime.retry()

        await runtime.Consumer(url, queue, handle, concurrency=1).drain()
        async with await runtime.connect(url) as conn:
            await queue.enqueue(conn, {"n": 3})

    run(fill())
    code, out, err = qgen("stats", *c, "--json")
    assert code == 0, err
    stats = json.loads(out)["jobs"]
    assert {k: stats[k] for k in ("ready", "delayed", "in_flight", "dead", "processed")} == {
        "ready": 1,
        "delayed": 0,
        "in_flight": 0,
        "dead": 2,
        "processed": 1,
    }
    code, out, err = qgen("stats", *c)
    assert code == 0 and out.splitlines()[0].split()[:3] == ["queue", "ready", "delayed"], out
    assert out.splitlines()[1].split()[:2] == ["jobs", "1"], out
    # at most one row of each kind read: the 2 dead stop at 1, the 1 unfinished is exact
    code, out, err = qgen("stats", *c, "--count-cap", "1", "--json")
    assert code == 0, err
    capped = json.loads(out)["jobs"]
    assert (capped["ready"], capped["dead"], capped["capped"]) == (1, 1, ["dead"]), out
    code, out, err = qgen("stats", *c, "--count-cap", "1")
    assert code == 0 and out.splitlines()[1].split()[:5] == ["jobs", "1", "0", "0", ">=1"], out

    code, out, err = qgen("dead", "list", "jobs", *c, "--json")
    dead = json.loads(out)
    assert code == 0 and [d["payload"] for d in dead] == [{"n": 1}, {"n": 2}], out + err
    first, second = dead[0]["id"], dead[1]["id"]
    code, out, _ = qgen("dead", "list", "jobs", *c, "--newest", "--limit", "1")
    assert code == 0 and out.startswith(f"{second} "), out
    code, out, _ = qgen("dead", "show", "jobs", str(first), *c)
    assert code == 0 and '"n": 1' in out, out
    code, out, _ = qgen("dead", "redrive", "jobs", str(first), *c)
    assert (code, out.strip()) == (0, "queue 'jobs': 1 dead message(s) sent back"), out
    code, out, _ = qgen("dead", "purge", "jobs", "--all", *c)
    assert (code, out.strip()) == (0, "queue 'jobs': 1 dead message(s) deleted"), out
    code, out, _ = qgen("prune", *c, "--older-than", "0")
    assert (code, out.strip()) == (0, "queue 'jobs': 1 processed row(s) deleted"), out
    code, out, _ = qgen("stats", *c, "--json")
    stats = json.loads(out)["jobs"]
    assert (stats["ready"], stats["dead"], stats["processed"]) == (2, 0, 0), out


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["stats", "nosuch"], "no queue 'nosuch'"),
        (["stats", "--count-cap", "0"], "--count-cap must be 1 or more"),
        (["dead", "redrive", "jobs"], "give the message ids, or --all"),
        (["dead", "purge", "jobs", "1", "--all"], "give the message ids, or --all"),
        (["dead", "show", "jobs"], "give exactly one message id"),
        (["dead", "show", "jobs", "1", "--all"], "--all is for redrive and purge"),
        (["prune", "--older-than", "-5"], "older_than_s must be from 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(project, argv, says) -> None:
    cfg, url, _ = project
    code, out, err = qgen(*argv, "--config", str(cfg), "--db", url)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (code, out, err)


def test_cancel_from_the_command_line(project) -> None:
    cfg, url, queue = project
    c = ["--config", str(cfg), "--db", url]

    async def enqueue() -> int:
        async with await runtime.connect(url) as conn:
            return await queue.enqueue(conn, {"n": 1})

    mid = run(enqueue())
    code, out, err = qgen("cancel", "jobs", str(mid), *c)
    assert (code, out.strip(), err) == (0, f"queue 'jobs': message {mid} cancelled", "")
    code, out, err = qgen("cancel", "jobs", str(mid), *c)
    assert code == 1 and out == "" and "not cancelled" in err and len(err.splitlines()) == 1
    code, _, err = qgen("cancel", "nope", "1", *c)
    assert code == 2 and len(err.splitlines()) == 1


def test_pause_resume_and_stats_from_the_command_line(project) -> None:
    cfg, url, queue = project
    c = ["--config", str(cfg), "--db", url]
    code, out, err = qgen("pause", "jobs", *c)
    assert (code, out.splitlines()) == (
        0,
        ["queue 'jobs': the whole queue paused", "queue 'jobs': paused now: the whole queue"],
    ), err
    code, out, _ = qgen("pause", "jobs", *c)  # idempotent
    assert out.splitlines()[0] == "queue 'jobs': the whole queue was paused already"
    code, out, _ = qgen("stats", *c)
    assert "queue 'jobs': PAUSED: the whole queue (qgen resume)" in out.splitlines()
    code, out, _ = qgen("stats", *c, "--json")
    assert json.loads(out)["jobs"]["paused"] is True
    assert json.loads(out)["jobs"]["paused_scopes"] == [None]

    async def handled() -> dict[str, int]:
        async with await runtime.connect(url) as conn:
            await queue.enqueue(conn, {"n": 1})

        async def handle(message, ctx):
            return runtime.ack()

        return await runtime.Consumer(url, queue, handle).drain()

    assert run(handled()) == {}
    code, out, _ = qgen("resume", "jobs", *c)
    assert (code, out.splitlines()) == (
        0,
        ["queue 'jobs': the whole queue resumed", "queue 'jobs': paused now: nothing"],
    )
    assert "PAUSED" not in qgen("stats", *c)[1]
    assert run(handled()) == {"ack": 2}
    # a group on a queue without a group column: one line, exit 2
    code, out, err = qgen("pause", "jobs", "--group", "eu", *c)
    assert code == 2 and "no group column" in err and len(err.strip().splitlines()) == 1
