"""The example service beside the examples, end to end: orders placed with their messages in
one transaction on the service's own connection, then shipped by `qgen worker`."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from support.engines import Engine, engine_params, run
from support.statements import create_namespace, drop_namespace

import runtime

REPO = Path(__file__).resolve().parents[2]
SERVICE = REPO / "generated_examples" / "service"
sys.path.insert(0, str(SERVICE))
import shop  # noqa: E402

TABLE = {
    "sqlite": f"CREATE TABLE {shop.ORDERS} (id INTEGER PRIMARY KEY AUTOINCREMENT, item TEXT, status TEXT)",
    "postgres": f"CREATE TABLE {shop.ORDERS} (id BIGSERIAL PRIMARY KEY, item TEXT, status TEXT)",
}


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres"), indirect=True)
def test_orders_placed_with_their_messages_are_shipped_by_the_worker(engine: Engine) -> None:
    name, url = run(create_namespace(engine))
    try:
        queue = shop.orders_queue(engine.dialect_name)

        async def setup() -> None:
            async with await runtime.connect(url) as db:
                for s in [*queue.rendered.require("schema"), TABLE[engine.name]]:
                    await db.execute(s, {})

        run(setup())
        placed = place_orders(engine, url)
        worker = subprocess.run(
            [
                sys.executable,
                "-m",
                "qgen.cli",
                "worker",
                "--config",
                str(REPO / "generated_examples" / "qgen.toml"),
                "--queue",
                "orders",
                "--handler",
                "shop:ship",
                "--transactional",
                "--drain",
                "--db",
                url,
            ],
            cwd=SERVICE,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ},
        )
        assert worker.returncode == 0, worker.stderr
        assert "qgen worker: orders: ack=3" in worker.stdout, worker.stdout

        async def statuses() -> dict[int, str]:
            async with await runtime.connect(url) as db:
                rows = await db.fetchall(f"SELECT id, status FROM {shop.ORDERS}", {})
            return {int(r["id"]): r["status"] for r in rows}

        assert run(statuses()) == {order: "shipped" for order in placed}
    finally:
        run(drop_namespace(engine, name))


def place_orders(engine: Engine, url: str) -> list[int]:
    """Three orders committed, one rolled back with its message."""
    if engine.name == "sqlite":
        conn = sqlite3.connect(urlsplit(url).path)
        try:
            placed = [shop.place_order_sync(conn, item) for item in ("tea", "cups", "pot")]
            # a failed business write takes its message with it
            with pytest.raises(sqlite3.IntegrityError), conn:
                shop.orders_queue("sqlite").sync.enqueue(conn, {"order": 0})
                conn.execute(f"INSERT INTO {shop.ORDERS} (id) VALUES ({placed[0]})")
        finally:
            conn.close()
        return placed

    async def go() -> list[int]:
        import psycopg

        async with await psycopg.AsyncConnection.connect(
            url.replace("postgresql://", "postgresql://", 1)
        ) as conn:
            placed = [await shop.place_order(conn, item) for item in ("tea", "cups", "pot")]
            with pytest.raises(psycopg.errors.UniqueViolation):
                async with conn.transaction():
                    await shop.orders_queue("postgres").enqueue(conn, {"order": 0})
                    await conn.execute(f"INSERT INTO {shop.ORDERS} (id) VALUES (%s)", (placed[0],))
            return placed

    return run(go())


def test_ship_with_runtime_testing(qgen_harness: Any, qgen_db_url: str) -> None:
    """The service's handler, tested as a service would: runtime.testing on a SQLite file."""
    orders = qgen_harness(SERVICE.parent / "sql" / "sqlite" / "orders.sql")
    conn = sqlite3.connect(urlsplit(qgen_db_url).path)
    try:
        conn.execute(TABLE["sqlite"])
        placed = [shop.place_order_sync(conn, item) for item in ("tea", "cups")]
    finally:
        conn.close()
    orders.assert_enqueued({"order": placed[0], "item": "tea"}, 1)
    orders.assert_enqueued(count=2)

    drained = orders.drain(shop.ship, transactional=True)

    assert sorted(drained.outcomes.values()) == ["ack", "ack"]
    orders.assert_counts(ready=0, processed=2)
    conn = sqlite3.connect(urlsplit(qgen_db_url).path)
    try:
        assert conn.execute(f"SELECT status FROM {shop.ORDERS}").fetchall() == [("shipped",)] * 2
    finally:
        conn.close()
