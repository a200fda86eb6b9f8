"""URLs listing several hosts, the connection defaults (keepalives, timeouts) and a server that
turns read-only: parsed without a network where that is enough, then on the real servers."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import uuid
from urllib.parse import urlsplit

import pytest
from support.cli import (
    project_fixture,  # noqa: F401 (the project fixture)
    qgen,
)
from support.engines import Engine, engine_params, run
from support.queues import make_queue

import runtime
from runtime.connect import connect, split_hosts
from runtime.contract.errors import ConfigurationError, ConnectionLost

SECRET = "pw_must_not_show"


def _closed_port() -> int:
    """A local port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _with_hosts(url: str, hosts: str, password: str | None = None, query: str = "") -> str:
    """``url`` with its host list replaced by ``hosts`` (and a password, a query string)."""
    parts = urlsplit(url)
    user = parts.username or ""
    if password is not None:
        user += f":{password}"
    sep = "&" if parts.query and query else ""
    q = parts.query + sep + query
    return f"{parts.scheme}://{user}@{hosts}{parts.path}" + (f"?{q}" if q else "")


def _real_host(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port}" if parts.port else str(parts.hostname)


# --------------------------------------------------------------- parsing only


@pytest.mark.parametrize(
    ("netloc", "expected"),
    [
        ("u@h1:5433,h2:5434", [("h1", 5433), ("h2", 5434)]),
        ("u:p%40ss@h1,h2", [("h1", None), ("h2", None)]),
        ("h1:1,h2", [("h1", 1), ("h2", None)]),
        (
            "[::1]:5432,[fe80::1],10.0.0.1:6432",
            [("::1", 5432), ("fe80::1", None), ("10.0.0.1", 6432)],
        ),
        ("u@%2Fvar%2Frun%2Fpostgresql,h2:5", [("/var/run/postgresql", None), ("h2", 5)]),
        ("u@h", [("h", None)]),
        ("u@", []),
        ("", []),
        ("u@,h2", [("", None), ("h2", None)]),
    ],
)
def test_split_hosts(netloc: str, expected: list[tuple[str, int | None]]) -> None:
    assert split_hosts(f"postgresql://{netloc}/db", netloc) == expected


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql://u@h1:5433,h2:port/db", "'port' of host 'h2'"),
        ("postgresql://u@h1:0,h2/db", "'0' of host 'h1'"),
        ("postgresql://u@h1:65536/db", "'65536' of host 'h1'"),
        ("postgresql://u@[::1]x,h2/db", "'[::1]x'"),
        ("postgresql://u@[::1:5432/db", "Invalid IPv6"),
        ("mariadb://u@h1:3306,h2:3306x/db", "'3306x' of host 'h2'"),
        ("mysql://u@h1:1:2/db", "'1:2' of host 'h1'"),
    ],
)
def test_bad_host_list_is_one_configuration_error(url: str, named: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        run(connect(url))
    assert named in str(info.value) and "accepted forms" in str(info.value)
    secret_url = url.replace("u@", f"u:{SECRET}@")
    with pytest.raises(ConfigurationError) as info:
        run(connect(secret_url))
    assert SECRET not in str(info.value) and "***@" in str(info.value)


# ------------------------------------------------------- on the real servers

SERVERS = engine_params("postgres", "mariadb", "mysql")


@pytest.mark.parametrize("engine", SERVERS, indirect=True)
@pytest.mark.parametrize("form", ["first-closed", "ipv6-first", "password", "default-port"])
def test_multi_host_url_reaches_the_host_that_answers(engine: Engine, form: str) -> None:
    real = _real_host(engine.url)
    closed = _closed_port()
    default_port = 5432 if engine.name == "postgres" else 3306
    password = None
    if form == "first-closed":
        hosts = f"127.0.0.1:{closed},{real}"
    elif form == "ipv6-first":
        hosts = f"[::1]:{closed},{real}"
    elif form == "password":
        if engine.name != "postgres":
            pytest.skip("the test servers' MariaDB root has no password to give")
        hosts, password = f"127.0.0.1:{closed},{real}", SECRET  # trust: the password is unused
    else:
        if urlsplit(engine.url).port not in (None, default_port):
            pytest.skip("the test server is not on the default port")
        hosts = f"127.0.0.1:{closed},{urlsplit(engine.url).hostname}"
    url = _with_hosts(engine.url, hosts, password)

    async def go() -> None:
        async with await connect(url) as conn:
            assert await conn.fetchone("SELECT 1 AS one") == {"one": 1}
            assert SECRET not in conn.url and SECRET not in repr(conn)

    run(go())


def test_postgres_query_string_host_list(tmp_path) -> None:
    """libpq's own spelling: ?host=h1,h2&port=p1,p2."""
    from support.engines import engine_for

    engine = engine_for("postgres", tmp_path)
    parts = urlsplit(engine.url)
    url = (
        f"postgresql://{parts.username}@{parts.path}?host=127.0.0.1,{parts.hostname}"
        f"&port={_closed_port()},{parts.port or 5432}"
    )

    async def go() -> None:
        async with await connect(url) as conn:
            assert await conn.fetchone("SELECT 1 AS one") == {"one": 1}

    run(go())


@pytest.mark.parametrize("engine", SERVERS, indirect=True)
def test_no_host_answers_one_error_without_the_password(engine: Engine) -> None:
    url = _with_hosts(engine.url, f"127.0.0.1:{_closed_port()},[::1]:{_closed_port()}", SECRET)
    with pytest.raises(ConnectionLost) as info:
        run(connect(url))
    message = str(info.value)
    assert SECRET not in message and ":***@" in message
    assert message.startswith("cannot connect to ") and "refused" in message.lower()
    if engine.name != "postgres":  # libpq words its own; the mysql driver lists each host
        assert "none of its 2 hosts answered" in message


@pytest.mark.parametrize("engine", engine_params("mariadb", "mysql"), indirect=True)
def test_refused_login_is_not_retried_on_the_next_host(engine: Engine) -> None:
    """The first host that answers is the one: a login it refuses is a ConfigurationError."""
    url = _with_hosts(engine.url, f"127.0.0.1:{_closed_port()},{_real_host(engine.url)}", SECRET)
    with pytest.raises(ConfigurationError) as info:
        run(connect(url))
    assert SECRET not in str(info.value) and "Access denied" in str(info.value)


# ----------------------------------------------------------------- defaults


def _keepalive(conn: runtime.Connection) -> tuple[int, int]:
    """SO_KEEPALIVE and TCP_KEEPIDLE of the connection's own socket."""
    fd = conn._pg.fileno() if hasattr(conn, "_pg") else conn._my._sock.fileno()  # type: ignore[attr-defined]
    with socket.socket(fileno=socket.dup(fd)) as sock:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
        )


