"""MariaDB Galera: consumers spread over a 3-node cluster of the test's own
(tests/support/galera_cluster.py; the shared server is never touched).

* advisory is refused at the consumer's start, in one line naming lease (GET_LOCK is granted
  per node);
* row lock runs, warning once of its cost there;
* a node is killed (SIGKILL) mid-drain while every allowed form drains its queue through
  consumers on all three nodes, each with a URL that lists its own node first and the
  other two after it. Counted from the tables (a trigger writes one row per settlement):
  lost 0, settled twice 0, stuck 0 (every message acked within lease_s + 60 s of the kill),
  and the consumers of the dead node carry on through the others (once the rest have
  stopped, they alone drain a few more messages). Handled twice is reported
  (row lock handles a message twice when two nodes' claims race; certification aborts the
  loser's batch), not asserted.

Each form's line (messages, handled twice, settled twice, lost, stuck, time to recover) is
printed in the terminal summary under "galera scenarios". ``--chaos-scale=N`` runs N times
the messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections import Counter
from collections.abc import Iterator

import pytest
from support.engines import Engine, run
from support.galera_cluster import GaleraCluster
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.contract.dialects import recognise
from runtime.contract.errors import ConfigurationError

pytestmark = [pytest.mark.slow, pytest.mark.chaos, pytest.mark.engine("mariadb")]

DATABASE = "qgen_galera"
#: messages per form at scale 1
MESSAGES = 300
LEASE_S = 3
FORMS = ("row_lock", "lease")  # advisory is refused on Galera
KILLED = 1  # the node killed mid-drain (node 0 stays up: the test reads through it)
#: messages the dead node's consumers drain alone once the others have stopped
AFTER = 20


@pytest.fixture(scope="module")
def cluster() -> Iterator[GaleraCluster]:
    c = GaleraCluster(3)
    try:
        c.sql(0, f"CREATE DATABASE {DATABASE}")
        yield c
    finally:
        c.close()


def _engine(cluster: GaleraCluster, first: int = 0) -> Engine:
    return Engine("mariadb", cluster.url(DATABASE, first) + "?connect_timeout=2", "mariadb")


async def _never(message: runtime.Message, ctx: runtime.Ctx) -> None:
    raise AssertionError("no message may be handled")


def test_galera_node_recognised(cluster: GaleraCluster) -> None:
    async def identity() -> str:
        async with await runtime.connect(_engine(cluster).url) as conn:
            return await conn.server_identity()

    text = run(identity())
    server = recognise("mariadb", text)
    assert server is not None and server.name == "MariaDB Galera cluster", text


def test_advisory_refused_on_galera(cluster: GaleraCluster) -> None:
    async def scenario() -> str:
        qt = await make_queue(_engine(cluster), "advisory")
        try:
            await qt.enqueue({"n": 1})
            with pytest.raises(ConfigurationError) as caught:
                await runtime.Consumer(qt.url, qt.queue, _never).drain()
            (row,) = await qt.rows()
            assert row["processed_at"] is None and row["attempt"] == 1  # never claimed
            return str(caught.value)
        finally:
            await qt.drop()

    message = run(scenario())
    assert "\n" not in message
    assert "advisory claim form is unsafe on a MariaDB Galera cluster" in message
    assert "GET_LOCK is granted per node" in message
    assert 'declare form = "lease"' in message


async def _settlement_log(qt: QueueUnderTest) -> str:
    """A table with one row per settlement of ``qt``'s rows (a trigger writes it)."""
    log = qt.table + "_settled"
    q = qt.q
    await qt.sql(f"CREATE TABLE {q(log)} (k BIGINT AUTO_INCREMENT PRIMARY KEY, id BIGINT NOT NULL)")
    qt.tables.append(log)
    await qt.sql(
        f"CREATE TRIGGER {q(log + '_t')} AFTER UPDATE ON {q(qt.table)} FOR EACH ROW "
        f"IF NEW.{qt.col('processed_at')} IS NOT NULL AND NOT "
        f"(OLD.{qt.col('processed_at')} <=> NEW.{qt.col('processed_at')}) "
        f"THEN INSERT INTO {q(log)} (id) VALUES (NEW.{qt.col('id')}); END IF"
    )
    return log


