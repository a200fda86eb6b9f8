"""PgQueuer on the same PostgreSQL, with its own worker, for comparison (if it is installed).

PgQueuer lives in a schema of its own for the run (``PGQUEUER_SCHEMA``) with prefixed object
and channel names, and the schema is dropped at the end. "The same concurrency and batch"
means what the runtime's Consumer does with ``concurrency=4, batch=10``: four workers, each
on its own connection, each dequeuing ``batch_size=10`` — here four PgQueuer QueueManagers,
one per connection, run in ``drain`` mode. Its workers' driver is asyncpg (PgQueuer's
default, ``DRIVERS``) or psycopg; installing, enqueueing and counting use psycopg. The handler does nothing (or raises
``RetryRequested`` on a first delivery); the payload is the same JSON as everyone else's.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import logging
import os
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from bench.counting import Tally, is_write
from bench.raw import _encode, pg_conninfo

VERSION = "1.6.0"
#: the drivers PgQueuer's workers can run on
DRIVERS = ("asyncpg", "psycopg")


def available() -> tuple[bool, str]:
    """Whether PgQueuer can run here, and if not, why (for the table's skipped row)."""
    try:
        import pgqueuer  # noqa: F401
    except ImportError as exc:
        return False, f"pgqueuer is not installed ({exc.name}); pip install 'pgqueuer=={VERSION}'"
    version = importlib.metadata.version("pgqueuer")
    if version != VERSION:
        return True, f"pgqueuer {version} (the bench extra pins {VERSION})"
    return True, f"pgqueuer {version}"


class PgQueuerBench:
    """Install, enqueue, drain and uninstall PgQueuer in a schema of its own."""

    def __init__(self, url: str, schema: str, driver: str = "asyncpg") -> None:
        if driver not in DRIVERS:
            raise ValueError(f"unknown PgQueuer driver {driver!r}; known: {', '.join(DRIVERS)}")
        self.driver = driver
        self.url = url
        self.conninfo = pg_conninfo(url)
        self.schema = schema
        os.environ["PGQUEUER_SCHEMA"] = schema
        os.environ["PGQUEUER_PREFIX"] = f"{schema}_"
        from pgqueuer.domain.settings import db_settings

        db_settings.cache_clear()  # it reads the environment once per process
        # PgQueuer logs every retry at INFO; the bench's table is the report.
        logging.getLogger("pgqueuer").setLevel(logging.WARNING)
        self.admin: Any = None

    async def setup(self) -> None:
        import psycopg
        from pgqueuer import PsycopgDriver, Queries

        self.admin = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        await self.admin.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
        await Queries(PsycopgDriver(self.admin)).install()

    async def teardown(self) -> None:
        if self.admin is not None:
            await self.admin.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")
            await self.admin.close()
            self.admin = None

    async def clear(self) -> None:
        from pgqueuer.domain.settings import db_settings

        names = db_settings().qualified
        await self.admin.execute(
            f"TRUNCATE {names.queue_table}, {names.queue_table_log}, {names.statistics_table}"
        )

    async def enqueue(self, n: int) -> float:
        """Enqueue n jobs in PgQueuer's batch insert; returns the seconds it took."""
        from pgqueuer import PsycopgDriver, Queries

        queries = Queries(PsycopgDriver(self.admin))
        payloads = [_encode({"n": i}).encode() for i in range(n)]
        t0 = time.perf_counter()
        await queries.enqueue(["bench"] * n, payloads, [0] * n)
        return time.perf_counter() - t0

    async def remaining(self) -> int:
        from pgqueuer.domain.settings import db_settings

        cur = await self.admin.execute(
            f"SELECT COUNT(*) FROM {db_settings().qualified.queue_table}"
        )
        row = await cur.fetchone()
        return int(row[0]) if row else -1

    async def _connect(self, conns: list[Any]) -> Any:
        """A worker's connection on the chosen driver (kept in ``conns`` to close), wrapped in
        PgQueuer's driver for it."""
        if self.driver == "asyncpg":
            import asyncpg
            from pgqueuer import AsyncpgDriver

            conn = await asyncpg.connect(self.conninfo)
            conns.append(conn)
            return AsyncpgDriver(conn)
        import psycopg
        from pgqueuer import PsycopgDriver

        conn = await psycopg.AsyncConnection.connect(self.conninfo, autocommit=True)
        conns.append(conn)
        return PsycopgDriver(conn)

    async def drain(
        self, expected: int, retry_once: bool, concurrency: int, batch: int, tally: Tally
    ) -> tuple[dict[str, int], float]:
        """Run ``concurrency`` QueueManagers in drain mode until the queue is empty.

        Returns the outcomes and the seconds from the start until the last settlement was
        written (the newest row of PgQueuer's log, on the server's clock). That leaves out
        PgQueuer's shutdown (each manager waits up to a second for its notification watcher
        to stop), which the caller times separately as wall time. Once ``expected`` jobs
        were acked the managers are told to stop, as ``Consumer.stop()`` would be.
        """
        from pgqueuer.domain.settings import db_settings

        cur = await self.admin.execute("SELECT clock_timestamp()")
        started = (await cur.fetchone())[0]
        from pgqueuer import Queries, QueueManager
        from pgqueuer.domain.types import QueueExecutionMode
        from pgqueuer.errors import RetryRequested

        counts = {"ack": 0, "retry": 0}
        conns: list[Any] = []
        managers = []
        try:
            for _ in range(concurrency):
                driver = await self._connect(conns)
                _count_driver(driver, tally)
                qm = QueueManager(Queries(driver))

                @qm.entrypoint("bench")
                async def handle(job: Any) -> None:
                    _decode_bytes(job.payload)
                    if retry_once and job.attempts == 0:
                        counts["retry"] += 1
                        raise RetryRequested()
                    counts["ack"] += 1
                    if counts["ack"] == expected:
                        # every message has had its last delivery: stop now rather than wait
                        # for each manager's own drain check (its buffers still flush on exit)
                        for m in managers:
                            m.shutdown.set()

                managers.append(qm)
            await asyncio.gather(
                *(
                    qm.run(
                        batch_size=batch,
                        mode=QueueExecutionMode.drain,
                        dequeue_timeout=timedelta(seconds=1),
                    )
                    for qm in managers
                )
            )
        finally:
            for conn in conns:
                await conn.close()
        cur = await self.admin.execute(
            f"SELECT max(created) FROM {db_settings().qualified.queue_table_log}"
        )
        last = (await cur.fetchone())[0]
        return counts, (last - started).total_seconds() if last else float("nan")


def _decode_bytes(payload: bytes | None) -> Any:
    import json

    return json.loads(payload) if payload else None


def _count_driver(driver: Any, tally: Tally) -> None:
    """Count the statements PgQueuer sends through its driver (LISTEN and NOTIFY waits aside)."""

    def counted(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(query: str, *args: object) -> Any:
            tally.statements += 1
            if is_write(query):
                tally.commits += 1  # PgQueuer runs in autocommit: each write is a transaction
            return await method(query, *args)

        return call

    driver.fetch = counted(driver.fetch)
    driver.execute = counted(driver.execute)