@pytest.mark.parametrize("engine", SERVERS, indirect=True)
def test_connection_defaults_and_their_overrides(engine: Engine) -> None:
    if engine.name == "postgres":
        show = (
            "SELECT current_setting('lock_timeout') AS lock_wait, "
            "current_setting('statement_timeout') AS statement, "
            "current_setting('idle_in_transaction_session_timeout') AS idle, "
            # the server's side of the socket: it notices a client lost in a partition
            "current_setting('tcp_keepalives_idle') AS server_idle, "
            "current_setting('tcp_user_timeout') AS server_unacked, "
            "current_setting('jit') AS jit"
        )
        defaults = {
            "lock_wait": "30s",
            "statement": "5min",
            "idle": "0",
            "server_idle": "30",
            "server_unacked": "60000",
            "jit": "off",
        }
        override = (
            "options=-c%20lock_timeout%3D7s%20-c%20statement_timeout%3D0"
            "%20-c%20tcp_keepalives_idle%3D11%20-c%20jit%3Don&keepalives=0"
        )
        overridden = {
            "lock_wait": "7s",
            "statement": "0",
            "idle": "0",
            "server_idle": "11",
            "server_unacked": "60000",
            "jit": "on",
        }
    else:
        show = "SELECT @@session.innodb_lock_wait_timeout AS lock_wait"
        defaults = {"lock_wait": 30}
        override = "innodb_lock_wait_timeout=7&keepalives=0"
        overridden = {"lock_wait": 7}

    async def go() -> None:
        async with await connect(engine.url) as conn:
            assert await conn.fetchone(show) == defaults
            assert _keepalive(conn) == (1, 30)
        url = _with_hosts(engine.url, _real_host(engine.url), query=override)
        async with await connect(url) as conn:
            assert await conn.fetchone(show) == overridden
            assert _keepalive(conn)[0] == 0

    run(go())


