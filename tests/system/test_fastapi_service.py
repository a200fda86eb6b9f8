"""The FastAPI example service (generated_examples/fastapi_service): requests that write an
order and enqueue its shipping in one session transaction, a consumer in the app's lifespan
that ships them, on real PostgreSQL through asyncpg and psycopg; and its handler tested with
runtime.testing on SQLite."""

from __future__ import annotations

import sqlite3
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine
from support.engines import Engine, engine_params, run
from support.statements import create_namespace, drop_namespace

import runtime
from runtime.testing import SyncHarness

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "generated_examples" / "fastapi_service"))
import app as service  # noqa: E402

#: how the app's engine lands in the test's own schema, per driver
SEARCH_PATH = {
    "asyncpg": lambda schema: {"server_settings": {"search_path": schema}},
    "psycopg": lambda schema: {"options": f"-csearch_path={schema}"},
}


@pytest.mark.parametrize("driver", ["asyncpg", "psycopg"])
@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
def test_orders_placed_in_requests_are_shipped_by_the_lifespan_consumer(
    engine: Engine, driver: str
) -> None:
    schema, consumer_url = run(create_namespace(engine))
    try:
        database_url = engine.url.replace("postgresql://", f"postgresql+{driver}://", 1)
        db = create_async_engine(database_url, connect_args=SEARCH_PATH[driver](schema))
        app = service.create_app(db, consumer_url)
        with TestClient(app) as client:
            placed = [client.post("/orders", json={"item": i}) for i in ("tea", "cups", "pot")]
            assert [r.status_code for r in placed] == [201, 201, 201]
            orders = [r.json()["id"] for r in placed]
            # the request fails after its enqueue: the order and its message roll back
            refused = client.post("/orders", json={"item": "unicorn"})
            assert refused.status_code == 409, refused.text
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                statuses = [client.get(f"/orders/{o}").json()["status"] for o in orders]
                if statuses == ["shipped"] * 3:
                    break
                time.sleep(0.05)
            assert statuses == ["shipped"] * 3
            assert client.get(f"/orders/{max(orders) + 1}").status_code == 404

        async def left() -> tuple[dict[str, Any], dict[str, int], int]:
            queue = service.orders_queue("postgres")
            async with await runtime.connect(consumer_url) as conn:
                rows = await conn.fetchall("SELECT COUNT(*) AS n FROM fastapi_orders", {})
                return await queue.stats(conn), await queue.groups(conn), rows[0]["n"]

        stats, unfinished, order_rows = run(left())
        # three messages, each acked with its order shipped; none for the refused request (a
        # message without its order would have been dropped: unfinished in orders_poison)
        assert (stats["processed"], unfinished, order_rows) == (3, {}, 3)
    finally:
        run(drop_namespace(engine, schema))


def test_the_shipping_handler_with_runtime_testing(qgen_harness: Any, qgen_db_url: str) -> None:
    orders: SyncHarness = qgen_harness(service.HERE.parent / "sql" / "sqlite" / "orders.sql")
    path = urlsplit(qgen_db_url).path
    service.Base.metadata.create_all(create_engine(f"sqlite:///{path}"))
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO fastapi_orders (id, item, status) VALUES (1, 'tea', 'placed')")
    orders.enqueue({"order": 1})
    orders.enqueue({"order": 99})  # an order deleted since

    drained = orders.drain(service.ship, transactional=True)

    assert drained.outcomes == {1: "ack", 2: "drop"}
    orders.assert_counts(ready=0, delayed=0, processed=1)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT status FROM fastapi_orders").fetchall() == [("shipped",)]
