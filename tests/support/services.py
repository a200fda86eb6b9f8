"""A service's own connections (sync drivers, SQLAlchemy URLs) and a business table beside a queue."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from support.engines import Engine, unique_table
from support.queues import QueueUnderTest, make_queue


def sqlalchemy_url(engine: Engine, is_async: bool) -> str:
    parts = urlsplit(engine.url)
    if engine.name == "sqlite":
        return f"sqlite+{'aiosqlite' if is_async else 'pysqlite'}://{parts.path}"
    scheme = "postgresql+psycopg" if engine.name == "postgres" else "mysql+pymysql"
    return f"{scheme}://{parts.netloc}{parts.path}"


@contextlib.contextmanager
def sync_connection(
    engine: Engine, kind: str
) -> Iterator[tuple[Any, Callable[[], None], Callable[[], None], Callable[[str], None]]]:
    """(conn, commit, rollback, execute) of a blocking connection of the service's own."""
    parts = urlsplit(engine.url)
    if kind == "driver" and engine.name == "postgres":
        import psycopg

        conn = psycopg.connect(f"postgresql://{parts.netloc}{parts.path}")
        yield conn, conn.commit, conn.rollback, lambda s: conn.execute(s)
        conn.close()
    elif kind == "driver" and engine.name == "sqlite":
        import sqlite3

        conn = sqlite3.connect(parts.path)
        yield conn, conn.commit, conn.rollback, lambda s: conn.execute(s)
        conn.close()
    elif kind == "driver":
        import pymysql

        conn = pymysql.connect(
            host=parts.hostname,
            port=parts.port or 3306,
            user=parts.username or "root",
            database=parts.path.lstrip("/"),
        )
        yield conn, conn.commit, conn.rollback, lambda s: conn.cursor().execute(s)
        conn.close()
    else:
        import sqlalchemy
        from sqlalchemy.orm import Session

        sa = sqlalchemy.create_engine(sqlalchemy_url(engine, False))
        if kind == "sqlalchemy":
            with sa.connect() as conn:
                yield conn, conn.commit, conn.rollback, lambda s: conn.exec_driver_sql(s)
        else:
            with Session(sa) as session:
                yield (
                    session,
                    session.commit,
                    session.rollback,
                    lambda s: session.connection().exec_driver_sql(s),
                )
        sa.dispose()


async def _setup(engine: Engine) -> tuple[QueueUnderTest, str]:
    qt = await make_queue(engine, "lease")
    business = unique_table("orders")
    await qt.sql(f"CREATE TABLE {qt.q(business)} (note VARCHAR(20))")
    return qt, business


async def _teardown(qt: QueueUnderTest, business: str) -> None:
    await qt.sql(f"DROP TABLE {qt.q(business)}")
    await qt.drop()


async def _assert_together(qt: QueueUnderTest, business: str, ids: list[int]) -> None:
    """The committed message and its business row are there; the rolled-back ones are not;
    the id each enqueue returned is its row's."""
    rows = await qt.rows()
    assert [r["id"] for r in rows] == [ids[0]], (rows, ids)
    assert rows[0]["payload"] == {"order": True}
    notes = await qt.sql(f"SELECT COUNT(*) AS n FROM {qt.q(business)}")
    assert int(notes[0]["n"]) == 1