@pytest.mark.parametrize("engine", engine_params("mariadb"), indirect=True)
def test_mariadb_statement_time_and_timeouts_from_the_url(engine: Engine) -> None:
    url = _with_hosts(
        engine.url, _real_host(engine.url), query="max_statement_time=0.5&read_timeout=7"
    )

    async def go() -> None:
        async with await connect(url) as conn:
            assert conn._my._read_timeout == 7  # type: ignore[attr-defined]
            # the same for writes: PyMySQL need not set the socket's timeout per statement
            assert conn._my._write_timeout == 7  # type: ignore[attr-defined]
            with pytest.raises(runtime.DatabaseError, match="max_statement_time"):
                await conn.fetchone("SELECT SLEEP(3) AS s")
        async with await connect(engine.url) as conn:
            assert conn._my._read_timeout == 300  # type: ignore[attr-defined]
            assert conn._my._write_timeout == 300  # type: ignore[attr-defined]
        apart = _with_hosts(engine.url, _real_host(engine.url), query="write_timeout=20")
        async with await connect(apart) as conn:
            assert conn._my._write_timeout == 20  # type: ignore[attr-defined]
        bad = _with_hosts(engine.url, _real_host(engine.url), query="max_execution_time=5")
        with pytest.raises(ConfigurationError, match="max_execution_time"):
            await connect(bad)

    run(go())


# --------------------------------------------------------- read-only server

READ_ONLY = "options=-c%20default_transaction_read_only%3Don"


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
def test_read_only_server(engine: Engine) -> None:
    """A read-only session (a standby, a demoted primary) is refused at connect by default, and
    one that turns read-only under a statement is a lost connection (25006)."""

    async def go() -> None:
        url = _with_hosts(engine.url, _real_host(engine.url), query=READ_ONLY)
        with pytest.raises(ConnectionLost, match="read-only"):
            await connect(url)
        any_url = _with_hosts(
            engine.url, _real_host(engine.url), query=READ_ONLY + "&target_session_attrs=any"
        )
        async with await connect(any_url) as conn:
            with pytest.raises(ConnectionLost, match="read-only transaction"):
                await conn.execute("CREATE TEMPORARY TABLE qgen_ro_probe (x int)")
            assert conn.closed

    run(go())


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
@pytest.mark.parametrize("form", ["lease", "row_lock", "advisory"])
def test_consumer_reconnects_from_a_read_only_server(engine: Engine, form: str, caplog) -> None:
    """The first connections land on a read-only session: the consumer drops them as lost,
    reconnects and drains the queue on a writable one, without a traceback in its logs."""
    # its own URL: the read-only warning comes once per URL and minute
    query = f"{READ_ONLY}&target_session_attrs=any&application_name=ro_{form}_{uuid.uuid4().hex}"
    ro_url = _with_hosts(engine.url, _real_host(engine.url), query=query)

    async def go() -> None:
        qt = await make_queue(engine, form)
        try:
            ids = await qt.enqueue(*({"n": i} for i in range(20)))
            opened = 0

            async def opener() -> runtime.Connection:
                nonlocal opened
                opened += 1
                return await connect(ro_url if opened <= 2 else engine.url)

            async def handle(message, ctx):
                return runtime.ack()

            consumer = runtime.Consumer(
                opener, qt.queue, handle, concurrency=1, max_reconnect_interval=0.2
            )
            counts = await asyncio.wait_for(consumer.drain(), 60)
            assert counts["ack"] == 20, counts
            rows = await qt.rows()
            assert sorted(r["id"] for r in rows) == sorted(ids)
            assert all(r["processed_at"] is not None for r in rows)
            assert opened >= 3
        finally:
            await qt.drop()

    with caplog.at_level(logging.INFO, logger="runtime"):
        run(go())
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [m for m in warned if "is read-only" in m and "read-only transaction" in m], warned
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


# ------------------------------------------------------------ from the CLI


@pytest.mark.parametrize("engine", SERVERS, indirect=True)
def test_qgen_stats_through_a_multi_host_url(project, engine: Engine) -> None:
    """``qgen stats --db`` takes the same URLs; a bad port is one line, exit 2, no password."""
    cfg, url, _ = project
    multi = _with_hosts(url, f"127.0.0.1:{_closed_port()},{_real_host(url)}")
    code, out, err = qgen("stats", "--config", str(cfg), "--db", multi, "--json")
    assert code == 0, err
    assert json.loads(out)["jobs"]["ready"] == 0
    bad = _with_hosts(url, f"127.0.0.1:{_closed_port()},{_real_host(url)}x", SECRET)
    code, out, err = qgen("stats", "--config", str(cfg), "--db", bad)
    assert code == 2 and len(err.strip().splitlines()) == 1, (code, out, err)
    assert "is not a number from 1 to 65535" in err and SECRET not in err
