"""Test helper for the operator console: a rendered declaration with three queues in a
namespace of the test's own, messages in every state, and the database's own counts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import runtime
from qgen.cli import main
from support.engines import Engine, run
from support.queues import NOW
from support.statements import create_namespace, drop_namespace

TOKEN = "console-test-token-0123456789"
SCRIPT = "<script>alert('x')</script>"

# jobs: lease form, a dead-letter table, processed rows kept; tasks: row lock, a dead-letter
# group on a shared table; pings: no dead letter; ledger: lease, a dead-letter group, priority,
# fifo_key, last_error, and a group no declared queue claims ("stray"); an outbox
DECL = """\
dialects = ["{dialect}"]

[queues.jobs]
table = "jobs"
form = "lease"
max_attempts = 1
dead_letter = {{ table = "jobs_dead" }}
[queues.jobs.columns]
id = "id"
payload = "payload"
attempt = "attempt"
retry_after = "retry_after"
locked_until = "locked_until"
processed_at = "processed_at"
enqueued_at = "enqueued_at"

[queues.tasks]
table = "tasks"
form = "row_lock"
max_attempts = 1
dead_letter = {{ group = "tasks_dead" }}
[queues.tasks.columns]
id = "id"
payload = "payload"
group = "grp"
attempt = "attempt"
retry_after = "retry_after"

[queues.pings]
table = "pings"
form = "lease"
[queues.pings.columns]
id = "id"
payload = "payload"
locked_until = "locked_until"

[queues.ledger]
table = "ledger"
form = "lease"
max_attempts = 1
dead_letter = {{ group = "ledger_dead" }}
[queues.ledger.columns]
id = "id"
payload = "payload"
group = "grp"
attempt = "attempt"
retry_after = "retry_after"
locked_until = "locked_until"
processed_at = "processed_at"
enqueued_at = "enqueued_at"
priority = "priority"
fifo_key = "account"
last_error = "last_error"

[outbox]
table = "outbox"
[outbox.columns]
id = "id"
payload = "payload"
created_at = "created_at"
processed_at = "processed_at"
"""


@dataclass
class Project:
    engine: Engine
    config: Path
    url: str
    queues: dict[str, runtime.Queue]
    outbox: Any = None

    def q(self, name: str) -> str:
        return runtime.contract.dialects.DIALECTS[self.engine.dialect_name].quote_ident(name)

    async def count(self, table: str, where: str = "1=1") -> int:
        async with await runtime.connect(self.url) as db:
            row = await db.fetchone(f"SELECT COUNT(*) AS n FROM {self.q(table)} WHERE {where}", {})
        assert row is not None
        return int(row["n"])

    async def jobs_counts(self) -> dict[str, int]:
        """The jobs table's counts by the test's own SQL (the database's clock)."""
        now = NOW[self.engine.dialect_name]
        pending = "processed_at IS NULL"
        return {
            "ready": await self.count(
                "jobs",
                f"{pending} AND (retry_after IS NULL OR retry_after <= {now}) "
                f"AND (locked_until IS NULL OR locked_until < {now})",
            ),
            "delayed": await self.count("jobs", f"{pending} AND retry_after > {now}"),
            "in_flight": await self.count("jobs", f"{pending} AND locked_until >= {now}"),
            "dead": await self.count("jobs_dead"),
            "processed": await self.count("jobs", "processed_at IS NOT NULL"),
        }

    async def dead_ids(self, table: str = "jobs_dead", where: str = "1=1") -> list[int]:
        async with await runtime.connect(self.url) as db:
            rows = await db.fetchall(
                f"SELECT id FROM {self.q(table)} WHERE {where} ORDER BY id", {}
            )
        return [int(r["id"]) for r in rows]


def make_project(engine: Engine, tmp_path: Path) -> tuple[Project, str]:
    """Render, create the tables and fill them: jobs holds 1 processed, 3 dead (one with a
    <script> payload), 2 ready and 1 delayed message; tasks 1 dead and 1 ready. Returns the
    project and the namespace to drop."""
    name, url = run(create_namespace(engine))
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(DECL.format(dialect=engine.dialect_name), encoding="utf-8")
    assert main(["render", "--config", str(cfg)]) == 0
    out = tmp_path / "sql" / engine.dialect_name
    queues = {n: runtime.load(out / f"{n}.sql") for n in ("jobs", "tasks", "pings", "ledger")}
    project = Project(engine, cfg, url, queues, runtime.load(out / "outbox.sql"))
    run(_fill(project))
    return project, name


async def _fill(p: Project) -> None:
    jobs, tasks, ledger = p.queues["jobs"], p.queues["tasks"], p.queues["ledger"]
    async with await runtime.connect(p.url) as db:
        for q in [*p.queues.values(), p.outbox]:
            for s in q.rendered.require("schema"):
                await db.execute(s, {})
        for payload in ({"n": 1}, {"n": 2}, {"n": 3, "html": SCRIPT}, {"n": 4}):
            await jobs.enqueue(db, payload)
        await tasks.enqueue(db, {"t": 1, "group": SCRIPT})

    def outcome(message: Any) -> runtime.Outcome:
        return runtime.ack() if message.payload.get("n") == 1 else runtime.retry()

    async def handle(message: Any, ctx: Any) -> runtime.Outcome:
        return outcome(message)

    await runtime.Consumer(p.url, jobs, handle, concurrency=1).drain()
    await runtime.Consumer(p.url, tasks, handle, concurrency=1).drain()
    async with await runtime.connect(p.url) as db:
        # ledger: 2 finished, 1 dead, then ready ones of priorities 0 and 5, acct-1 with two
        # waiting behind its head; 2 rows in a group no declared queue claims
        for payload in ({"n": 1}, {"n": 1}, {"n": 2}):
            await ledger.enqueue(db, payload)
    await runtime.Consumer(p.url, ledger, handle, concurrency=1).drain()
    async with await runtime.connect(p.url) as db:
        for priority, key in (
            (0, "acct-1"),
            (5, "acct-1"),
            (5, "acct-1"),
            (5, "acct-2"),
            (0, None),
        ):
            await ledger.enqueue(db, {"n": 9}, priority=priority, fifo_key=key)
        await ledger.enqueue(db, {"n": 9}, group="stray")
        await ledger.enqueue(db, {"n": 9}, group="stray", delay=600)
        put = [await p.outbox.put(db, {"o": n}) for n in range(3)]
        await db.execute(p.outbox.rendered.require("mark")[0], {"id": put[0]})  # relayed
    async with await runtime.connect(p.url) as db:
        await jobs.enqueue(db, {"n": 5})
        await jobs.enqueue(db, {"n": 6})
        await jobs.enqueue(db, {"n": 7}, delay=600)
        await tasks.enqueue(db, {"t": 2})


def drop_project(engine: Engine, name: str) -> None:
    run(drop_namespace(engine, name))
