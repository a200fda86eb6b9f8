"""The consumer through a database outage: a TCP proxy (tests/support/tcp_proxy.py) cuts the network.

``run()`` must never end because the database went away: it reconnects with backoff, logs one
line when the database is lost and one when it is back, and finishes the queue with nothing
lost (every message acked exactly once, counted from the table). ``drain()`` gives up after
``outage_timeout``. A configuration mistake (wrong database, role, password, sslmode) is a
ConfigurationError on every engine, raised at once instead of retried.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, engine_for, in_ci, run
from support.pg_cluster import PrivatePostgres
from support.queues import QueueUnderTest, make_queue
from support.tcp_proxy import TcpProxy

import runtime
from runtime.backoff import Backoff
from runtime.contract.errors import ConfigurationError, ConnectionLost
from runtime.drivers.postgres import connect_error

SERVERS = ["postgres", "mariadb", "mysql"]
FORMS = ["row_lock", "lease", "advisory"]


def _short_connect_timeout(url: str) -> str:
    # a black-holed connect waits for this, not the drivers' default of 10 s
    return url + ("&" if "?" in url else "?") + "connect_timeout=2"


async def _processed(qt: QueueUnderTest) -> int:
    (row,) = await qt.sql(
        f"SELECT COUNT(*) AS n FROM {qt.q(qt.table)} WHERE {qt.col('processed_at')} IS NOT NULL"
    )
    return int(row["n"])


async def _assert_all_acked_once(qt: QueueUnderTest, ids: list[int]) -> None:
    """Every enqueued message is in the table, processed, and nothing else is there."""
    rows = await qt.rows()
    assert sorted(r["id"] for r in rows) == sorted(ids)
    unprocessed = [r["id"] for r in rows if r["processed_at"] is None]
    assert unprocessed == [], f"not acked: {unprocessed}"


async def _run_through_outage(
    qt: QueueUnderTest,
    proxy: TcpProxy,
    cut_s: float,
    mode: str,
    n: int = 40,
    handler_s: float = 0.02,
    **consumer_kw: Any,
) -> tuple[dict[str, int], list[int]]:
    """run() through the proxy; cut it once a few messages are done; wait for the queue."""
    ids = await qt.enqueue(*({"n": i} for i in range(n)))
    handled: list[int] = []

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        handled.append(message.payload["n"])
        await asyncio.sleep(handler_s)
        return runtime.ack()

    consumer = runtime.Consumer(
        _short_connect_timeout(proxy.url),
        qt.queue,
        handle,
        concurrency=2,
        batch=4,
        max_reconnect_interval=1.0,
        **consumer_kw,
    )
    task = asyncio.create_task(consumer.run())
    deadline = time.monotonic() + cut_s + 120
    while len(handled) < n // 4:
        assert not task.done(), task.exception()
        assert time.monotonic() < deadline, "the consumer did not start"
        await asyncio.sleep(0.01)
    proxy.outage(cut_s, mode)
    try:
        while await _processed(qt) < n:
            # the fix: run() is still running whatever the outage did
            if task.done():
                raise AssertionError(f"run() ended during the outage: {task.exception()!r}")
            assert time.monotonic() < deadline, f"only {await _processed(qt)} of {n} acked"
            await asyncio.sleep(0.1)
    finally:
        consumer.stop()
        counts = await asyncio.wait_for(task, 60)
    await _assert_all_acked_once(qt, ids)
    return counts, handled


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("engine_name", SERVERS)
def test_run_survives_a_3s_network_cut(engine_name: str, form: str, tmp_path) -> None:
    """Old code: run() ended with ConnectionLost at the first reconnect during the cut."""
    engine = engine_for(engine_name, tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, form, lease_s=3)
        try:
            with TcpProxy(engine.url) as proxy:
                _counts, handled = await _run_through_outage(qt, proxy, 3, "refuse")
            assert proxy.cuts == 1
            assert sorted(set(handled)) == list(range(40))
        finally:
            await qt.drop()

    run(go())


def test_an_outage_logs_one_line_when_lost_and_one_when_back(tmp_path, caplog) -> None:
    engine = engine_for("postgres", tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "lease", lease_s=3)
        try:
            with TcpProxy(engine.url) as proxy, caplog.at_level(logging.DEBUG, logger="runtime"):
                await _run_through_outage(qt, proxy, 3, "refuse")
        finally:
            await qt.drop()
        warnings = [
            r.getMessage()
            for r in caplog.records
            if r.levelno >= logging.WARNING and r.name == "runtime"
        ]
        lost = [m for m in warnings if "lost the database" in m]
        back = [m for m in warnings if "database is back after" in m]
        attempts = [r for r in caplog.records if "still no database" in r.getMessage()]
        assert len(lost) == 1 and len(back) == 1, warnings
        assert len(attempts) >= 3  # retried several times, logged once
        gone = float(back[0].split("back after ")[1].split(" s")[0])
        assert 2.5 <= gone < 30, back[0]
        # nothing else at WARNING but the rows returned mid-batch
        others = [m for m in warnings if m not in lost + back and "mid-batch" not in m]
        assert others == [], others

    run(go())


@pytest.mark.parametrize("engine_name", ["postgres", "mariadb"])
def test_a_lease_handler_longer_than_its_lease_survives_an_outage(engine_name, tmp_path) -> None:
    """The lease extender loses its connection too: it reconnects, and never ends run()."""
    engine = engine_for(engine_name, tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "lease", lease_s=1.5)
        try:
            with TcpProxy(engine.url) as proxy:
                # settle_window=0: each settlement meets the cut itself, during the cut
                counts, handled = await _run_through_outage(
                    qt, proxy, 3, "refuse", n=8, handler_s=2.0, settle_window=0
                )
            assert sorted(set(handled)) == list(range(8))
            assert counts.get("extended", 0) > 0
        finally:
            await qt.drop()

    run(go())


def test_run_survives_a_30s_blackhole_on_every_engine_and_form(tmp_path) -> None:
    """One 30 s cut per engine (connections dropped, new ones black-holed), every form at once."""
    engines = [engine_for(name, tmp_path) for name in SERVERS]

    cut_done = asyncio.Event()

    async def one(engine: Engine, proxy: TcpProxy, form: str, started: asyncio.Event) -> None:
        qt = await make_queue(engine, form, lease_s=3)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(30)))
            handled: list[int] = []

            async def handle(message, ctx):
                handled.append(message.payload["n"])
                if len(handled) >= 5:  # every case is mid-queue, with handlers running, at the cut
                    started.set()
                    await cut_done.wait()
                await asyncio.sleep(0.05)
                return runtime.ack()

            consumer = runtime.Consumer(
                _short_connect_timeout(proxy.url),
                qt.queue,
                handle,
                concurrency=2,
                batch=3,
                max_reconnect_interval=2.0,
            )
            task = asyncio.create_task(consumer.run())
            while not started.is_set():
                assert not task.done(), task.exception()
                await asyncio.sleep(0.01)
            try:
                deadline = time.monotonic() + 150
                while await _processed(qt) < 30:
                    if task.done():
                        raise AssertionError(
                            f"{engine.name} {form}: run() ended: {task.exception()!r}"
                        )
                    assert time.monotonic() < deadline, f"{engine.name} {form}: not finished"
                    await asyncio.sleep(0.2)
            finally:
                consumer.stop()
                await asyncio.wait_for(task, 60)
            await _assert_all_acked_once(qt, ids)
            assert sorted(set(handled)) == list(range(30))
        finally:
            await qt.drop()

    async def go() -> None:
        proxies = [TcpProxy(e.url).start() for e in engines]
        try:
            cases = []
            for engine, proxy in zip(engines, proxies, strict=True):
                for form in FORMS:
                    started = asyncio.Event()
                    cases.append((started, asyncio.create_task(one(engine, proxy, form, started))))
            await asyncio.wait_for(asyncio.gather(*(s.wait() for s, _ in cases)), 60)
            for proxy in proxies:
                proxy.outage(30, "blackhole")
            cut_at = time.monotonic()
            cut_done.set()
            await asyncio.gather(*(t for _, t in cases))
            assert time.monotonic() - cut_at >= 30  # the queues could not finish during the cut
        finally:
            for proxy in proxies:
                proxy.close()

    run(go())


@pytest.mark.parametrize("engine_name", ["postgres", "mariadb"])
def test_drain_survives_an_outage_shorter_than_outage_timeout(engine_name, tmp_path) -> None:
    engine = engine_for(engine_name, tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "row_lock")
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(20)))
            with TcpProxy(engine.url) as proxy:
                handled: list[int] = []

                async def handle(message, ctx):
                    handled.append(message.payload["n"])
                    if len(handled) == 5:
                        proxy.outage(3)
                    await asyncio.sleep(0.02)
                    return runtime.ack()

                counts = await runtime.Consumer(
                    proxy.url, qt.queue, handle, concurrency=2, batch=4, outage_timeout=30
                ).drain()
            assert proxy.cuts == 1 and counts["ack"] >= 20 - 8
            await _assert_all_acked_once(qt, ids)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("transactional", [False, True], ids=["grouped", "transactional"])
@pytest.mark.parametrize("engine_name", ["postgres", "mariadb"])
def test_a_row_lock_batch_cut_before_its_commit_counts_nothing_of_it(
    engine_name, transactional, tmp_path
) -> None:
    """Row lock settles with the batch's COMMIT: a batch whose connection is cut before it
    commits settled nothing, so its acks are not counted; redelivered, each counts once."""
    engine = engine_for(engine_name, tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "row_lock")
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(12)))
            with TcpProxy(engine.url) as proxy:
                handled: list[int] = []

                async def handle(message, ctx):
                    handled.append(message.payload["n"])
                    if len(handled) == 4:  # the first batch's last handler: cut before COMMIT
                        proxy.outage(1)
                    return runtime.ack()

                counts = await runtime.Consumer(
                    _short_connect_timeout(proxy.url),
                    qt.queue,
                    handle,
                    concurrency=1,
                    batch=4,
                    transactional=transactional,
                    outage_timeout=60,
                ).drain()
            assert proxy.cuts == 1
            assert sorted(handled[:4]) == sorted(handled[4:8]), "the cut batch comes back whole"
            assert counts["ack"] == 12, counts  # each message counted once, when it committed
            await _assert_all_acked_once(qt, ids)
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine_name", ["postgres", "mariadb"])
def test_drain_gives_up_after_outage_timeout(engine_name, tmp_path) -> None:
    engine = engine_for(engine_name, tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue(*({"n": i} for i in range(10)))
            with TcpProxy(engine.url) as proxy:

                async def handle(message, ctx):
                    proxy.cut()  # and never healed
                    return runtime.ack()

                consumer = runtime.Consumer(
                    proxy.url, qt.queue, handle, concurrency=2, outage_timeout=1.5
                )
                began = time.monotonic()
                with pytest.raises(ConnectionLost, match=r"outage_timeout=1\.5s") as info:
                    await asyncio.wait_for(consumer.drain(), 60)
                assert time.monotonic() - began >= 1.5
                assert "cannot connect" in str(info.value)
        finally:
            await qt.drop()

    run(go())


def test_run_waits_for_a_database_that_is_not_up_yet(tmp_path, caplog) -> None:
    """Started while the database is away: run() waits for it, logged once, then works."""
    engine = engine_for("postgres", tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "advisory")
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(5)))
            with TcpProxy(engine.url) as proxy:
                proxy.cut()

                async def handle(message, ctx):
                    return runtime.ack()

                consumer = runtime.Consumer(proxy.url, qt.queue, handle, concurrency=2)
                with caplog.at_level(logging.WARNING, logger="runtime"):
                    task = asyncio.create_task(consumer.run())
                    await asyncio.sleep(2)
                    assert not task.done()
                    assert await _processed(qt) == 0
                    proxy.heal()
                    deadline = time.monotonic() + 30
                    while await _processed(qt) < 5 and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    consumer.stop()
                    counts = await asyncio.wait_for(task, 30)
            assert counts["ack"] == 5
            await _assert_all_acked_once(qt, ids)
            messages = [r.getMessage() for r in caplog.records]
            assert sum("lost the database" in m for m in messages) == 1
            assert sum("database is back after" in m for m in messages) == 1
        finally:
            await qt.drop()

    run(go())


# ------------------------------------------------------------ configuration mistakes


def _url_with(url: str, *, user: str | None = None, db: str | None = None, query: str = "") -> str:
    from urllib.parse import urlsplit, urlunsplit

    p = urlsplit(url)
    netloc = p.netloc
    if user is not None:
        netloc = f"{user}@{netloc.rsplit('@', 1)[-1]}"
    path = f"/{db}" if db is not None else p.path
    return urlunsplit((p.scheme, netloc, path, query or p.query, ""))


CONFIG_MISTAKES = {
    "postgres": {
        "unknown database": {"db": "qgen_no_such_db"},
        "unknown role": {"user": "qgen_no_such_role"},
        "sslmode the server cannot meet": {"query": "sslmode=require"},
        "bad sslmode": {"query": "sslmode=bogus"},
    },
    "mariadb": {
        "unknown database": {"db": "qgen_no_such_db"},
        "unknown user": {"user": "qgen_no_such_user"},
        "wrong password": {"user": "root:qgen_wrong_password"},
    },
}


@pytest.mark.parametrize(
    ("engine_name", "mistake"),
    [(e, m) for e, ms in CONFIG_MISTAKES.items() for m in ms],
)
def test_a_configuration_mistake_is_a_configuration_error_at_once(
    engine_name: str, mistake: str, tmp_path
) -> None:
    """Old code: PostgreSQL raised ConnectionLost for these, as if the server were away."""
    engine = engine_for(engine_name, tmp_path)
    url = _url_with(engine.url, **CONFIG_MISTAKES[engine_name][mistake])

    async def go() -> None:
        with pytest.raises(ConfigurationError) as info:
            await runtime.connect(url)
        assert "qgen_wrong_password" not in str(info.value)
        qt = await make_queue(engine, "lease")
        try:

            async def handle(message, ctx):
                return runtime.ack()

            # neither run() nor drain() retries it: both raise it at once
            for how in ("run", "drain"):
                consumer = runtime.Consumer(url, qt.queue, handle, outage_timeout=60)
                began = time.monotonic()
                with pytest.raises(ConfigurationError):
                    await asyncio.wait_for(getattr(consumer, how)(), 30)
                assert time.monotonic() - began < 15
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize(
    ("message", "kind"),
    [
        (
            'connection to server at "db", port 5432 failed: FATAL:  password authentication '
            'failed for user "app"',
            ConfigurationError,
        ),
        (
            'FATAL:  no pg_hba.conf entry for host "10.0.0.7", user "app", database "x"',
            ConfigurationError,
        ),
        ('FATAL:  database "orders" does not exist', ConfigurationError),
        ('FATAL:  role "app" does not exist', ConfigurationError),
        ("fe_sendauth: no password supplied", ConfigurationError),
        ("server does not support SSL, but SSL was required", ConfigurationError),
        ('invalid sslmode value: "bogus"', ConfigurationError),
        ('FATAL:  invalid value for parameter "statement_timeout": "soon"', ConfigurationError),
        ('FATAL:  unrecognized configuration parameter "statment_timeout"', ConfigurationError),
        ("FATAL:  terminating connection due to administrator command", ConnectionLost),
        ("FATAL:  the database system is starting up", ConnectionLost),
        ("FATAL:  the database system is shutting down", ConnectionLost),
        ("FATAL:  sorry, too many clients already", ConnectionLost),
        (
            'connection to server at "db", port 5432 failed: Connection refused\n\tIs the '
            "server running on that host and accepting TCP/IP connections?",
            ConnectionLost,
        ),
        ('connection to server at "db" failed: timeout expired', ConnectionLost),
        ("server closed the connection unexpectedly", ConnectionLost),
    ],
)
def test_postgres_connect_errors_are_told_apart(message: str, kind: type) -> None:
    """libpq gives a failed connection no SQLSTATE: its words say a mistake from an outage
    (28P01, 28000, 3D000 and the sslmode refusal are mistakes; 57P03 and unreachable are not)."""
    err = connect_error("postgresql://app:secret@db/orders", RuntimeError(message))
    assert type(err) is kind
    assert "secret" not in str(err)


def test_backoff_is_capped_exponential_with_jitter() -> None:
    import random

    b = Backoff(0.1, 2.0, random.Random(7))
    delays = [b.next() for _ in range(11)]
    assert delays[0] == 0  # the first try is at once
    steps = [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0, 2.0, 2.0, 2.0]
    for d, s in zip(delays[1:], steps, strict=True):
        assert s / 2 <= d <= s
    assert len({round(d, 6) for d in delays[6:]}) > 1  # jittered, not one fixed wait
    b.reset()
    assert b.next() == 0 and b.next() <= 0.1
    with pytest.raises(ValueError, match="first <= cap"):
        Backoff(1.0, 0.5)


def test_consumer_refuses_a_negative_outage_timeout(tmp_path) -> None:
    engine = engine_for("sqlite", tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        with pytest.raises(ValueError, match="outage_timeout"):
            runtime.Consumer(qt.url, qt.queue, lambda m, c: None, outage_timeout=-1)

    run(go())


def test_reconnects_back_off_instead_of_hammering_the_server(tmp_path, caplog) -> None:
    """Old code: after a lost connection a worker retried every poll_interval (or gave up);
    now its attempts are spaced by a doubling, jittered delay up to max_reconnect_interval."""
    engine = engine_for("postgres", tmp_path)

    async def go() -> None:
        qt = await make_queue(engine, "row_lock")
        try:
            with TcpProxy(engine.url) as proxy, caplog.at_level(logging.DEBUG, logger="runtime"):
                await _run_through_outage(qt, proxy, 4, "refuse", n=20)
        finally:
            await qt.drop()
        tries = [
            r
            for r in caplog.records
            if "still no database" in r.getMessage() or "lost the database" in r.getMessage()
        ]
        # two workers, 4 s: with 0.1 s doubling to a 1 s cap each tries about 7 times
        assert 4 <= len(tries) <= 2 * 12, len(tries)

    run(go())


def test_a_lease_extension_error_never_ends_drain(tmp_path) -> None:
    """Old code: an error of the extender's own statement (not a lost connection) ended its
    task, and drain() raised it at the end. Here the row is locked by another session while
    the extender's statement_timeout is 200 ms: its extensions fail until the lock goes."""
    engine = engine_for("postgres", tmp_path)
    url = engine.url + ("&" if "?" in engine.url else "?") + "options=-c%20statement_timeout%3D200"

    async def go() -> None:
        qt = await make_queue(engine, "lease", lease_s=3)
        try:
            (mid,) = await qt.enqueue({"n": 1})

            async def handle(message, ctx):
                async with await runtime.connect(engine.url) as other:
                    await other.begin()
                    await other.fetchall(
                        f"SELECT 1 FROM {qt.q(qt.table)} WHERE id = %(id)s FOR UPDATE",
                        {"id": mid},
                    )
                    await asyncio.sleep(1.8)  # the extension at ~1 s waits, times out, retries
                    await other.rollback()
                await asyncio.sleep(2.5)  # longer than the lease: it must have been extended
                return runtime.ack()

            counts = await asyncio.wait_for(
                runtime.Consumer(url, qt.queue, handle, concurrency=1).drain(), 60
            )
            assert counts["ack"] == 1 and counts.get("lease_lost", 0) == 0, counts
            assert counts["extended"] >= 1
            await _assert_all_acked_once(qt, [mid])
        finally:
            await qt.drop()

    run(go())


