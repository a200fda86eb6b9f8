"""A renamed queue: its rows stay in the old group (a queue's group defaults to its name);
`qgen verify` lists them with the command that moves them, and `qgen regroup` moves them with
bound parameters, on every engine."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import (
    qgen,
    space_fixture,  # noqa: F401 (the space fixture)
)
from support.engines import Engine, run

import runtime
from qgen.cli import main

DECL = """\
dialects = ["{dialect}"]
[queues.{name}]
table = "work_q"
form = "lease"
max_attempts = 1
dead_letter = {{ group = "dead" }}
[queues.{name}.columns]
id = "id"
payload = "payload"
group = "queue"
attempt = "attempt"
locked_until = "locked_until"
processed_at = "processed_at"
"""
ODD = "o'rders x"


def declare(folder: Path, dialect: str, name: str) -> tuple[Path, runtime.Queue]:
    folder.mkdir(exist_ok=True)
    cfg = folder / "qgen.toml"
    cfg.write_text(DECL.format(dialect=dialect, name=name), encoding="utf-8")
    assert main(["render", "--config", str(cfg)]) == 0
    return cfg, runtime.load(folder / "sql" / dialect / f"{name}.sql")


async def ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    if message.payload.get("poison"):
        raise ValueError("poison")
    return runtime.ack()


def test_a_renamed_queue_finds_and_moves_its_rows(
    engine: Engine, space: str, tmp_path: Path
) -> None:
    _, orders = declare(tmp_path / "before", engine.dialect_name, "orders")

    async def before() -> None:
        async with await runtime.connect(space) as db:
            for s in orders.rendered.require("schema"):
                await db.execute(s, {})
            await orders.enqueue(db, {"poison": True})
        # one dead message, in the dead group both declarations share: not reported
        assert (await runtime.Consumer(space, orders, ack).drain())["dead_letter"] == 1
        async with await runtime.connect(space) as db:
            for n in range(3):
                await orders.enqueue(db, {"n": n})
            await orders.enqueue(db, {"n": 9}, group=ODD)

    run(before())
    cfg, shipping = declare(tmp_path / "after", engine.dialect_name, "shipping")
    c = ["--config", str(cfg), "--db", space]
    code, out, err = qgen("verify", *c)
    assert code == 1, out + err
    lines = out.strip().splitlines()
    assert len(lines) == 2, out
    assert lines[0] == (
        "queue 'shipping': work_q: 1 unfinished row(s) in group \"o'rders x\", which no "
        "declared queue claims (a queue renamed? a queue's group defaults to its name); fix: "
        "move them to a queue's group: qgen regroup shipping --from 'o'\"'\"'rders x' (or "
        'declare default_group = "o\'rders x" on the queue that should claim them)'
    ), out
    assert "3 unfinished row(s) in group 'orders'" in lines[1], out
    assert "qgen regroup shipping --from orders " in lines[1], out
    # the renamed queue claims nothing of them
    assert run(runtime.Consumer(space, shipping, ack).drain()) == {}

    code, out, err = qgen("regroup", "shipping", "--from", "orders", *c)
    assert (code, out.strip()) == (
        0,
        "queue 'shipping': 3 row(s) moved from group 'orders' to 'shipping'",
    )
    code, out, err = qgen("regroup", "shipping", "--from", ODD, *c)
    assert code == 0 and out.startswith("queue 'shipping': 1 row(s) moved"), out + err
    code, out, err = qgen("verify", *c)
    assert (code, out.strip()) == (0, "queue 'shipping': matches its declaration"), out + err
    counts = run(runtime.Consumer(space, shipping, ack).drain())
    assert counts == {"ack": 4}


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    ("group", "says"),
    [
        ("shipping", "group 'shipping' is claimed by queue 'shipping'"),
        ("dead", "group 'dead' is claimed by queue 'shipping' (its dead letter)"),
    ],
)
def test_regroup_refuses_a_group_a_queue_claims(
    engine: Engine, space: str, tmp_path: Path, group: str, says: str
) -> None:
    cfg, _ = declare(tmp_path, engine.dialect_name, "shipping")
    code, out, err = qgen(
        "regroup", "shipping", "--from", group, "--config", str(cfg), "--db", space
    )
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, (code, out, err)


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_queue_regroup_refuses_its_own_and_its_dead_group(
    engine: Engine, space: str, tmp_path: Path
) -> None:
    _, queue = declare(tmp_path, engine.dialect_name, "shipping")

    async def go() -> None:
        async with await runtime.connect(space) as db:
            for g in ("shipping", "dead"):
                with pytest.raises(runtime.InvalidArgument, match=repr(g)):
                    await queue.regroup(db, g)

    run(go())
