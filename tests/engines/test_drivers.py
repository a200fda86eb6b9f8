"""The drivers against real servers: connect, version and dialect, statements, transactions,
savepoints, batches, lost connections, URLs. No mocks: every engine test talks to its server."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
import textwrap
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from support.engines import Engine, drop_tables, engine_params, run, unique_table

from runtime.connect import check_server_version, connect, parse_server_version
from runtime.contract.dialects import DIALECTS
from runtime.contract.errors import (
    BrokerError,
    ConfigurationError,
    ConnectionLost,
    DatabaseError,
    ServerTooOld,
)
from runtime.drivers.base import Connection, import_driver, redact_url

REPO = Path(__file__).resolve().parents[2]


def ph(engine: Engine, name: str) -> str:
    """The engine's spelling of parameter ``name``."""
    return DIALECTS[engine.dialect_name].placeholder(name)


@asynccontextmanager
async def table(engine: Engine) -> AsyncIterator[tuple[Connection, str]]:
    """A connection and a fresh table ``(id INTEGER PRIMARY KEY, name, n)``, dropped after."""
    name = unique_table("drv")
    conn = await connect(engine.url)
    try:
        await conn.execute(
            f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, name VARCHAR(100) NOT NULL, "
            f"n INTEGER NOT NULL)"
        )
        yield conn, name
    finally:
        await conn.close()
        await drop_tables(engine.url, name)


def insert_sql(engine: Engine, t: str) -> str:
    """INSERT INTO t (id, name, n) with the engine's placeholders."""
    values = ", ".join(ph(engine, c) for c in ("id", "name", "n"))
    return f"INSERT INTO {t} (id, name, n) VALUES ({values})"


async def count(conn: Connection, name: str) -> int:
    row = await conn.fetchone(f"SELECT COUNT(*) AS c FROM {name}")
    assert row is not None
    return int(row["c"])


# ------------------------------------------------------------------ connect


