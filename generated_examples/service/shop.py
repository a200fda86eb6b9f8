"""A small orders service, as a service would use qgen: it writes an order and enqueues its
shipping in one transaction on its own connection, and `qgen worker` ships them:

    qgen worker --config ../qgen.toml --queue orders --handler shop:ship --transactional

The order and its message commit together or not at all; the handler marks the order shipped
in the settlement's transaction, so an order is shipped exactly when its message is acked.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import runtime

HERE = Path(__file__).resolve().parent
ORDERS = "shop_orders"


def orders_queue(dialect: str) -> runtime.Queue:
    """The checked-in rendered file of the `orders` queue for this dialect."""
    return runtime.load(HERE.parent / "sql" / dialect / "orders.sql")


def place_order_sync(conn: sqlite3.Connection, item: str) -> int:
    """SQLite, the standard library's connection: the order and its message in one transaction."""
    with conn:  # commits both, or rolls both back
        cur = conn.execute(f"INSERT INTO {ORDERS} (item, status) VALUES (?, 'placed')", (item,))
        order = int(cur.lastrowid or 0)
        orders_queue("sqlite").sync.enqueue(conn, {"order": order, "item": item})
    return order


async def place_order(conn: Any, item: str) -> int:
    """PostgreSQL, the service's own psycopg AsyncConnection: one transaction for both."""
    async with conn.transaction():
        cur = await conn.execute(
            f"INSERT INTO {ORDERS} (item, status) VALUES (%s, 'placed') RETURNING id", (item,)
        )
        (order,) = await cur.fetchone()
        await orders_queue("postgres").enqueue(conn, {"order": order, "item": item})
    return int(order)


async def ship(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    """Ship one order: the status changes in the settlement's transaction (transactional mode)."""
    p = ctx.db.dialect.placeholder
    await ctx.db.execute(
        f"UPDATE {ORDERS} SET status = 'shipped' WHERE id = {p('order')}",
        {"order": message.payload["order"]},
    )
    return runtime.ack()
