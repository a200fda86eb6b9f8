"""enqueue_many is all or nothing: one transaction for the batch, even on an autocommit connection."""

from __future__ import annotations

import pytest
from support.engines import engine_params, run
from support.queues import make_queue

import runtime
from runtime.contract.errors import DatabaseError

pytestmark = pytest.mark.parametrize("engine", engine_params(), indirect=True)

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