def test_connect_reads_version_and_dialect(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            assert not conn.closed
            assert not conn.in_transaction
            assert conn.server_version >= conn.dialect.floor
            text = await conn.server_version_text()
            assert check_server_version(conn.dialect, text) == conn.server_version
            if engine.name in ("mysql", "mariadb"):
                row = await conn.fetchone("SELECT VERSION() AS v")
                assert row is not None
                on_mariadb = "mariadb" in str(row["v"]).lower()
                # The server, not the URL's scheme, decides: mysql:// on MariaDB is "mariadb".
                assert conn.dialect.name == ("mariadb" if on_mariadb else "mysql")
            else:
                assert conn.dialect.name == engine.name
        assert conn.closed

    run(go())


@pytest.mark.parametrize("engine", engine_params("mysql"), indirect=True)
def test_mysql_url_on_mariadb_gets_mariadb_dialect(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            row = await conn.fetchone("SELECT VERSION() AS v")
            assert row is not None
            if "mariadb" not in str(row["v"]).lower():
                pytest.skip("the mysql:// URL reaches a real MySQL server here")
            assert conn.dialect is DIALECTS["mariadb"]

    run(go())


def test_session_settings(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            if conn.dialect.name == "sqlite":
                assert (await conn.fetchone("PRAGMA journal_mode")) == {"journal_mode": "wal"}
                assert (await conn.fetchone("PRAGMA busy_timeout")) == {"timeout": 30000}
                assert (await conn.fetchone("PRAGMA synchronous")) == {"synchronous": 1}
            elif conn.dialect.name == "postgres":
                row = await conn.fetchone("SHOW transaction_isolation")
                assert row == {"transaction_isolation": "read committed"}
            else:
                # MariaDB before 11.1 names it tx_isolation; MySQL 8 transaction_isolation.
                var = "tx_isolation" if conn.dialect.name == "mariadb" else "transaction_isolation"
                row = await conn.fetchone(
                    f"SELECT @@{var} AS iso, @@time_zone AS tz, "
                    "@@character_set_client AS cs, @@autocommit AS ac"
                )
                assert row == {"iso": "READ-COMMITTED", "tz": "+00:00", "cs": "utf8mb4", "ac": 1}

    run(go())


# --------------------------------------------------------------- statements


def test_round_trip_with_named_params(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            ins = insert_sql(engine, t)
            assert await conn.execute(ins, {"id": 1, "name": "alpha", "n": 10}) == 1
            assert await conn.execute(ins, {"id": 2, "name": "βeta 🎉", "n": 20}) == 1
            rows = await conn.fetchall(f"SELECT id, name, n FROM {t} ORDER BY id")
            assert rows == [
                {"id": 1, "name": "alpha", "n": 10},
                {"id": 2, "name": "βeta 🎉", "n": 20},
            ]
            one = await conn.fetchone(
                f"SELECT name FROM {t} WHERE id = {ph(engine, 'id')}", {"id": 2}
            )
            assert one == {"name": "βeta 🎉"}
            assert await conn.fetchone(f"SELECT name FROM {t} WHERE id = 99") is None
            assert await conn.fetchall(f"SELECT name FROM {t} WHERE id = 99") == []
            # A statement without rows gives [] / None, not an error.
            upd = f"UPDATE {t} SET n = n + 1 WHERE id = 1"
            assert await conn.fetchall(upd) == []
            assert await conn.fetchone(upd) is None

    run(go())


def test_fetchrows_gives_the_rows_as_tuples_with_their_column_names(engine: Engine) -> None:
    """What a claim reads its batch with: the same rows as fetchall, in the same order, as
    tuples in the order of the names; a statement that returns nothing gives no names."""

    async def go() -> None:
        async with table(engine) as (conn, t):
            ins = insert_sql(engine, t)
            await conn.execute(ins, {"id": 1, "name": "alpha", "n": 10})
            await conn.execute(ins, {"id": 2, "name": "βeta 🎉", "n": 20})
            sql = f"SELECT n, id, name FROM {t} WHERE n > {ph(engine, 'n')} ORDER BY id"
            names, rows = await conn.fetchrows(sql, {"n": 0})
            assert names == ("n", "id", "name")
            assert rows == [(10, 1, "alpha"), (20, 2, "βeta 🎉")]
            as_dicts = await conn.fetchall(sql, {"n": 0})
            assert [dict(zip(names, row, strict=True)) for row in rows] == as_dicts
            assert await conn.fetchrows(f"SELECT id FROM {t} WHERE id = 99") == (("id",), [])
            assert await conn.fetchrows(f"UPDATE {t} SET n = n + 1 WHERE id = 1") == ((), [])

    run(go())


def test_rowcount_counts_matched_rows(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 5), (2, 'b', 5)")
            # Setting a column to the value it holds still counts the row (MySQL/MariaDB would
            # say 0 without CLIENT.FOUND_ROWS): settlements check rowcount.
            assert await conn.execute(f"UPDATE {t} SET n = 5 WHERE id = 1") == 1
            assert await conn.execute(f"UPDATE {t} SET n = 5") == 2
            assert await conn.execute(f"UPDATE {t} SET n = 6 WHERE id = 99") == 0
            assert await conn.execute(f"DELETE FROM {t} WHERE id = 2") == 1
            assert await conn.execute(f"SELECT id FROM {t}") == 1

    run(go())


def test_literal_percent_with_params(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            if conn.dialect.paramstyle == "pyformat":
                sql = f"SELECT 'a%%b' AS s, {ph(engine, 'x')} AS x"
                bare = "SELECT 'a%%b' AS s"
            else:
                sql = f"SELECT 'a%b' AS s, {ph(engine, 'x')} AS x"
                bare = "SELECT 'a%b' AS s"
            row = await conn.fetchone(sql, {"x": "q"})
            assert row == {"s": "a%b", "x": "q"}
            # Without params the driver still gets {}: %% means % either way.
            assert await conn.fetchone(bare) == {"s": "a%b"}
            assert await conn.fetchone(bare, {}) == {"s": "a%b"}

    run(go())


def test_sql_errors_are_database_errors_with_the_drivers_own_as_cause(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            with pytest.raises(DatabaseError, match="qgen_no_such_table_anywhere") as info:
                await conn.execute("SELECT * FROM qgen_no_such_table_anywhere")
            # a BrokerError, with the driver's own (psycopg / PyMySQL / sqlite3) as its cause
            assert isinstance(info.value, BrokerError)
            cause = info.value.__cause__
            assert type(cause).__module__.split(".")[0] in ("psycopg", "pymysql", "sqlite3")
            assert not conn.closed
            assert await conn.fetchone("SELECT 1 AS one") == {"one": 1}

    run(go())


def test_statements_keep_their_order_under_gather(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            sql = f"SELECT {ph(engine, 'i')} AS i"
            rows = await asyncio.gather(*(conn.fetchone(sql, {"i": i}) for i in range(50)))
            assert [r["i"] if r else None for r in rows] == list(range(50))

    run(go())


def test_executemany_inserts_rows(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            ins = insert_sql(engine, t)
            await conn.executemany(
                ins, [{"id": i, "name": f"r{i}", "n": i * 2} for i in range(500)]
            )
            assert await count(conn, t) == 500
            row = await conn.fetchone(f"SELECT name, n FROM {t} WHERE id = 321")
            assert row == {"name": "r321", "n": 642}
            await conn.executemany(ins, [])
            assert await count(conn, t) == 500
            # In a transaction the whole batch rolls back.
            await conn.begin()
            await conn.executemany(ins, [{"id": 1000 + i, "name": "x", "n": 0} for i in range(10)])
            assert await count(conn, t) == 510
            await conn.rollback()
            assert await count(conn, t) == 500

    run(go())


# ------------------------------------------------------------- transactions


def test_autocommit_outside_begin(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            other = await connect(engine.url)
            try:
                await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
                assert not conn.in_transaction
                # Another connection sees it at once: the statement committed on its own.
                assert await count(other, t) == 1
                await conn.begin()
                await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (2, 'b', 2)")
                assert await count(conn, t) == 2
                assert await count(other, t) == 1  # not committed yet
                await conn.commit()
                assert await count(other, t) == 2
            finally:
                await other.close()

    run(go())


def test_begin_rollback_undoes_and_commit_keeps(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            assert not conn.in_transaction
            await conn.begin()
            assert conn.in_transaction
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            assert conn.in_transaction
            await conn.rollback()
            assert not conn.in_transaction
            assert await count(conn, t) == 0

            await conn.begin(immediate=True)
            assert conn.in_transaction
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            await conn.commit()
            assert not conn.in_transaction
            assert await count(conn, t) == 1

    run(go())


def test_begin_fetchrows_opens_the_transaction_its_rows_are_read_in(engine: Engine) -> None:
    # a row-lock claim: BEGIN and its first statement (one trip on a driver with a thread of
    # its own); the transaction stays open, its writes undone by a rollback; a statement that
    # fails leaves it open for the caller to roll back; one already open is refused
    async def go() -> None:
        async with table(engine) as (conn, t):
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            names, rows = await conn.begin_fetchrows(
                f"SELECT id, name FROM {t} WHERE n = {ph(engine, 'n')}", {"n": 1}
            )
            assert (names, rows) == (("id", "name"), [(1, "a")])
            assert conn.in_transaction
            await conn.execute(f"DELETE FROM {t}")
            await conn.rollback()
            assert not conn.in_transaction and await count(conn, t) == 1
            with pytest.raises(DatabaseError):
                await conn.begin_fetchrows(f"SELECT no_such_column FROM {t}")
            assert conn.in_transaction  # BEGIN's, for the caller to end
            await conn.rollback()
            await conn.begin()
            with pytest.raises(RuntimeError, match="transaction is open"):
                await conn.begin_fetchrows(f"SELECT id FROM {t}")
            await conn.rollback()
            assert (await conn.begin_fetchrows(f"SELECT id FROM {t} WHERE n = 2"))[1] == []
            assert conn.in_transaction
            await conn.commit()

    run(go())


def test_execute_commit_runs_its_statement_and_commits(engine: Engine) -> None:
    # a row-lock batch's last settlement and its COMMIT (one trip on a driver with a thread
    # of its own): the statement's rowcount, the transaction ended and its writes seen by
    # others; a statement that fails leaves it open for the caller to roll back
    async def go() -> None:
        async with table(engine) as (conn, t), await connect(engine.url) as other:
            with pytest.raises(RuntimeError, match="no open transaction"):
                await conn.execute_commit(f"DELETE FROM {t}")
            await conn.begin()
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            assert await conn.execute_commit(f"UPDATE {t} SET n = 2 WHERE id = 1") == 1
            assert not conn.in_transaction
            assert await other.fetchall(f"SELECT n FROM {t}") == [{"n": 2}]
            await conn.begin()
            await conn.execute(f"UPDATE {t} SET n = 3")
            with pytest.raises(DatabaseError):
                await conn.execute_commit(f"UPDATE {t} SET no_such_column = 4")
            assert conn.in_transaction  # for the caller to end
            await conn.rollback()
            assert await other.fetchall(f"SELECT n FROM {t}") == [{"n": 2}]
            await conn.begin()  # the connection goes on as usual
            await conn.rollback()

    run(go())


def test_commit_begin_commits_and_opens_the_next_transaction(engine: Engine) -> None:
    # a row-lock worker about to claim again: what the transaction wrote is committed (seen
    # by others) and a transaction is open again, which a rollback ends without a trace
    async def go() -> None:
        async with table(engine) as (conn, t), await connect(engine.url) as other:
            with pytest.raises(RuntimeError, match="no open transaction"):
                await conn.commit_begin()
            await conn.begin()
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            await conn.commit_begin()
            assert conn.in_transaction
            assert await other.fetchall(f"SELECT n FROM {t}") == [{"n": 1}]
            await conn.execute(f"UPDATE {t} SET n = 2")
            await conn.rollback()
            assert not conn.in_transaction
            assert await other.fetchall(f"SELECT n FROM {t}") == [{"n": 1}]
            await conn.begin()  # the connection goes on as usual
            await conn.rollback()

    run(go())


@pytest.mark.parametrize("engine", engine_params("postgres"), indirect=True)
def test_a_commit_begin_whose_commit_fails_opens_nothing(engine: Engine) -> None:
    # PostgreSQL sends both in one trip: a COMMIT that fails (a deferred unique check)
    # rolls the transaction back and the BEGIN after it never runs
    async def go() -> None:
        name = unique_table("drv")
        async with await connect(engine.url) as conn:
            try:
                await conn.execute(
                    f"CREATE TABLE {name} (id INTEGER, UNIQUE (id) DEFERRABLE INITIALLY DEFERRED)"
                )
                assert conn.chains_transactions
                await conn.begin()
                await conn.execute(f"INSERT INTO {name} (id) VALUES (1), (1)")
                with pytest.raises(DatabaseError, match="duplicate key"):
                    await conn.commit_begin()
                assert not conn.in_transaction
                assert await count(conn, name) == 0
                await conn.begin()
                await conn.rollback()
            finally:
                await drop_tables(engine.url, name)

    run(go())


def test_transaction_misuse_is_refused(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            with pytest.raises(RuntimeError, match="no open transaction"):
                await conn.commit()
            await conn.rollback()  # no-op outside a transaction
            with pytest.raises(RuntimeError, match="needs an open transaction"):
                await conn.savepoint("sp")
            await conn.begin()
            with pytest.raises(RuntimeError, match="transaction is open"):
                await conn.begin()
            assert conn.in_transaction
            with pytest.raises(ValueError, match="plain identifier"):
                await conn.savepoint("x; DROP TABLE y")
            await conn.rollback()
            assert not conn.in_transaction

    run(go())


def test_error_inside_transaction_then_rollback(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            await conn.begin()
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            with pytest.raises(DatabaseError):
                await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'dup', 1)")
            # Still the caller's transaction to end (PostgreSQL has it in the aborted state).
            assert conn.in_transaction
            await conn.rollback()
            assert not conn.in_transaction
            assert await count(conn, t) == 0

    run(go())


def test_savepoint_rollback_and_release(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            await conn.begin()
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            await conn.savepoint("sp1")
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (2, 'b', 2)")
            assert await count(conn, t) == 2
            await conn.rollback_to_savepoint("sp1")
            assert conn.in_transaction
            assert await count(conn, t) == 1
            await conn.savepoint("sp2")
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (3, 'c', 3)")
            await conn.release_savepoint("sp2")
            await conn.commit()
            rows = await conn.fetchall(f"SELECT id FROM {t} ORDER BY id")
            assert rows == [{"id": 1}, {"id": 3}]

    run(go())


def test_savepoint_recovers_from_an_error(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            await conn.begin()
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            await conn.savepoint("before_dup")
            with pytest.raises(DatabaseError):
                await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'dup', 1)")
            await conn.rollback_to_savepoint("before_dup")
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (2, 'b', 2)")
            await conn.commit()
            assert await count(conn, t) == 2

    run(go())


def test_close_rolls_back_open_transaction(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            other = await connect(engine.url)
            await other.begin()
            await other.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            await other.close()
            assert other.closed and not other.in_transaction
            await other.close()  # idempotent
            await other.abort()  # and never raises
            assert await count(conn, t) == 0

    run(go())


# ---------------------------------------------------------- lost connections


async def _session_id(conn: Connection) -> int:
    sql = "SELECT pg_backend_pid() AS id" if conn.dialect.name == "postgres" else None
    if conn.dialect.name in ("mysql", "mariadb"):
        sql = "SELECT CONNECTION_ID() AS id"
    assert sql is not None
    row = await conn.fetchone(sql)
    assert row is not None
    return int(row["id"])


async def _kill(url: str, conn: Connection) -> None:
    """Kill ``conn``'s session on the server from a second connection."""
    sid = await _session_id(conn)
    async with await connect(url) as killer:
        if conn.dialect.name == "postgres":
            await killer.fetchone("SELECT pg_terminate_backend(%(pid)s) AS ok", {"pid": sid})
        else:
            await killer.execute(f"KILL {sid}")


# SQLite has no server session to kill; its abort() is tested below with the others.
@pytest.mark.parametrize("engine", engine_params("postgres", "mariadb", "mysql"), indirect=True)
def test_killed_session_raises_connection_lost(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            victim = await connect(engine.url)
            await victim.begin()
            await victim.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            await _kill(engine.url, victim)
            with pytest.raises(ConnectionLost) as info:
                for _ in range(50):  # the server may take a moment to close the socket
                    await victim.fetchone("SELECT 1 AS one")
                    await asyncio.sleep(0.05)
            message = str(info.value)
            assert victim.url in message and "lost the connection" in message
            assert isinstance(info.value.__cause__, Exception)
            assert victim.closed
            assert not victim.in_transaction
            # Every later use says the same, without touching the dead driver.
            with pytest.raises(ConnectionLost, match="is closed"):
                await victim.execute("SELECT 1")
            await victim.rollback()  # no-op: nothing is open any more
            await victim.close()
            await victim.abort()
            # The uncommitted insert died with the session.
            assert await count(conn, t) == 0

    run(go())


def _slow_sql(dialect: str, seconds: int) -> str:
    if dialect == "postgres":
        return f"SELECT pg_sleep({seconds}) AS s"
    if dialect == "sqlite":
        # Runs on the worker thread for a while (roughly a second per few million rows).
        limit = 2_000_000 * seconds
        return (
            "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c "
            f"WHERE x < {limit}) SELECT MAX(x) AS s FROM c"
        )
    return f"SELECT SLEEP({seconds}) AS s"


def test_abort_wakes_a_statement_in_flight(engine: Engine) -> None:
    async def go() -> None:
        async with await connect(engine.url) as conn:
            task = asyncio.ensure_future(conn.fetchone(_slow_sql(conn.dialect.name, 60)))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            await conn.abort()
            with pytest.raises(ConnectionLost):
                await asyncio.wait_for(task, 5)
            assert time.monotonic() - started < 5
            assert conn.closed and not conn.in_transaction
            with pytest.raises(ConnectionLost):
                await conn.fetchone("SELECT 1 AS one")
            await conn.abort()  # repeatable

    run(go())


def test_cancelled_statement_leaves_the_connection_usable(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            await conn.begin()
            await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            task = asyncio.ensure_future(conn.fetchone(_slow_sql(conn.dialect.name, 1)))
            await asyncio.sleep(0.2)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            # The connection survives, and the transaction is still the caller's to end.
            assert not conn.closed and conn.in_transaction
            if conn.dialect.name == "postgres":
                # psycopg cancels the statement on the server, which fails the transaction:
                # only a rollback is accepted now.
                with pytest.raises(DatabaseError, match="transaction is aborted"):
                    await conn.fetchone("SELECT 1 AS one")
            else:
                # PyMySQL and sqlite3 finish the statement on their thread first; the
                # transaction goes on.
                assert await conn.fetchone("SELECT 1 AS one") == {"one": 1}
            await conn.rollback()
            assert not conn.in_transaction
            assert await conn.fetchone("SELECT 1 AS one") == {"one": 1}
            assert await count(conn, t) == 0

    run(go())


def test_abort_during_transaction_rolls_back(engine: Engine) -> None:
    async def go() -> None:
        async with table(engine) as (conn, t):
            other = await connect(engine.url)
            await other.begin()
            await other.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'a', 1)")
            await other.abort()
            assert other.closed and not other.in_transaction
            # The server notices the dropped socket and rolls back; give it a moment.
            deadline = time.monotonic() + 10
            while True:
                # An uncommitted row held by a live session would block or hide; here it must be
                # gone, and a new row with the same key must go in.
                try:
                    await conn.execute(f"INSERT INTO {t} (id, name, n) VALUES (1, 'b', 2)")
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    await asyncio.sleep(0.1)
            assert await conn.fetchall(f"SELECT name FROM {t}") == [{"name": "b"}]

    run(go())


# ------------------------------------------------------- what drivers return


def test_timestamps_round_trip(engine: Engine) -> None:
    async def go() -> None:
        name = unique_table("ts")
        conn = await connect(engine.url)
        try:
            when = dt.datetime(2024, 2, 29, 23, 59, 58, 123456)
            d = conn.dialect.name
            col = {"postgres": "TIMESTAMPTZ", "sqlite": "TEXT"}.get(d, "DATETIME(6)")
            await conn.execute(f"CREATE TABLE {name} (id INTEGER PRIMARY KEY, t {col})")
            value = when.replace(tzinfo=dt.UTC) if d == "postgres" else when
            if d == "sqlite":
                value = when.isoformat(" ")  # sqlite3's datetime adapter is deprecated in 3.12
            await conn.execute(
                f"INSERT INTO {name} (id, t) VALUES (1, {ph(engine, 't')})", {"t": value}
            )
            row = await conn.fetchone(f"SELECT t FROM {name}")
            assert row is not None
            got = row["t"]
            if d == "postgres":
                # timestamptz comes back aware, in the session's TimeZone; equal as an instant.
                assert got.tzinfo is not None and got == value
            elif d == "sqlite":
                assert dt.datetime.fromisoformat(got) == when
            else:
                # DATETIME(6) keeps the microseconds; a bare DATETIME would drop them.
                assert got == when
        finally:
            await conn.close()
            await drop_tables(engine.url, name)

    run(go())


# ----------------------------------------------------------- server versions


@pytest.mark.parametrize(
    ("dialect", "version"),
    [
        ("mariadb", "10.5.3-MariaDB"),
        ("mariadb", "5.5.5-10.5.27-MariaDB-1:10.5.27+maria~deb11"),
        ("mysql", "8.0.0"),
        ("mysql", "5.7.44-log"),
        ("postgres", "100004"),
        ("postgres", "10.4"),
        ("postgres", "90605"),
        ("sqlite", "3.34.0"),
    ],
)
def test_check_server_version_refuses_old_servers(dialect: str, version: str) -> None:
    d = DIALECTS[dialect]
    with pytest.raises(ServerTooOld) as info:
        check_server_version(d, version)
    message = str(info.value)
    assert f"needs {d.floor_text} or newer" in message
    assert message.startswith(f"found {d.floor_text.rsplit(' ', 1)[0]} ")


def test_check_server_version_messages() -> None:
    with pytest.raises(
        ServerTooOld, match=r"^found MariaDB 10\.5\.3, needs MariaDB 10\.6 or newer$"
    ):
        check_server_version(DIALECTS["mariadb"], "10.5.3-MariaDB")
    with pytest.raises(ServerTooOld, match=r"found PostgreSQL 10\.4, needs PostgreSQL 11"):
        check_server_version(DIALECTS["postgres"], "100004")
    with pytest.raises(ServerTooOld, match=r"found MySQL 8\.0\.0, needs MySQL 8\.0\.4"):
        check_server_version(DIALECTS["mysql"], "8.0.0")
    with pytest.raises(ServerTooOld, match=r"found SQLite 3\.34\.0, needs SQLite 3\.35"):
        check_server_version(DIALECTS["sqlite"], "3.34.0")


@pytest.mark.parametrize(
    ("dialect", "version", "expected"),
    [
        ("mariadb", "10.11.19-MariaDB-0+deb12u1", (10, 11, 19)),
        ("mariadb", "5.5.5-10.6.0-MariaDB", (10, 6, 0)),
        ("mariadb", "11.4.2-MariaDB", (11, 4, 2)),
        ("mysql", "8.0.4", (8, 0, 4)),
        ("mysql", "8.4.3", (8, 4, 3)),
        ("mysql", "9.1.0-commercial", (9, 1, 0)),
        ("postgres", "150019", (15, 19, 0)),
        ("postgres", "110000", (11, 0, 0)),
        ("postgres", "15.19 (Debian 15.19-0+deb12u1)", (15, 19, 0)),
        ("postgres", "PostgreSQL 16.2 on x86_64-pc-linux-gnu", (16, 2, 0)),
        ("sqlite", "3.35.0", (3, 35, 0)),
        ("sqlite", "3.46.1", (3, 46, 1)),
    ],
)
def test_check_server_version_accepts_current(
    dialect: str, version: str, expected: tuple[int, int, int]
) -> None:
    assert check_server_version(DIALECTS[dialect], version) == expected


def test_unreadable_version_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="cannot read a MySQL version"):
        parse_server_version(DIALECTS["mysql"], "unknown")


# -------------------------------------------------------------------- URLs


@pytest.mark.parametrize(
    "url",
    [
        "not a url",
        "oracle://scott:tiger@127.0.0.1/orcl",
        "postgresql://postgres@127.0.0.1:notaport/test",
        "mysql:///test",
        "mysql://root@127.0.0.1:3306/test?bogus=1",
        "mysql://root@127.0.0.1:3306/test?connect_timeout=soon",
        "sqlite://somehost/x.db",
        "sqlite://",
        "sqlite:///",
    ],
)
def test_bad_url_is_a_configuration_error(url: str) -> None:
    with pytest.raises(ConfigurationError) as info:
        run(connect(url))
    message = str(info.value)
    assert "accepted forms" in message and "sqlite:///:memory:" in message


def test_configuration_error_hides_the_password() -> None:
    with pytest.raises(ConfigurationError) as info:
        run(connect("mysql://root:hunter2@127.0.0.1:3306/test?bogus=1"))
    assert "hunter2" not in str(info.value)
    assert "root:***@127.0.0.1" in str(info.value)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:secret@h:5432/db", "postgresql://u:***@h:5432/db"),
        ("mysql://u@h/db", "mysql://u@h/db"),
        (
            "postgresql://h/db?password=secret&sslmode=require",
            "postgresql://h/db?password=***&sslmode=require",
        ),
        ("sqlite:////abs/path.db", "sqlite:////abs/path.db"),
        ("sqlite:///:memory:", "sqlite:///:memory:"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://postgres:pw_should_not_show@127.0.0.1:1/test",
        "postgres://postgres@127.0.0.1:1/test",
        "mysql://root:pw_should_not_show@127.0.0.1:1/test",
        "mariadb://root@127.0.0.1:1/test",
    ],
)
def test_unreachable_server_is_connection_lost(url: str) -> None:
    with pytest.raises(ConnectionLost) as info:
        run(connect(url))
    message = str(info.value)
    assert message.startswith(f"cannot connect to {redact_url(url)}")
    assert "pw_should_not_show" not in message
    assert "refused" in message.lower()


def test_sqlite_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def go() -> None:
        absolute = tmp_path / "abs.db"
        async with await connect(f"sqlite:///{absolute}") as conn:
            await conn.execute("CREATE TABLE t (x INTEGER)")
        assert absolute.exists()
        monkeypatch.chdir(tmp_path)
        async with await connect("sqlite:///rel/../relative.db") as conn:
            await conn.execute("CREATE TABLE t (x INTEGER)")
        assert (tmp_path / "relative.db").exists()
        async with await connect("sqlite:///:memory:") as conn:
            assert await conn.fetchone("SELECT 1 AS one") == {"one": 1}
        with pytest.raises(ConfigurationError, match="cannot open the SQLite database"):
            await connect(f"sqlite:///{tmp_path}/no/such/dir/x.db")

    (tmp_path / "rel").mkdir()
    run(go())


# ------------------------------------------------------------ missing driver


def test_missing_driver_names_the_extra() -> None:
    with pytest.raises(ConfigurationError, match=r"pip install 'qgen-sql\[postgres\]'"):
        import_driver("qgen_no_such_driver_module", "postgres")


def test_runtime_imports_without_any_driver() -> None:
    # A fresh interpreter where psycopg, pymysql and aiosqlite cannot be imported (a None entry
    # in sys.modules makes `import` raise ImportError, as if the package were absent).
    script = textwrap.dedent(
        """
        import asyncio, sys
        for name in ("psycopg", "pymysql", "aiosqlite"):
            sys.modules[name] = None
        import runtime, runtime.drivers, runtime.drivers.postgres, runtime.drivers.mysql
        import runtime.drivers.sqlite
        from runtime.connect import connect
        from runtime.contract.errors import ConfigurationError
        for url, extra in [
            ("postgresql://postgres@127.0.0.1:5432/test", "postgres"),
            ("mysql://root@127.0.0.1:3306/test", "mysql"),
            ("sqlite:///:memory:", "sqlite"),
        ]:
            try:
                asyncio.run(connect(url))
            except ConfigurationError as exc:
                assert f"pip install 'qgen-sql[{extra}]'" in str(exc), exc
            else:
                raise SystemExit(f"{url} connected without its driver")
        print("ok")
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def _apply_every_example(url: str) -> str:
    """Apply every example queue's SQLite file to ``url``; the error's last line, or ""."""
    import runtime

    async def go() -> None:
        for path in sorted((REPO / "generated_examples" / "sql" / "sqlite").glob("*.sql")):
            await runtime.apply(url, runtime.load(path))

    try:
        asyncio.run(go())
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def test_two_applies_on_one_new_sqlite_file_both_open_it(tmp_path: Path) -> None:
    """Switching a new file to WAL needs it alone for a moment, and SQLite answers "database
    is locked" at once, without its busy handler, to a connection opened in that moment:
    two `qgen apply` started together on a new file failed about one time in ten. A new
    connection now waits for it, within the busy timeout."""
    import multiprocessing

    with multiprocessing.get_context("fork").Pool(2) as pool:
        failed = [
            err
            for n in range(40)
            for err in pool.map(
                _apply_every_example, [f"sqlite:///{tmp_path}/new-{n}.db?mode=rwc"] * 2
            )
            if err
        ]
    assert failed == []
