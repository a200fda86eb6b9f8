"""`qgen demo`: the README's main job: a SQLite queue rendered, filled and drained, every outcome shown."""

from __future__ import annotations

import asyncio
import logging
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TextIO

from qgen.build import render_declaration
from qgen.declaration import parse_declaration

DEMO = {
    "dialects": ["sqlite"],
    "out": "sql",
    "queues": {
        "orders": {
            "table": "orders_queue",
            "form": "lease",
            "lease_s": 30,
            "max_attempts": 3,
            "dead_letter": {"group": "orders_dead"},
            "columns": {
                "id": "id",
                "payload": "body",
                "group": "queue",
                "attempt": "attempt",
                "retry_after": "retry_after",
                "locked_until": "locked_until",
                "processed_at": "processed_at",
            },
            "custom": {
                "park": "UPDATE orders_queue SET queue = 'orders_parked', locked_until = NULL "
                "WHERE id = :id AND locked_until = :token",
            },
        }
    },
}

# what the handler returns for each message: (payload, outcome per delivery)
SCRIPT = [
    ("pay invoice 1", ["ack"]),
    ("poison message", ["drop"]),
    ("flaky once", ["retry", "ack"]),
    ("slow partner", ["retry_after", "ack"]),
    ("always failing", ["retry", "retry", "retry"]),
    ("raises once", ["raise", "ack"]),
    ("needs a human", ["park"]),
]


async def _demo(folder: Path) -> list[tuple[str, str, str]]:
    import runtime

    decl = parse_declaration(DEMO, folder / "qgen.toml")
    for rel, text in render_declaration(decl).items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text, encoding="utf-8")
    sql_file = folder / "sql" / "sqlite" / "orders.sql"
    queue = runtime.load(sql_file)
    url = f"sqlite:///{folder / 'demo.db'}"
    db = await runtime.connect(url)
    for statement in queue.steps.schema:
        await db.execute(statement, {})
    for text, _ in SCRIPT:
        await queue.enqueue(db, {"text": text})

    seen: dict[int, list[str]] = {}

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        plan = dict(SCRIPT)[message.payload["text"]]
        step = plan[min((ctx.attempt or 1) - 1, len(plan) - 1)]
        seen.setdefault(message.id, []).append(step)
        if step == "raise":
            raise RuntimeError("the partner API timed out")
        if step == "retry_after":
            return runtime.retry_after(0.2)
        if step == "park":
            return runtime.custom("park")
        outcome: runtime.Outcome = getattr(runtime, step)()
        return outcome

    # the demo retries at once to stay short; a queue with retry_after backs off by default
    consumer = runtime.Consumer(
        url,
        queue,
        handle,
        concurrency=2,
        batch=5,
        poll_interval=0.05,
        retry_policy=runtime.Immediate(),
    )
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:  # drain, then wait for the delayed message once
        await consumer.drain()
        row = await db.fetchone(
            "SELECT COUNT(*) AS n FROM orders_queue WHERE queue = 'orders' "
            "AND processed_at IS NULL",
            {},
        )
        if not row or not row["n"]:
            break
        await asyncio.sleep(0.1)
    rows = await db.fetchall(
        "SELECT id, body, queue, attempt, processed_at IS NOT NULL AS done FROM orders_queue "
        "ORDER BY id",
        {},
    )
    await db.close()
    report = []
    for r in rows:
        text = runtime.queue.decode_payload(r["body"])["text"]
        where = "processed" if r["done"] else f"group {r['queue']}"
        report.append(
            (text, " → ".join(seen.get(r["id"], [])), f"{where}, attempt column {r['attempt']}")
        )
    return report


class _ShortLog(logging.StreamHandler[TextIO]):
    """The demo's log: one line a record, the exception by its message (no traceback)."""

    def __init__(self) -> None:
        super().__init__(sys.stdout)

    def format(self, record: logging.LogRecord) -> str:
        line = f"  {record.levelname.lower()} {record.name}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            line += f" ({type(record.exc_info[1]).__name__}: {record.exc_info[1]})"
        return line


def main(keep: bool = False) -> int:
    """Run the demo in a temporary folder and print a table of what happened to each message."""
    logging.basicConfig(level=logging.WARNING, handlers=[_ShortLog()], force=True)
    print("the runtime's log while draining:")
    folder = Path(tempfile.mkdtemp(prefix="qgen-demo-"))
    started = time.monotonic()
    try:
        report = asyncio.run(_demo(folder))
    finally:
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    w1 = max(len(r[0]) for r in report)
    w2 = max(len(r[1]) for r in report)
    print(f"\n{'message':<{w1}}  {'handler returned':<{w2}}  where the row ended")
    print(f"{'-' * w1}  {'-' * w2}  {'-' * 30}")
    for text, outcomes, where in report:
        print(f"{text:<{w1}}  {outcomes:<{w2}}  {where}")
    print(
        f"\nrendered, enqueued and drained {len(report)} messages on SQLite in "
        f"{time.monotonic() - started:.1f}s" + (f"; files kept in {folder}" if keep else "")
    )
    return 0