#: what a surviving node answers for a moment while the cluster forms its view without the
#: killed one (1047: not yet prepared for use; 1180: not connected to the primary component)
CLUSTER_CHANGING = ("WSREP has not yet prepared node", "Primary Component")


async def _acked(qt: QueueUnderTest) -> int:
    """The rows acked so far, counted on the first node that answers; asked again while the
    cluster is still forming its view after the kill (the test's own count, not a consumer's
    statement: the consumers ride that moment out on their own)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            (row,) = await qt.sql(
                f"SELECT COUNT(*) AS n FROM {qt.q(qt.table)} "
                f"WHERE {qt.col('processed_at')} IS NOT NULL"
            )
            return int(row["n"])
        except runtime.DatabaseError as exc:
            if not any(s in str(exc) for s in CLUSTER_CHANGING) or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


class Tally:
    """One form's deliveries (ids, in order), and how long after the kill the consumers of
    the dead node claimed again through another node."""

    def __init__(self) -> None:
        self.handled: list[int] = []
        self.killed_at: float | None = None
        self.recovered_in: float | None = None

    async def handle(self, message: runtime.Message, ctx: runtime.Ctx) -> None:
        self.handled.append(message.id)
        await asyncio.sleep(random.uniform(0.002, 0.01))

    def recovery(self) -> runtime.Metrics:
        """Hooks for a consumer of the dead node: its first claim after the kill."""
        tally = self

        class Recovery(runtime.Metrics):
            # a claim that returns after the kill went through another node
            def on_claim(self, n: int) -> None:
                if tally.killed_at is not None and tally.recovered_in is None:
                    tally.recovered_in = time.monotonic() - tally.killed_at

        return Recovery()


async def _alone(
    queues: dict[str, QueueUnderTest],
    consumers: list[tuple[str, int, runtime.Consumer]],
    tasks: list[asyncio.Task[runtime.Counts]],
    n: int,
) -> dict[str, bool]:
    """Stop every consumer but the dead node's, enqueue AFTER more per form: whether the dead
    node's consumers acked them all within 30 s, per form."""
    alone = {form: False for form in FORMS}
    for (_, node, consumer), task in zip(consumers, tasks, strict=True):
        if node != KILLED:
            consumer.stop()
            await task
    for qt in queues.values():
        await qt.enqueue(*({"n": -i} for i in range(1, AFTER + 1)))
    until = time.monotonic() + 30
    while not all(alone.values()) and time.monotonic() < until:
        alone = {form: await _acked(qt) == n + AFTER for form, qt in queues.items()}
        await asyncio.sleep(0.1)
    return alone


async def _form_line(
    form: str,
    qt: QueueUnderTest,
    log: str,
    tally: Tally,
    mine: list[runtime.Counts],
    n: int,
    acked: int,
    alone: bool,
    drained_in: float,
) -> str:
    """One form's summary line, after asserting nothing was lost or settled twice."""
    per_id = Counter(r["id"] for r in await qt.sql(f"SELECT id FROM {qt.q(log)}"))
    settled_twice = sum(1 for c in per_id.values() if c > 1)
    lost = stuck = n - acked
    handled_twice = sum(1 for c in Counter(tally.handled).values() if c > 1)
    conflicts = sum(c.get("conflicts", 0) for c in mine)
    failed = sum(c.get("failed_batches", 0) for c in mine)
    recover = tally.recovered_in
    line = (
        f"galera {form} node kill: {n} msgs, handled twice {handled_twice} "
        f"({handled_twice / n:.1%}), settled twice {settled_twice}, lost {lost}, "
        f"stuck {stuck}, conflicts {conflicts}, failed batches {failed}, "
        f"dead node's consumers claimed again "
        f"{'-' if recover is None else f'{recover:.1f} s'} after the kill, all acked "
        f"{drained_in:.1f} s after the kill"
    )
    assert not lost, f"{form}: {lost} messages not acked within {LEASE_S + 60} s"
    assert not settled_twice, f"{form}: settled twice: {settled_twice}"
    assert len(per_id) == n + AFTER, f"{form}: {n + AFTER - len(per_id)} never settled"
    assert alone, f"{form}: the dead node's consumers did not carry on alone"
    assert not failed, f"{form}: {failed} failed batches (conflicts are not failures)"
    return line


