"""A silent partition: the listening connection is half-open, and a heartbeat replaces it.

The test proxy (tests/support/tcp_proxy.py) stalls: connections stay open but no byte crosses, and
the server ends the listening session meanwhile, so the consumer's side never hears of it.
Without a heartbeat the consumer would listen on that dead connection until TCP keepalives
give up; with it, the connection is dropped once a heartbeat goes unanswered and a new one
listens, so an enqueue wakes the idle consumer again.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from support.engines import Engine, engine_params, run
from support.queues import make_queue
from support.tcp_proxy import TcpProxy

import runtime
from runtime import loop as loop_mod


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
def test_a_half_open_listening_connection_is_replaced(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(loop_mod, "LISTEN_HEARTBEAT_S", 0.3)
    monkeypatch.setattr(loop_mod, "LISTEN_HEARTBEAT_TIMEOUT_S", 0.5)
    qt = run(make_queue(engine, "lease", columns=()))
    handled: list[float] = []

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        handled.append(time.monotonic())
        return runtime.ack()

    async def scenario(proxy: TcpProxy) -> float:
        consumer = runtime.Consumer(
            proxy.url + "?connect_timeout=2",
            qt.queue,
            handle,
            poll_interval=30,
            max_poll_interval=30,  # only a notification can wake it within the test
        )
        task = asyncio.create_task(consumer.run())
        admin = await runtime.connect(engine.url)
        try:
            await _until(lambda: _listening(admin), "the consumer listens")
            await qt.enqueue({"n": 1})
            await _until(lambda: _true(len(handled) == 1), "the first message is handled")
            proxy.stall()  # a silent partition; the server ends the listening session
            await admin.fetchone(
                "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
                "WHERE query LIKE 'LISTEN %%' AND pid <> pg_backend_pid() "
                "AND datname = current_database()"
            )
            await asyncio.sleep(1.5)  # past the heartbeat and its timeout
            proxy.heal()
            await _until(lambda: _listening(admin), "the consumer listens again", 20)
            enqueued = time.monotonic()
            await qt.enqueue({"n": 2})
            await _until(lambda: _true(len(handled) == 2), "the second message is handled")
            return handled[1] - enqueued
        finally:
            consumer.stop()
            await asyncio.wait_for(task, 10)
            await admin.close()

    try:
        with TcpProxy(engine.url) as proxy:
            woken_in = run(scenario(proxy))
        assert woken_in < 5
    finally:
        run(qt.drop())


async def _true(value: bool) -> bool:
    return value


async def _listening(admin: runtime.Connection) -> bool:
    row = await admin.fetchone(
        "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE query LIKE 'LISTEN %%' "
        "AND pid <> pg_backend_pid() AND datname = current_database()"
    )
    return bool(row and row["n"])


async def _until(check, what: str, timeout: float = 10) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.05)
