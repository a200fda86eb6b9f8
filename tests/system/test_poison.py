"""Poison messages in every form: a message whose handling kills its worker or its connection.

Such a delivery never settles, so no retry ever reaches max_attempts; what counts it is the
claim (lease), the take (advisory) or, for row lock with max_attempts, a count the claim
commits before the handler runs. A message delivered max_attempts times without a
settlement goes to the dead letter unhandled at its next claim. Two ways to die:

* the handler sends SIGKILL to its own process (a subprocess worker, started again and
  again until the message is dead), on every engine and form;
* the handler terminates its worker's server sessions (``pg_terminate_backend`` / ``KILL``)
  and raises, plain and transactional, on the server engines (lease, plain: its retry is
  settled on the worker's next connection, so the cap is reached as for any retry).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.engines import Engine, run
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.forms import row_lock

WORKER = Path(__file__).resolve().parents[1] / "support" / "poison_worker.py"
REPO = Path(__file__).resolve().parents[2]
MAX_ATTEMPTS = 3
LEASE_S = 0.5
FORMS = ["row_lock", "lease", "advisory"]


async def _dead(qt: QueueUnderTest) -> list[dict[str, object]]:
    return await qt.dead_rows()


def _kill_loop(qt: QueueUnderTest, tmp: Path, transactional: bool) -> list[tuple[int, int]]:
    """Start the self-killing worker until the message is dead; its logged deliveries."""
    rendered = tmp / "queue.sql"
    rendered.write_text(qt.text, encoding="utf-8")
    log = tmp / "deliveries.log"
    log.touch()
    deadline = time.monotonic() + 60
    runs = []
    while time.monotonic() < deadline:
        proc = subprocess.run(
            [sys.executable, str(WORKER), qt.url, str(rendered), str(log), str(int(transactional))],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=60,
        )
        runs.append(proc.returncode)
        assert proc.returncode in (0, -9), proc.stderr[-2000:]
        if run(_dead(qt)):
            break
        time.sleep(0.1)
    lines = [line.split() for line in log.read_text().splitlines() if line.strip()]
    return [(int(i), int(a)) for i, a in lines]


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
@pytest.mark.parametrize("form", FORMS)
def test_a_message_that_kills_its_process_ends_dead_after_max_attempts(
    engine: Engine, form: str, transactional: bool, tmp_path: Path
) -> None:
    qt = run(make_queue(engine, form, dead="table", max_attempts=MAX_ATTEMPTS, lease_s=LEASE_S))
    try:
        (msg_id,) = run(qt.enqueue({"poison": True}))
        deliveries = _kill_loop(qt, tmp_path, transactional)
        # exactly max_attempts deliveries, numbered 1.., then the dead letter, unhandled
        assert deliveries == [(msg_id, n) for n in range(1, MAX_ATTEMPTS + 1)]
        dead = run(qt.dead_rows())
        assert [r["id"] for r in dead] == [msg_id]
        # the count is kept: max_attempts deliveries and the claim that moved it
        assert dead[0]["attempt"] == MAX_ATTEMPTS + 2
        assert run(qt.rows()) == []
    finally:
        run(qt.drop())


# ------------------------------------------------------------- a terminated backend

_SESSION_ID = {
    "postgres": "SELECT pg_backend_pid() AS id",
    "mariadb": "SELECT CONNECTION_ID() AS id",
}


async def _terminate(admin: runtime.Connection, ids: list[int]) -> None:
    for sid in ids:
        try:
            if admin.dialect.name == "postgres":
                await admin.fetchone("SELECT pg_terminate_backend(%(id)s) AS ok", {"id": sid})
            else:
                await admin.execute(f"KILL {int(sid)}")
        except runtime.BrokerError:
            pass  # that session had ended already


async def _terminate_scenario(
    qt: QueueUnderTest, transactional: bool
) -> tuple[list[int], list[dict[str, object]], runtime.Counts]:
    admin = await runtime.connect(qt.url)
    engine = "postgres" if admin.dialect.name == "postgres" else "mariadb"
    sessions: list[int] = []
    attempts: list[int] = []

    async def open_worker_connection() -> runtime.Connection:
        conn = await runtime.connect(qt.url)
        row = await conn.fetchone(_SESSION_ID[engine])
        assert row is not None
        sessions.append(int(row["id"]))
        return conn

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        attempts.append(ctx.attempt)
        # every session the consumer opened so far, its own worker's among them, is ended;
        # the handler, its database gone, raises
        await _terminate(admin, list(sessions))
        raise RuntimeError("poison: the worker's session was terminated")

    consumer = runtime.Consumer(
        open_worker_connection,
        qt.queue,
        handle,
        transactional=transactional,
        concurrency=1,
        batch=1,
        poll_interval=0.05,
        max_poll_interval=0.2,
        max_reconnect_interval=0.2,
    )
    task = asyncio.create_task(consumer.run())
    try:
        deadline = time.monotonic() + 30
        while not await qt.dead_rows() and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        consumer.stop()
        counts = await asyncio.wait_for(task, 10)
    finally:
        if not task.done():
            task.cancel()
        await admin.close()
    return attempts, await qt.dead_rows(), counts


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
@pytest.mark.parametrize("form", FORMS)
def test_a_message_that_kills_its_connection_ends_dead_after_max_attempts(
    engine: Engine, form: str, transactional: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if engine.name == "sqlite":
        pytest.skip("SQLite has no server session to terminate")
    monkeypatch.setattr(row_lock, "COUNT_HOLD_S", 0.3)
    qt = run(make_queue(engine, form, dead="group", max_attempts=MAX_ATTEMPTS, lease_s=LEASE_S))
    try:
        (msg_id,) = run(qt.enqueue({"poison": True}))
        attempts, dead, counts = run(_terminate_scenario(qt, transactional))
        assert attempts == list(range(1, MAX_ATTEMPTS + 1))
        assert [r["id"] for r in dead] == [msg_id]
        # lease, not transactional: each retry survives the lost connection (settled on the
        # worker's next one, guarded by its token), so the cap moves it as any retry
        unsettled = 0 if form == "lease" and not transactional else 1
        assert counts.get("unsettled", 0) == unsettled and counts["dead_letter"] == 1, counts
        assert counts.get("ack", 0) == 0
    finally:
        run(qt.drop())