async def _node_kill(cluster: GaleraCluster, scale: int) -> list[str]:
    n = MESSAGES * scale
    queues: dict[str, QueueUnderTest] = {}
    logs: dict[str, str] = {}
    tallies = {form: Tally() for form in FORMS}
    consumers: list[tuple[str, int, runtime.Consumer]] = []
    tasks: list[asyncio.Task[runtime.Counts]] = []
    try:
        for form in FORMS:
            qt = queues[form] = await make_queue(_engine(cluster), form, lease_s=LEASE_S)
            logs[form] = await _settlement_log(qt)
            async with await runtime.connect(qt.url) as db:
                await db.begin()
                await qt.queue.enqueue_many(db, [{"n": i} for i in range(n)])
                await db.commit()
            for node in range(3):
                consumer = runtime.Consumer(
                    _engine(cluster, first=node).url,
                    qt.queue,
                    tallies[form].handle,
                    metrics=tallies[form].recovery() if node == KILLED else None,
                    concurrency=2,
                    batch=5,
                    max_reconnect_interval=0.5,
                    stop_timeout=5,
                )
                consumers.append((form, node, consumer))
        tasks = [asyncio.create_task(c.run()) for _, _, c in consumers]

        # a third of each queue acked: kill a node with consumers on it, mid-batch
        deadline = time.monotonic() + 120
        while min([await _acked(qt) for qt in queues.values()]) < n // 3:
            assert time.monotonic() < deadline, "the drain did not get a third through"
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.05)
        cluster.kill(KILLED)
        killed_at = time.monotonic()
        for tally in tallies.values():
            tally.killed_at = killed_at

        # every message acked within lease_s + 60 s of the kill; no consumer stops
        acked = {form: 0 for form in FORMS}
        while time.monotonic() < killed_at + LEASE_S + 60:
            acked = {form: await _acked(qt) for form, qt in queues.items()}
            if all(a == n for a in acked.values()):
                break
            assert not any(t.done() for t in tasks), [t.exception() for t in tasks if t.done()]
            await asyncio.sleep(0.1)
        drained_in = time.monotonic() - killed_at

        # the dead node's consumers alone: they drain a few more through the other nodes
        alone = {form: False for form in FORMS}
        if all(a == n for a in acked.values()):
            alone = await _alone(queues, consumers, tasks, n)
        for _, _, consumer in consumers:
            consumer.stop()
        counts = await asyncio.gather(*tasks)

        lines = []
        for form, qt in queues.items():
            mine = [c for (f, _, _), c in zip(consumers, counts, strict=True) if f == form]
            lines.append(
                await _form_line(
                    form,
                    qt,
                    logs[form],
                    tallies[form],
                    mine,
                    n,
                    acked[form],
                    alone[form],
                    drained_in,
                )
            )
        return lines
    finally:
        for _, _, consumer in consumers:
            consumer.stop()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(task, 10)
        for qt in queues.values():
            with contextlib.suppress(Exception):
                await qt.drop()


def test_node_killed_mid_drain(
    cluster: GaleraCluster, request: pytest.FixtureRequest, caplog: pytest.LogCaptureFixture
) -> None:
    scale = max(1, int(request.config.getoption("--chaos-scale")))
    with caplog.at_level(logging.WARNING, logger="runtime"):
        lines = run(_node_kill(cluster, scale))
    for line in lines:
        request.node.user_properties.append(("summary:galera scenarios", line))
    # row lock: one warning per consumer start naming what it costs there
    cautions = [r for r in caplog.records if "row_lock on a MariaDB Galera cluster" in r.message]
    assert len(cautions) == 3, [r.message for r in cautions]
    # a conflict is a race, never logged as an error
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and "1213" in r.message]
