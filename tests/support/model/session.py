"""What the examples of one stateful test share: an event loop, connections, and a table per shape.

Creating tables and connecting cost more than a whole example (a MariaDB connection takes
tens of milliseconds, a CREATE TABLE as much again), and Hypothesis runs hundreds of examples
while it shrinks a failure. So each test keeps one Session: a table of each shape is created
the first time an example draws that shape and emptied (ids restarting at 1) when another
example draws it again; the connections stay open between examples, and ``release`` returns
them to a clean state (no open transaction, no advisory key held) after each example.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

from runtime.connect import connect
from runtime.contract.dialects import DIALECTS
from runtime.drivers.base import Connection
from runtime.process_keys import forget_keys
from runtime.queue import Queue
from support.engines import Engine, unique_table
from support.model.outcome_model import Shape
from support.model.tables import render_queue

T = TypeVar("T")

#: a statement that waits for a lock fails after 5 s instead of 30 s or 50 s: a step that
#: blocks is a failure to report, and Hypothesis replays failures hundreds of times
_LOCK_TIMEOUT = {
    "postgres": "SET lock_timeout = '5s'",
    "mysql": "SET SESSION innodb_lock_wait_timeout = 5",
    "mariadb": "SET SESSION innodb_lock_wait_timeout = 5",
    "sqlite": "PRAGMA busy_timeout = 5000",
}
#: what frees every advisory key a connection holds
_UNLOCK_ALL = {
    "postgres": "SELECT pg_advisory_unlock_all()",
    "mysql": "SELECT RELEASE_ALL_LOCKS()",
    "mariadb": "SELECT RELEASE_ALL_LOCKS()",
}


@dataclass
class QueueTables:
    """A queue of one shape, rendered for the session's engine, and its tables."""

    queue: Queue
    table: str
    dead_table: str | None
    #: the table of its token bucket and in-flight slots (None: it declares no such limit)
    limits_table: str | None = None


class Session:
    """One engine's loop, connections and tables, shared by the examples of one test."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.dialect = engine.dialect_name
        self.quote_ident = DIALECTS[self.dialect].quote_ident
        self.loop = asyncio.new_event_loop()
        self.conns: dict[str, Connection] = {}
        #: the handler's writes (transactional mode), a table for each worker: on InnoDB a
        #: write the handler rolled back keeps its lock until the batch ends, and purge can
        #: pass it on to the next row as a gap lock, so the other worker's insert into one
        #: shared table could wait on a batch this single-threaded machine has not ended yet
        self.sides = (unique_table("mqs"), unique_table("mqs"))
        self._tables: dict[tuple[Shape, bool], QueueTables] = {}
        self._created: list[str] = []

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(coro)

    async def conn(self, name: str) -> Connection:
        """The connection called ``name`` ("db" for the test's own SQL, "w0", "w1" for workers),
        opened again if a give-back closed it."""
        c = self.conns.get(name)
        if c is None or c.closed:
            c = self.conns[name] = await connect(self.engine.url)
            await c.execute(_LOCK_TIMEOUT[self.dialect])
        return c

    async def queue_tables(self, shape: Shape, renamed: bool) -> QueueTables:
        """The queue of this shape with empty tables whose ids start again at 1."""
        key = (shape, renamed)
        db = await self.conn("db")
        found = self._tables.get(key)
        if found is None:
            table, dead = unique_table("mq"), unique_table("mqd")
            queue = render_queue(shape, self.dialect, table, dead, renamed)
            found = QueueTables(queue, table, dead if shape.dead_letter == "table" else None)
            # lease's gate, or row lock's slot rows (SQLite's row lock needs none)
            gate = shape.max_in_flight and (shape.form == "lease" or self.dialect != "sqlite")
            if shape.rate_burst or gate:
                found.limits_table = f"{table}_limits"
            self._created += [table] + ([dead] if found.dead_table else [])
            self._created += [found.limits_table] if found.limits_table else []
            pause_table = queue.rendered.header.pause_table
            self._created += [pause_table] if pause_table else []
            for sql in queue.rendered.require("schema"):
                await db.execute(sql)
            for side in self.sides:
                if side not in self._created:
                    self._created.append(side)
                    await db.execute(
                        f"CREATE TABLE {self.quote_ident(side)} "
                        "(delivery INTEGER PRIMARY KEY, msg_id BIGINT)"
                    )
            self._tables[key] = found
        else:
            await self._empty(db, found)
        for side in self.sides:
            await db.execute(f"DELETE FROM {self.quote_ident(side)}")
        return found

    async def _empty(self, db: Connection, t: QueueTables) -> None:
        q = self.quote_ident
        names = [t.table] + ([t.dead_table] if t.dead_table else [])
        if t.limits_table:  # the bucket full again; slot rows are made again by the claims
            names.append(t.limits_table)
        if t.queue.rendered.header.pause_table:  # nothing paused
            names.append(t.queue.rendered.header.pause_table)
        if self.dialect == "postgres":
            await db.execute(f"TRUNCATE {', '.join(q(n) for n in names)} RESTART IDENTITY")
            return
        for n in names:
            await db.execute(f"DELETE FROM {q(n)}")
        if self.dialect == "sqlite":
            await db.execute("DELETE FROM sqlite_sequence WHERE name = :t", {"t": t.table})
        else:
            await db.execute(f"ALTER TABLE {q(t.table)} AUTO_INCREMENT = 1")

    async def release(self) -> None:
        """After an example: no transaction left open, no advisory key held."""
        for name, c in self.conns.items():
            if c.closed:
                continue
            await c.rollback()
            if name != "db" and self.dialect in _UNLOCK_ALL:
                await c.execute(_UNLOCK_ALL[self.dialect])
        # SQLite's keys live in this process, per (database, table, id)
        forget_keys(self.engine.url)

    def close(self) -> None:
        async def _close() -> None:
            await self.release()
            db = await self.conn("db")
            for name in self._created:
                await db.execute(f"DROP TABLE IF EXISTS {self.quote_ident(name)}")
            for c in self.conns.values():
                await c.close()

        try:
            self.run(_close())
        finally:
            self.loop.close()