# ------------------------------------------------------------ a real server restart


class PrivateMariaDB:
    """A MariaDB server of the test's own (mariadb-install-db in a temp dir), to restart."""

    def __init__(self) -> None:
        import shutil
        import socket
        import tempfile

        self.daemon = shutil.which("mariadbd") or "/usr/sbin/mariadbd"
        install = shutil.which("mariadb-install-db")
        if install is None or not os.path.exists(self.daemon) or os.geteuid() != 0:
            reason = "needs mariadb-install-db, mariadbd and root"
            if in_ci():
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)
        self.base = Path(tempfile.mkdtemp(prefix="qgen-my-"))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"mariadb://root@127.0.0.1:{self.port}/test"
        self.proc: Any = None
        import subprocess

        done = subprocess.run(
            [install, "--no-defaults", f"--datadir={self.base / 'data'}", "--user=root",
             "--skip-test-db", "--auth-root-authentication-method=normal"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        self.start()
        import pymysql

        my = pymysql.connect(host="127.0.0.1", port=self.port, user="root")
        with my.cursor() as cur:
            cur.execute("CREATE DATABASE test")
        my.close()

    def start(self) -> None:
        import socket
        import subprocess

        self.proc = subprocess.Popen(
            [self.daemon, "--no-defaults", f"--datadir={self.base / 'data'}", "--user=root",
             f"--port={self.port}", "--bind-address=127.0.0.1", f"--socket={self.base / 'sock'}",
             f"--pid-file={self.base / 'pid'}", "--skip-log-bin", "--innodb-buffer-pool-size=32M",
             "--skip-name-resolve"],
            stdout=subprocess.DEVNULL, stderr=open(self.base / "err.log", "ab"),  # noqa: SIM115
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1):
                    return
            except OSError:
                assert self.proc.poll() is None, (self.base / "err.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "mariadbd did not start"
                time.sleep(0.1)

    def restart(self) -> None:
        """A clean shutdown (SIGTERM: sessions are killed, 1053), then a start."""
        import signal

        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        self.start()

    def close(self) -> None:
        import shutil

        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.base, ignore_errors=True)


class _PostgresServer(PrivatePostgres):
    def restart(self) -> None:
        self.ctl("restart", "-m", "fast")


@pytest.mark.parametrize("engine_name", ["postgres", "mariadb"])
def test_run_survives_server_restarts(engine_name, tmp_path, caplog) -> None:
    """The issue's findings: `pg_ctl restart -m fast` (sessions terminated, 57P01; then "the
    database system is shutting down / starting up", 57P03; then refused) and a MariaDB
    restart (sessions killed, 1053; then refused) ended run()."""
    pg = _PostgresServer() if engine_name == "postgres" else PrivateMariaDB()
    try:
        engine = Engine(name=engine_name, url=pg.url, dialect_name=engine_name)

        async def one(form: str, restarted: asyncio.Event, ready: asyncio.Event) -> None:
            qt = await make_queue(engine, form, lease_s=3)
            ids = await qt.enqueue(*({"n": i} for i in range(40)))
            handled: list[int] = []

            async def handle(message, ctx):
                handled.append(message.payload["n"])
                if len(handled) >= 5:
                    ready.set()
                await asyncio.sleep(0.05)
                return runtime.ack()

            consumer = runtime.Consumer(
                pg.url, qt.queue, handle, concurrency=2, batch=3, max_reconnect_interval=1.0
            )
            task = asyncio.create_task(consumer.run())
            try:
                await restarted.wait()
                deadline = time.monotonic() + 120
                while await _processed(qt) < 40:
                    if task.done():
                        raise AssertionError(f"{form}: run() ended: {task.exception()!r}")
                    assert time.monotonic() < deadline, f"{form}: not finished"
                    await asyncio.sleep(0.1)
            finally:
                consumer.stop()
                await asyncio.wait_for(task, 60)
            await _assert_all_acked_once(qt, ids)

        async def go() -> None:
            restarted = asyncio.Event()
            readies = [asyncio.Event() for _ in FORMS]
            cases = [
                asyncio.create_task(one(form, restarted, ready))
                for form, ready in zip(FORMS, readies, strict=True)
            ]
            try:
                await asyncio.wait_for(asyncio.gather(*(r.wait() for r in readies)), 60)
                loop = asyncio.get_running_loop()
                for _ in range(2):
                    await loop.run_in_executor(None, pg.restart)
                    await asyncio.sleep(0.5)
            finally:
                restarted.set()
                await asyncio.gather(*cases)

        with caplog.at_level(logging.WARNING, logger="runtime"):
            run(go())
        messages = [r.getMessage() for r in caplog.records]
        assert any("lost the database" in m for m in messages)
        assert any("database is back after" in m for m in messages)
    finally:
        pg.close()
