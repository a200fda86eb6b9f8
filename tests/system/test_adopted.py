"""Adopting an existing table: other_columns with their types, a dead-letter table created
alike, `qgen verify` comparing the two, and a message that goes to the dead letter and back
with its typed values, on every engine."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import qgen
from support.engines import Engine, run
from support.statements import create_namespace, drop_namespace

import runtime
from qgen.cli import main

DECL = """\
dialects = ["{dialect}"]
[queues.jobs]
table = "jobs"
form = "lease"
max_attempts = 1
dead_letter = {{ table = "jobs_dead" }}
other_columns = {others}
[queues.jobs.columns]
id = "id"
payload = "payload"
attempt = "attempt"
locked_until = "locked_until"
last_error = "last_error"
"""
TYPED = '{ user_id = "BIGINT NOT NULL", kind = "TEXT" }'
UNTYPED = '["user_id", "kind"]'

#: the service's table as it was before qgen: its own user_id (a BIGINT no enqueue may omit)
ADOPTED = {
    "postgres": "CREATE TABLE jobs (id BIGSERIAL PRIMARY KEY, payload JSONB NOT NULL, "
    "attempt INT NOT NULL DEFAULT 1, locked_until TIMESTAMPTZ, last_error TEXT, "
    "user_id BIGINT NOT NULL, kind TEXT)",
    "mysql": "CREATE TABLE jobs (id BIGINT AUTO_INCREMENT PRIMARY KEY, payload JSON NOT NULL, "
    "attempt INT NOT NULL DEFAULT 1, locked_until DATETIME(6) NULL, last_error TEXT NULL, "
    "user_id BIGINT NOT NULL, kind TEXT NULL)",
    "sqlite": "CREATE TABLE jobs (id INTEGER PRIMARY KEY AUTOINCREMENT, payload TEXT NOT NULL, "
    "attempt INTEGER NOT NULL DEFAULT 1, locked_until TEXT, last_error TEXT, "
    "user_id BIGINT NOT NULL, kind TEXT)",
}


@pytest.fixture
def space(engine: Engine) -> Iterator[str]:
    name, url = run(create_namespace(engine))
    yield url
    run(drop_namespace(engine, name))


def project(tmp_path: Path, engine: Engine, others: str) -> tuple[Path, runtime.Queue]:
    tmp_path.mkdir(exist_ok=True)
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(DECL.format(dialect=engine.dialect_name, others=others), encoding="utf-8")
    assert main(["render", "--config", str(cfg)]) == 0
    return cfg, runtime.load(tmp_path / "sql" / engine.dialect_name / "jobs.sql")


async def execute(url: str, *statements: str) -> None:
    async with await runtime.connect(url) as conn:
        for s in statements:
            await conn.execute(s, {})


def adopted(engine: Engine) -> str:
    return ADOPTED["mysql" if engine.name in ("mariadb", "mysql") else engine.name]


def test_a_typed_adopted_table_goes_to_the_dead_letter_and_back(
    engine: Engine, space: str, tmp_path: Path
) -> None:
    cfg, queue = project(tmp_path, engine, TYPED)
    c = ["--config", str(cfg), "--db", space]
    run(execute(space, adopted(engine), *queue.rendered.require("schema")))
    code, out, err = qgen("verify", *c)
    # matches; the one thing to know: user_id is NOT NULL, so every enqueue passes it
    assert code == 0, out + err
    lines = out.strip().splitlines()
    assert lines[0] == "queue 'jobs': matches its declaration", out
    assert len(lines) == 2 and "note: jobs: column 'user_id' (other_columns) is NOT NULL" in out
    assert "every enqueue needs values={'user_id': …}" in out, out

    async def fail_then_back() -> list[dict]:
        async with await runtime.connect(space) as db:
            await queue.enqueue(db, {"n": 1}, values={"user_id": 2**40 + 7, "kind": "signup"})
            with pytest.raises(runtime.BrokerError):  # NOT NULL: refused, nothing enqueued
                await queue.enqueue(db, {"n": 2}, values={"kind": "signup"})

        async def broken(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
            raise RuntimeError("deploy broke")

        counts = await runtime.Consumer(space, queue, broken, concurrency=1).drain()
        assert counts["dead_letter"] == 1
        async with await runtime.connect(space) as db:
            return await db.fetchall(
                "SELECT user_id, kind, last_error FROM jobs_dead", {}
            ) + await db.fetchall("SELECT COUNT(*) AS n FROM jobs", {})

    dead, live = run(fail_then_back())
    assert (int(dead["user_id"]), dead["kind"], dead["last_error"]) == (
        2**40 + 7,
        "signup",
        "RuntimeError: deploy broke",
    )
    assert live["n"] == 0
    code, out, err = qgen("dead", "redrive", "jobs", "--all", *c)
    assert (code, out.strip()) == (0, "queue 'jobs': 1 dead message(s) sent back"), out + err

    async def handled() -> list[tuple]:
        seen: list[tuple] = []

        async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
            seen.append((message.payload, ctx.attempt))
            return runtime.ack()

        async with await runtime.connect(space) as db:
            back = await db.fetchall("SELECT user_id, kind FROM jobs", {})
        assert [(int(r["user_id"]), r["kind"]) for r in back] == [(2**40 + 7, "signup")]
        await runtime.Consumer(space, queue, handle, concurrency=1).drain()
        return seen

    assert run(handled()) == [({"n": 1}, 1)]


def test_verify_compares_the_dead_letter_table_with_the_queue_table(
    engine: Engine, space: str, tmp_path: Path
) -> None:
    # the dead-letter table an untyped declaration creates: every other column TEXT
    _, untyped = project(tmp_path / "untyped", engine, UNTYPED)
    cfg, _ = project(tmp_path, engine, TYPED)
    run(execute(space, adopted(engine), *untyped.rendered.require("schema")))
    code, out, err = qgen("verify", "--config", str(cfg), "--db", space)
    assert code == 1, out + err
    wrong = [ln for ln in out.splitlines() if "in the dead-letter table but" in ln]
    assert len(wrong) == 1 and "column 'user_id' is" in wrong[0], out
    assert "fix: give jobs_dead.user_id the type bigint" in wrong[0], out
    assert 'user_id = "BIGINT' in wrong[0], out


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
@pytest.mark.parametrize(
    "others",
    [
        '{ user_id = "BIGINT); DROP TABLE x; --" }',
        "{ user_id = \"TEXT DEFAULT 'x'\" }",
        '{ user_id = "BIGINT PRIMARY KEY" }',
        '{ user_id = "NUMERIC((12))" }',
        '{ user_id = "" }',
        "{ user_id = 5 }",
        '"user_id"',
    ],
)
def test_a_column_type_outside_the_grammar_is_one_line(
    engine: Engine, tmp_path: Path, others: str
) -> None:
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(DECL.format(dialect="sqlite", others=others), encoding="utf-8")
    code, out, err = qgen("render", "--config", str(cfg))
    assert code != 0 and len(err.strip().splitlines()) == 1, (code, out, err)
    assert "other_columns" in err and "fix:" in err, err


@pytest.mark.parametrize("engine", ["sqlite"], indirect=True)
def test_typed_other_columns_render_into_both_tables(engine: Engine, tmp_path: Path) -> None:
    _, queue = project(tmp_path, engine, '{ user_id = "NUMERIC(12, 2)  NOT NULL", kind = "TEXT" }')
    schema = "\n".join(queue.rendered.require("schema"))
    assert schema.count('"user_id" NUMERIC(12, 2) NOT NULL') == 2, schema
    assert queue.rendered.header.other_columns == ("user_id", "kind")
    assert json.loads(json.dumps(list(queue.rendered.header.other_columns))) == ["user_id", "kind"]
