"""Failover: consumers on a URL listing a primary and its synchronous standby carry on when the
primary stops and the standby is promoted mid-drain.

The test starts its own two clusters (tests/support/pg_cluster.py; the shared server is never
touched): a primary, and a streaming standby made from its base backup that the primary waits
for at every commit (synchronous_standby_names). One consumer per claim form drains its queue
through ``postgresql://…@primary,standby/…?target_session_attrs=read-write``. A third of the
way through, the test notes which messages the primary has acked, stops the primary (fast
shutdown: its sessions are terminated) and promotes the standby. Then, counted from the
tables on the new primary:

* lost 0: every message is acked;
* stuck 0: within RECOVER_S of the promotion, well within the 60 s leases: the lease form's
  workers settle or give back the rows their lost connections held as soon as the new
  primary answers (a finished handler's ack runs again there, guarded by its token), so
  none waits out its lease;
* no message acked before the failover is delivered again (synchronous replication: an
  acked commit is on the standby before the ack returns);
* deliveries beyond the first are at most the messages in flight at the failover.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest
from support.engines import Engine, run
from support.pg_cluster import PrivatePostgres, sync_replication
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.contract.errors import ConnectionLost

pytestmark = [pytest.mark.slow, pytest.mark.chaos]

FORMS = ["lease", "row_lock", "advisory"]
MESSAGES = 150
LEASE_S = 60
#: every message acked within this many seconds of the promotion (well within LEASE_S)
RECOVER_S = 20
CONCURRENCY = 2
SECRET = "pw_must_not_show"
BATCH = 5


async def _acked(qt: QueueUnderTest) -> set[int] | None:
    """The ids acked so far, or None while no writable server answers."""
    try:
        rows = await qt.sql(
            f"SELECT {qt.col('id')} AS id FROM {qt.q(qt.table)} "
            f"WHERE {qt.col('processed_at')} IS NOT NULL"
        )
    except ConnectionLost:
        return None
    return {r["id"] for r in rows}


async def _failover(engine: Engine, primary: PrivatePostgres, standby: PrivatePostgres) -> None:
    queues = {form: await make_queue(engine, form, lease_s=LEASE_S) for form in FORMS}
    ids = {
        form: set(await qt.enqueue(*({"n": i} for i in range(MESSAGES))))
        for form, qt in queues.items()
    }
    handled: dict[str, list[int]] = {form: [] for form in FORMS}  # ids, in delivery order

    def handler(seen: list[int]):
        async def handle(message, ctx):
            seen.append(message.id)
            await asyncio.sleep(0.05)
            return runtime.ack()

        return handle

    consumers = [
        runtime.Consumer(
            engine.url,
            qt.queue,
            handler(handled[form]),
            concurrency=CONCURRENCY,
            batch=BATCH,
            max_reconnect_interval=0.5,
        )
        for form, qt in queues.items()
    ]
    tasks = [asyncio.create_task(c.run()) for c in consumers]
    loop = asyncio.get_running_loop()
    try:
        deadline = time.monotonic() + 60
        while any(len(seen) < MESSAGES // 3 for seen in handled.values()):
            assert time.monotonic() < deadline, {f: len(s) for f, s in handled.items()}
            await asyncio.sleep(0.05)
        # acked on the primary (so on the synchronous standby): never to be delivered again
        acked_before = {form: await _acked(qt) for form, qt in queues.items()}
        marks = {form: len(seen) for form, seen in handled.items()}
        await loop.run_in_executor(None, primary.ctl, "stop", "-m", "fast")
        await loop.run_in_executor(None, standby.ctl, "promote")
        promoted = time.monotonic()
        while True:
            acked = {form: await _acked(qt) for form, qt in queues.items()}
            if all(acked[form] == ids[form] for form in FORMS):
                break
            for task in tasks:
                if task.done():
                    raise AssertionError(f"run() ended: {task.exception()!r}")
            assert time.monotonic() < promoted + RECOVER_S, {
                form: None if a is None else len(ids[form] - a) for form, a in acked.items()
            }
            await asyncio.sleep(0.2)
    finally:
        for c in consumers:
            c.stop()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 60)
    try:
        async with await runtime.connect(engine.url) as conn:
            row = await conn.fetchone("SELECT inet_server_port() AS port")
            assert row == {"port": standby.port}  # the new primary
        for form, qt in queues.items():
            seen = handled[form]
            assert acked_before[form], form
            assert set(seen) == ids[form], form
            assert len(seen) > marks[form], f"{form}: nothing handled after the failover"
            again = sorted(set(seen[marks[form] :]) & acked_before[form])
            assert again == [], f"{form}: acked before the failover, delivered again: {again}"
            extra = len(seen) - len(ids[form])
            assert extra <= CONCURRENCY * BATCH, f"{form}: {extra} deliveries beyond the first"
            rows = await qt.rows()
            assert {r["id"] for r in rows} == ids[form]
            assert [r["id"] for r in rows if r["processed_at"] is None] == []
    finally:
        for qt in queues.values():
            await qt.drop()


@pytest.mark.parametrize("session_attrs", ["read-write", "any"])
def test_consumers_carry_on_through_a_failover(session_attrs: str, caplog) -> None:
    """read-write: libpq skips the standby until it is promoted (an outage, one warning).
    any: the consumers reach the standby before its promotion, its read-only errors (25006)
    drop those connections as lost (one warning) and the consumers reconnect until it writes."""
    primary: PrivatePostgres | None = None
    standby: PrivatePostgres | None = None
    try:
        primary = PrivatePostgres(name="primary")
        standby = PrivatePostgres(standby_of=primary, name="standby")
        run(sync_replication(primary, "standby"))
        url = (
            # trust authentication: the password is never checked, only never shown
            f"postgresql://postgres:{SECRET}@{primary.host},{standby.host}/postgres"
            f"?target_session_attrs={session_attrs}&connect_timeout=2"
        )
        engine = Engine(name="postgres", url=url, dialect_name="postgres")
        with caplog.at_level(logging.INFO, logger="runtime"):
            run(_failover(engine, primary, standby))
    finally:
        for cluster in (standby, primary):
            if cluster is not None:
                cluster.close()
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if session_attrs == "read-write":
        assert any("lost the database" in m for m in warnings), warnings
    else:
        read_only = [m for m in warnings if "is read-only" in m]
        assert len(read_only) == 1, warnings  # one per URL and minute, not one per statement
    tracebacks = [r.getMessage() for r in caplog.records if r.exc_info]
    assert tracebacks == []
    assert not [r for r in caplog.records if SECRET in r.getMessage()]
