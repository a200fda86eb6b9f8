"""Declared names that need quoting (mixed case, SQL keywords) on every engine and form: the
declaration renders, its schema creates the tables, and a message goes through every outcome
the queue has, read back from the tables under the declared names."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, drop_tables, run, unique_table
from support.outboxes import create_schema, recorder, records, render_outbox
from support.outcomes import drain, handler
from support.queues import make_queue

import runtime
from runtime.connect import connect
from runtime.contract.dialects import DIALECTS

FORMS = ["row_lock", "lease", "advisory"]
ROLES = (
    "group",
    "attempt",
    "retry_after",
    "processed_at",
    "enqueued_at",
    "priority",
    "fifo_key",
    "dedupe_key",
)
#: every role renamed; PostgreSQL folds an unquoted Id to id, so each of these needs its quotes
MIXED = {
    "table": "Mixed_Q",
    "dead": "_Dead",
    "id": "Id",
    "payload": "Body",
    "group": "Lane",
    "attempt": "Attempt",
    "retry_after": "RetryAfter",
    "locked_until": "LockedUntil",
    "processed_at": "ProcessedAt",
    "enqueued_at": "EnqueuedAt",
    "priority": "Priority",
    "fifo_key": "FifoKey",
    "dedupe_key": "DedupeKey",
}
#: names that are SQL keywords, or that the rendered statements also use as their own aliases
#: and WITH names in another case (ID against `AS id`, Locked against `AS locked`, …)
KEYWORDS = {
    "table": "order",
    "dead": "_select",
    "id": "ID",
    "payload": "from",
    "group": "group",
    "attempt": "Locked",
    "retry_after": "where",
    "locked_until": "New_Token",
    "processed_at": "Held",
    "enqueued_at": "user",
    "priority": "limit",
    "fifo_key": "key",
    "dedupe_key": "Ins",
}
OTHERS = {"mixed": ["Note"], "keywords": ["desc", "Nth"]}
#: the service's own event: the row goes to its own group, in the form's own guard
PARK = "UPDATE {qt} SET {c_group} = 'Parked' WHERE {c_id} = :id"


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dead", ["table", "group"])
@pytest.mark.parametrize("names", ["mixed", "keywords"])
def test_quoted_names_render_and_run_every_outcome(engine, form, dead, names):
    declared = MIXED if names == "mixed" else KEYWORDS
    park = PARK + (" AND {c_locked_until} = :token" if form == "lease" else "")
    if form == "lease":  # the lease's own column is cleared with the park
        park = park.replace("= 'Parked'", "= 'Parked', {c_locked_until} = NULL")

    async def go() -> None:
        qt = await make_queue(
            engine,
            form,
            columns=ROLES,
            dead=dead,
            max_attempts=2,
            names=declared,
            custom={"park": park},
            extra={"other_columns": OTHERS[names], "default_group": "Main"},
        )
        try:
            values = {col: f"v{n}" for n, col in enumerate(OTHERS[names])}
            kw: dict[str, Any] = {"values": values}
            ids = await qt.enqueue({"n": 1}, dedupe_key="one", priority=1, **kw)
            async with await runtime.connect(qt.url) as db:
                again = await qt.queue.enqueue(db, {"n": 1}, dedupe_key="one", **kw)
            assert again == ids[0] and again.duplicate
            for n in range(2, 7):
                ids += await qt.enqueue({"n": n}, fifo_key="k" if n in (3, 4) else None, **kw)
            plan = {
                1: ["ack"],
                2: ["drop"],
                3: ["retry", "ack"],
                4: ["retry_after:0", "ack"],
                5: ["retry", "retry_after:0"],  # the second failure reaches max_attempts
                6: ["custom:park"],
            }
            seen: list = []
            counts = await drain(qt, handler(plan, seen))
            assert counts == {
                "ack": 3,
                "drop": 1,
                "retry": 2,
                "retry_after": 1,
                "dead_letter": 1,
                "custom.park": 1,
            }, counts
            # 3 before 4: they share a fifo_key; 1 first: it has the higher priority
            firsts = [mid for i, (mid, _) in enumerate(seen) if (mid, _) not in seen[:i]]
            assert firsts[0] == ids[0] and firsts.index(ids[2]) < firsts.index(ids[3])
            rows = {r["id"]: r for r in await qt.rows()}
            for mid in ids[:4]:
                assert rows[mid]["processed_at"] is not None
                assert rows[mid]["enqueued_at"] is not None
            assert rows[ids[5]]["group"] == "Parked" and rows[ids[5]]["processed_at"] is None
            (gone,) = await qt.dead_rows()
            assert gone["id"] == ids[4] and gone["payload"] == {"n": 5} and gone["attempt"] == 3
            found = await qt.sql(
                f"SELECT {qt.q(OTHERS[names][0])} AS v FROM {qt.q(qt.table)} "
                f"WHERE {qt.col('id')} = {qt.p('id')}",
                {"id": ids[0]},
            )
            assert found == [{"v": "v0"}]
        finally:
            await qt.drop()

    run(go())


#: the outbox's columns by role, in mixed case and as keywords or the statements' own aliases
OUTBOX_NAMES = {
    "mixed": (
        "Outbox_Q",
        {
            "id": "Id",
            "payload": "Body",
            "topic": "Topic",
            "key": "Key",
            "created_at": "CreatedAt",
            "processed_at": "ProcessedAt",
        },
    ),
    "keywords": (
        "order",
        {
            "id": "ID",
            "payload": "from",
            "topic": "select",
            "key": "key",
            "created_at": "Name",
            "processed_at": "where",
        },
    ),
}


@pytest.mark.parametrize("names", ["mixed", "keywords"])
def test_an_outbox_with_quoted_names_renders_and_relays_every_outcome(
    engine: Engine, tmp_path: Path, names: str
) -> None:
    prefix, columns = OUTBOX_NAMES[names]
    table = unique_table(prefix)
    q = DIALECTS[engine.dialect_name].quote_ident
    park = (
        f"UPDATE {q(table)} SET {q(columns['topic'])} = 'Parked' "
        f"WHERE {q(columns['id'])} = :id AND {q(columns['topic'])} = :topic"
    )
    mark = f"DELETE FROM {q(table)} WHERE {q(columns['id'])} = :id"
    ob = render_outbox(
        tmp_path,
        engine.dialect_name,
        table,
        columns=columns,
        custom={"park": park},
        statements={"mark": mark},
    )

    async def go() -> None:
        await drop_tables(engine.url, table)
        await create_schema(engine.url, ob)
        try:
            async with await connect(engine.url) as db:
                for n in range(5):
                    await ob.put(db, {"n": n}, topic="Orders", key=f"k{n}")
            ids = [r["id"] for r in await records(engine.url, ob)]
            seen, handle = recorder(
                {
                    1: runtime.drop(),
                    2: runtime.retry(),
                    3: runtime.retry_after(30),
                    4: runtime.custom("park"),
                }
            )
            report = await ob.relay(engine.url, handle)
            assert report == {
                "ack": 1,
                "drop": 1,
                "retry": 1,
                "retry_after": 1,
                "custom.park": 1,
                "left": 2,
            }
            assert [(m.payload, m.topic, m.key) for m in seen][:2] == [
                ({"n": 0}, "Orders", "k0"),
                ({"n": 1}, "Orders", "k1"),
            ]
            assert all(m.created_at is not None for m in seen)
            # the mark override deleted the acked and dropped records; park changed its own
            rows = await records(engine.url, ob)
            assert [(r["id"], r["topic"], r["marked"]) for r in rows] == [
                (ids[2], "Orders", False),
                (ids[3], "Orders", False),
                (ids[4], "Parked", False),
            ]
        finally:
            await drop_tables(engine.url, table)

    run(go())
