"""An orders service on FastAPI and SQLAlchemy 2 (async), as a service would use qgen.

``POST /orders`` writes the order and enqueues its shipping in the request's one session
transaction: both commit, or (a request that fails, here an item out of stock) neither. A
consumer started in the app's lifespan ships them: its handler marks the order shipped in
the settlement's transaction (transactional mode), so an order is shipped exactly when its
message is acked.

The app's engine may use asyncpg or psycopg (``postgresql+asyncpg://…`` or
``postgresql+psycopg://…``); the enqueue runs on the request's AsyncSession either way. The
consumer opens its own connections with the runtime's driver (psycopg), from the same URL.

    DATABASE_URL=postgresql+asyncpg://postgres@127.0.0.1:5432/shop uvicorn app:app
"""

# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations, and
# `Session` is local to create_app
import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import String, select
from sqlalchemy.ext.asyncio import (
    AsyncEngine,
    AsyncSession,
    async_sessionmaker,
    create_async_engine,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

import runtime

HERE = Path(__file__).resolve().parent
#: items the shop cannot sell: the order fails after its message was enqueued (and rolls back)
OUT_OF_STOCK = {"unicorn"}


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "fastapi_orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    item: Mapped[str] = mapped_column(String(200))
    status: Mapped[str] = mapped_column(String(20), default="placed")


def orders_queue(dialect: str) -> runtime.Queue:
    """The checked-in rendered file of the `orders` queue for this dialect."""
    return runtime.load(HERE.parent / "sql" / dialect / "orders.sql")


async def ship(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    """Ship one order in the settlement's transaction (``ctx.db``); an order that is gone
    (deleted since) leaves the queue as a poison message."""
    p = ctx.db.dialect.placeholder
    shipped = await ctx.db.execute(
        f"UPDATE {Order.__tablename__} SET status = 'shipped' WHERE id = {p('order')}",
        {"order": message.payload["order"]},
    )
    return runtime.ack() if shipped else runtime.drop()


def runtime_url(database_url: str) -> str:
    """The consumer's URL: SQLAlchemy's ``postgresql+asyncpg://…`` without its driver."""
    scheme, rest = database_url.split("://", 1)
    return f"{scheme.split('+', 1)[0]}://{rest}"


class NewOrder(BaseModel):
    item: str


def create_app(engine: AsyncEngine, consumer_url: str | None = None) -> FastAPI:
    """The app on ``engine``; its lifespan creates the tables and runs the consumer (on
    ``consumer_url``, default: the engine's URL without its driver)."""
    queue = orders_queue("postgres")
    sessions = async_sessionmaker(engine, expire_on_commit=False)
    url = consumer_url or runtime_url(engine.url.render_as_string(hide_password=False))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with engine.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        await runtime.apply(url, queue)
        consumer = runtime.Consumer(url, queue, ship, transactional=True)
        worker = asyncio.create_task(consumer.run())
        app.state.consumer = consumer
        try:
            yield
        finally:
            consumer.stop()  # in-flight deliveries settle, unstarted rows go back
            await worker
            await engine.dispose()

    app = FastAPI(lifespan=lifespan)

    async def session() -> AsyncIterator[AsyncSession]:
        async with sessions() as s:
            yield s

    Session = Annotated[AsyncSession, Depends(session)]

    @app.post("/orders", status_code=201)
    async def place_order(new: NewOrder, s: Session) -> dict[str, Any]:
        async with s.begin():  # one transaction: the order and its message
            order = Order(item=new.item)
            s.add(order)
            await s.flush()  # the order's id
            message = await queue.enqueue(s, {"order": order.id})
            if new.item in OUT_OF_STOCK:  # raising rolls back the order and its message
                raise HTTPException(409, f"{new.item} is out of stock")
        return {"id": order.id, "message": int(message)}

    @app.get("/orders/{order_id}")
    async def get_order(order_id: int, s: Session) -> dict[str, Any]:
        order = await s.scalar(select(Order).where(Order.id == order_id))
        if order is None:
            raise HTTPException(404, f"no order {order_id}")
        return {"id": order.id, "item": order.item, "status": order.status}

    return app


def app_from_env() -> FastAPI:
    """``uvicorn app:app``: the app on ``DATABASE_URL``."""
    return create_app(create_async_engine(os.environ["DATABASE_URL"]))


if "DATABASE_URL" in os.environ:
    app = app_from_env()
