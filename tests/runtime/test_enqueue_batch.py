"""enqueue_many is all or nothing: one transaction for the batch, even on an autocommit connection."""

from __future__ import annotations

import pytest
from support.engines import engine_params, run
from support.queues import make_queue
from support.services import sync_connection

import runtime
from runtime.contract.errors import DatabaseError
from runtime.drivers.mysql import INSERT_BYTES, insert_rows

every_engine = pytest.mark.parametrize("engine", engine_params(), indirect=True)

# A constraint the test adds to the queue table so that the third row of a batch fails in the
# database (the runtime's own checks pass every payload): the rows before it must not stay.
REFUSE_BAD = {
    "postgres": ["ALTER TABLE {t} ADD CONSTRAINT {t}_no_bad CHECK (payload <> '\"bad\"'::jsonb)"],
    "mysql": ["ALTER TABLE {t} ADD CONSTRAINT {t}_no_bad CHECK (payload <> '\"bad\"')"],
    "mariadb": ["ALTER TABLE {t} ADD CONSTRAINT {t}_no_bad CHECK (payload <> '\"bad\"')"],
    "sqlite": [
        "CREATE TRIGGER {t}_no_bad BEFORE INSERT ON {t} WHEN NEW.payload = '\"bad\"' "
        "BEGIN SELECT RAISE(ABORT, 'bad payload'); END"
    ],
}


@every_engine
@pytest.mark.parametrize("form", ["row_lock", "lease"])
def test_a_batch_that_fails_part_way_leaves_nothing(engine, form):
    async def go():
        qt = await make_queue(engine, form)
        try:
            async with await runtime.connect(qt.url) as db:
                for ddl in REFUSE_BAD[engine.dialect_name]:
                    await db.execute(ddl.format(t=qt.table))
                with pytest.raises(DatabaseError):
                    await qt.queue.enqueue_many(db, ["ok", "ok", "bad", "ok"])
                assert not db.in_transaction
                assert await qt.rows() == []
                # the connection is usable and a good batch is written whole
                assert await qt.queue.enqueue_many(db, ["a", "b"]) == 2
                assert [r["payload"] for r in await qt.rows()] == ["a", "b"]
        finally:
            await qt.drop()

    run(go())


@every_engine
def test_a_batch_in_the_callers_transaction_rolls_back_with_it(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as db:
                await db.begin()
                assert await qt.queue.enqueue_many(db, ["a", "b"]) == 2
                assert db.in_transaction, "the caller's transaction stays open"
                await db.rollback()
                assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


# Text a multi-row INSERT must carry as it is: quotes, a backslash, a percent sign (the
# driver's own format character), a parenthesis, non-ASCII; rows of ~600 bytes, so a batch of
# BIG spans several statements of at most INSERT_BYTES on MySQL and MariaDB.
ODD = 'it\'s \\ "50%" (%(x)s) ; é ✓ ' * 20
BIG = 2 * INSERT_BYTES // len(ODD.encode()) + 100


def big_batch() -> list[str]:
    return [f"{i:05d} {ODD}" for i in range(BIG)]


async def inserts(db: runtime.Connection) -> int:
    """INSERT statements this session has run (MySQL and MariaDB)."""
    (row,) = await db.fetchall("SHOW SESSION STATUS LIKE 'Com_insert'")
    return int(row["Value"])


@every_engine
def test_a_batch_longer_than_one_statement_is_written_whole_and_in_order(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as db:
                mysql = db.dialect.name in ("mysql", "mariadb")
                before = await inserts(db) if mysql else 0
                assert await qt.queue.enqueue_many(db, big_batch()) == BIG
                if mysql:  # a few multi-row INSERTs, not one a row
                    assert 2 <= await inserts(db) - before <= 4
            assert [r["payload"] for r in await qt.rows()] == big_batch()
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("mariadb", "mysql"), indirect=True)
def test_a_services_pymysql_connection_writes_a_batch_in_a_few_statements(engine):
    async def go():
        qt = await make_queue(engine, "lease")
        try:
            with sync_connection(engine, "driver") as (conn, commit, rollback, _):
                cur = conn.cursor()
                qt.queue.sync.enqueue_many(conn, ["a", "b"])
                rollback()
                assert await qt.rows() == []  # in the service's transaction: rolled back
                cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
                before = int(cur.fetchone()[1])
                assert qt.queue.sync.enqueue_many(conn, big_batch()) == BIG
                commit()
                cur.execute("SHOW SESSION STATUS LIKE 'Com_insert'")
                assert 2 <= int(cur.fetchone()[1]) - before <= 4
            assert [r["payload"] for r in await qt.rows()] == big_batch()
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("mariadb", "mysql"), indirect=True)
def test_an_insert_that_is_not_one_row_of_values_runs_row_by_row(engine):
    """An INSERT with more after its row (ON DUPLICATE KEY UPDATE c = VALUES(c)) is not
    rewritten into a multi-row one: the cursor's executemany runs it as it is."""
    t = "qgen_insert_rows_odd"
    with sync_connection(engine, "driver") as (conn, commit, _, execute):
        execute(f"DROP TABLE IF EXISTS {t}")
        execute(f"CREATE TABLE {t} (k INT PRIMARY KEY, v TEXT, n INT)")
        try:
            cur = conn.cursor()
            sql = (
                f"INSERT INTO {t} (k, v, n) VALUES (%(k)s, %(v)s, 1) "
                "ON DUPLICATE KEY UPDATE v = VALUES(v), n = n + 1"
            )
            rows = [{"k": 1, "v": "a"}, {"k": 2, "v": ODD}, {"k": 1, "v": "c"}]
            insert_rows(cur, sql, rows)
            # comments inside the statement: a percent sign or a placeholder (formatted for
            # each row by the cursor) before VALUES, a parenthesis inside the row
            for head, row in (
                ("/* 100%% sure */", "(%(k)s, %(v)s, 0)"),
                ("/* k=%(k)s */", "(%(k)s, %(v)s, 0)"),
                ("", "(%(k)s, /* ( */ %(v)s, 0)"),
            ):
                execute(f"DELETE FROM {t} WHERE k > 2")
                insert_rows(
                    cur,
                    f"INSERT INTO {t} (k, v, n) {head} VALUES {row}",
                    [{"k": 3, "v": "d"}, {"k": 4, "v": "e"}],
                )
            commit()
            cur.execute(f"SELECT k, v, n FROM {t} ORDER BY k")
            assert cur.fetchall() == ((1, "c", 2), (2, ODD, 1), (3, "d", 0), (4, "e", 0))
        finally:
            execute(f"DROP TABLE {t}")
