"""Several consumers drain one queue at once: every message ends in exactly one place, once.

About 2000 messages per engine (PostgreSQL and MariaDB), split over the three claim forms.
Consumers run as asyncio tasks (three Consumers of six workers: enough contention that a
claim which locks more rows than it takes deadlocks) or, for one form, as two OS processes. Each delivery's
outcome is seeded by (seed, message, attempt), so the fate of every message is known in
advance (tests/support/model/outcome_model.py ``lifecycle``) whatever order the consumers take
them in; the test then checks:

* every message ends in exactly one final place: finished (deleted, or processed_at set) or
  in the dead letter (group or table, with its payload and its count);
* the handler saw each message's deliveries 1..k exactly once each: no delivery ran twice;
* the consumers' counts per settlement add up to the predicted ones (none lost a lease);
* transactional mode: the side table the handler writes through ``ctx.db`` holds exactly one
  row per acked message, written by its last delivery;
* a fifo_key queue (one case per form, mixed priorities, every fifth message without a key):
  the handler never ran two messages of one key at once, and ran each key's messages in id
  order, all deliveries of one before the first of the next (its dead head included).

A second test races enqueuers of a few dedupe keys against consumers: never two pending rows
of one key.

``QGEN_MODEL_SEED`` overrides the seed; a failure names the seed it ran with.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, engine_for, run, unique_table
from support.model.drain_worker import fifo_key_for, make_handler, outcome_for
from support.model.outcome_model import DEAD_GROUP, Shape, lifecycle
from support.model.tables import render_queue, render_text

import runtime
from runtime.queue import Queue, decode_payload

pytestmark = pytest.mark.model

WORKER_SCRIPT = Path(__file__).resolve().parents[1] / "support" / "model" / "drain_worker.py"
REPO = Path(__file__).resolve().parents[2]
#: the labels the Consumer counts settlements under
SETTLEMENTS = ("ack", "drop", "retry", "retry_after", "dead_letter")


@dataclass(frozen=True)
class Case:
    """One drain: a table shape, how the consumers run, and how many messages."""

    shape: Shape
    transactional: bool
    #: "tasks": three Consumers (6 workers each) as asyncio tasks; "processes": two OS
    #: processes (4 workers each)
    consumers: str
    messages: int
    seed: int

    @property
    def id(self) -> str:
        tx = "transactional" if self.transactional else "plain"
        fifo = "-fifo" if self.shape.fifo_key else ""
        return f"{self.shape.form}-{self.consumers}-{tx}{fifo}"


CASES = [
    Case(
        Shape(
            "lease",
            attempt=True,
            retry_after=True,
            processed_at=True,
            dead_letter="table",
            max_attempts=3,
        ),
        transactional=False,
        consumers="tasks",
        messages=700,
        seed=1,
    ),
    Case(
        Shape(
            "row_lock",
            attempt=True,
            retry_after=True,
            group=True,
            dead_letter="group",
            max_attempts=3,
        ),
        transactional=True,
        consumers="tasks",
        messages=700,
        seed=2,
    ),
    Case(
        Shape(
            "advisory",
            attempt=True,
            retry_after=True,
            processed_at=True,
            dead_letter="table",
            max_attempts=3,
        ),
        transactional=True,
        consumers="processes",
        messages=600,
        seed=3,
    ),
    # FIFO: one per form, the advisory one in two processes
    Case(
        Shape(
            "lease",
            attempt=True,
            retry_after=True,
            processed_at=True,
            dead_letter="table",
            max_attempts=3,
            priority=True,
            fifo_key=True,
        ),
        transactional=False,
        consumers="tasks",
        messages=300,
        seed=4,
    ),
    Case(
        Shape(
            "row_lock",
            attempt=True,
            retry_after=True,
            group=True,
            dead_letter="group",
            max_attempts=3,
            fifo_key=True,
        ),
        transactional=True,
        consumers="tasks",
        messages=300,
        seed=5,
    ),
    Case(
        Shape(
            "advisory",
            attempt=True,
            retry_after=True,
            dead_letter="group",
            group=True,
            max_attempts=3,
            priority=True,
            fifo_key=True,
        ),
        transactional=False,
        consumers="processes",
        messages=300,
        seed=6,
    ),
]

ENGINES = [
    pytest.param(name, id=name, marks=pytest.mark.engine(name)) for name in ("postgres", "mariadb")
]


@dataclass
class Prediction:
    """A message's fate: where it ends, after how many deliveries, and their settlements."""

    place: str  # "finished" | "dead_letter"
    deliveries: int
    labels: list[str]
    acked: bool


def predict(case: Case, seed: int, n: int) -> Prediction:
    cap = case.shape.max_attempts
    assert cap is not None
    outcomes = [outcome_for(seed, n, a) for a in range(1, cap + 1)]
    as_model = ["retry" if o == "raise" else o for o in outcomes]
    place, k = lifecycle(case.shape, as_model)
    assert place != "pending"
    labels = ["ack" if o == "none" else o for o in as_model[:k]]  # None settles as an ack
    if place == "dead_letter":
        labels[-1] = "dead_letter"
    return Prediction(place, k, labels, acked=labels[-1] == "ack")


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
@pytest.mark.parametrize("engine_name", ENGINES)
def test_concurrent_consumers_settle_each_delivery_once(
    engine_name: str, case: Case, tmp_path: Path
) -> None:
    engine = engine_for(engine_name, tmp_path)
    seed = int(os.environ.get("QGEN_MODEL_SEED", case.seed))
    try:
        run(_scenario(engine, case, seed, tmp_path))
    except AssertionError as exc:
        raise AssertionError(f"[seed {seed}; rerun with QGEN_MODEL_SEED={seed}] {exc}") from None


async def _scenario(engine: Engine, case: Case, seed: int, tmp_path: Path) -> None:
    table, dead_table, side = unique_table("mc"), unique_table("mcd"), unique_table("mcs")
    queue = render_queue(case.shape, engine.dialect_name, table, dead_table)
    q = queue.dialect.quote_ident
    db = await runtime.connect(engine.url)
    try:
        for sql in queue.rendered.require("schema"):
            await db.execute(sql)
        await db.execute(f"CREATE TABLE {q(side)} (n INTEGER, attempt INTEGER, msg_id BIGINT)")
        await db.begin()
        if case.shape.fifo_key:
            for n in range(case.messages):
                priority = n % 3 if case.shape.priority else None
                await queue.enqueue(db, {"n": n}, priority=priority, fifo_key=fifo_key_for(n))
        else:
            await queue.enqueue_many(db, [{"n": n} for n in range(case.messages)])
        await db.commit()

        side_table = side if case.transactional else None
        if case.consumers == "tasks":
            log, counts = await _drain_in_tasks(engine, queue, case, seed, side_table)
        else:
            text = render_text(case.shape, engine.dialect_name, table, dead_table)
            log, counts = await _drain_in_processes(engine, text, case, seed, side_table, tmp_path)
        await _check(db, queue, case, seed, log, counts, dead_table, side)
    finally:
        for name in (table, dead_table, side):
            await db.execute(f"DROP TABLE IF EXISTS {q(name)}")
        await db.close()


class _Expected(logging.Filter):
    """Drops the runtime's expected records (the cap's warnings, the handler's own raises), so a
    failure report shows what matters."""

    def filter(self, record: logging.LogRecord) -> bool:
        text = record.getMessage()
        return "moving it to the dead letter" not in text and "raised: taken as retry()" not in text


async def _drain_in_tasks(
    engine: Engine, queue: Queue, case: Case, seed: int, side: str | None
) -> tuple[list[dict[str, Any]], Counter[str]]:
    log: list[dict[str, Any]] = []
    handle = make_handler(queue, seed, log, side)
    consumers = [
        runtime.Consumer(
            engine.url,
            queue,
            handle,
            transactional=case.transactional,
            concurrency=6,
            batch=5,
            retry_policy=runtime.Immediate(),  # the model's retries come back at once
        )
        for _ in range(3)
    ]
    quiet = _Expected()
    logging.getLogger("runtime").addFilter(quiet)
    try:
        # every consumer runs to its end, so a failing one leaves no task behind
        results = await asyncio.gather(*(c.drain() for c in consumers), return_exceptions=True)
    finally:
        logging.getLogger("runtime").removeFilter(quiet)
    for r in results:
        if isinstance(r, BaseException):
            raise r
    return log, sum((Counter(r) for r in results if isinstance(r, dict)), Counter())


async def _drain_in_processes(
    engine: Engine, text: str, case: Case, seed: int, side: str | None, tmp_path: Path
) -> tuple[list[dict[str, Any]], Counter[str]]:
    rendered = tmp_path / "queue.sql"
    rendered.write_text(text, encoding="utf-8")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    procs, logs = [], []
    for i in range(2):
        log_file = tmp_path / f"deliveries-{i}.jsonl"
        logs.append(log_file)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    str(WORKER_SCRIPT),
                    engine.url,
                    str(rendered),
                    str(seed),
                    str(log_file),
                    side or "-",
                    "1" if case.transactional else "0",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
        )

    def wait() -> list[tuple[int, str, str]]:
        for p in procs:  # both connected: start them together
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", p.communicate(
                timeout=30
            )
        for p in procs:
            assert p.stdin is not None
            p.stdin.write("go\n")
            p.stdin.flush()
        return [(p.wait(timeout=300), *p.communicate(timeout=30)) for p in procs]

    try:
        finished = await asyncio.get_running_loop().run_in_executor(None, wait)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    counts: Counter[str] = Counter()
    log: list[dict[str, Any]] = []
    for (code, out, err), log_file in zip(finished, logs, strict=True):
        assert code == 0, f"a drain process failed ({code}):\n{err}"
        assert not err.strip(), f"a drain process logged:\n{err}"
        own = [json.loads(line) for line in log_file.read_text(encoding="utf-8").splitlines()]
        assert own, "one of the two processes handled no delivery: they did not run together"
        log += own
        counts += Counter(json.loads(out.strip().splitlines()[-1]))
    return log, counts


async def _check(
    db: runtime.drivers.Connection,
    queue: Queue,
    case: Case,
    seed: int,
    log: list[dict[str, Any]],
    counts: Counter[str],
    dead_table: str,
    side: str,
) -> None:
    shape = case.shape
    fate = {n: predict(case, seed, n) for n in range(case.messages)}
    q = queue.dialect.quote_ident
    col = {role: q(name) for role, name in queue.columns.items()}

    # the handler saw deliveries 1..k of every message, each exactly once
    seen: dict[int, list[int]] = {}
    for entry in log:
        seen.setdefault(entry["n"], []).append(entry["attempt"])
    problems = [
        f"message {n}: deliveries {sorted(seen.get(n, []))}, expected 1..{p.deliveries}"
        for n, p in fate.items()
        if sorted(seen.get(n, [])) != list(range(1, p.deliveries + 1))
    ]
    assert not problems, "\n".join(problems[:20])

    # the consumers settled each delivery once, with the predicted statement
    expected = Counter(label for p in fate.values() for label in p.labels)
    settled = Counter({k: v for k, v in counts.items() if k in SETTLEMENTS})
    assert settled == expected, f"settlements {dict(settled)}, predicted {dict(expected)}"
    # lease_lost, released, connection_lost…: none may happen here ("extended" may)
    unexpected = {k: v for k, v in counts.items() if k not in SETTLEMENTS and k != "extended"}
    assert not unexpected, f"the consumers also counted {unexpected}"

    # every message is in exactly one final place, its payload and count kept
    select = [
        f"{col['id']} AS id",
        f"{col['payload']} AS payload",
        f"{col['attempt']} AS attempt",
    ]
    if shape.group:
        select.append(f"{col['group']} AS grp")
    if shape.processed_at:
        select.append(f"{col['processed_at']} AS processed_at")
    found = [
        (queue.table, r)
        for r in await db.fetchall(f"SELECT {', '.join(select)} FROM {q(queue.table)}")
    ]
    if shape.dead_letter == "table":
        found += [
            (dead_table, r)
            for r in await db.fetchall(f"SELECT {', '.join(select)} FROM {q(dead_table)}")
        ]
    place: dict[int, list[str]] = {}
    wrong: list[str] = []
    for table, r in found:
        payload = decode_payload(r["payload"])
        n = payload.get("n") if isinstance(payload, dict) else None
        if n not in fate:
            wrong.append(f"row {r['id']} of {table}: payload {payload!r} is no message's")
            continue
        if table != queue.table or r.get("grp") == DEAD_GROUP:
            where = "dead_letter"
            if int(r["attempt"]) != fate[n].deliveries + 1:
                wrong.append(
                    f"message {n}: dead-letter attempt {r['attempt']}, expected "
                    f"{fate[n].deliveries + 1} (the next delivery's number)"
                )
        elif r.get("processed_at") is not None:
            where = "finished"
        else:
            where = "still queued"
        place.setdefault(n, []).append(where)
    if not shape.processed_at:  # finished rows were deleted
        for n, p in fate.items():
            if p.place == "finished" and n not in place:
                place[n] = ["finished"]
    wrong += [
        f"message {n}: found in {place.get(n, ['no place'])}, expected {p.place}"
        for n, p in fate.items()
        if place.get(n) != [p.place]
    ]
    assert not wrong, f"{len(wrong)} problems, the first ones:\n" + "\n".join(wrong[:20])

    if shape.fifo_key:
        _check_fifo(log)

    # transactional mode: one side row per acked message, from its last delivery
    side_rows = await db.fetchall(f"SELECT n, attempt FROM {q(side)}")
    got = Counter((int(r["n"]), int(r["attempt"])) for r in side_rows)
    want = Counter(
        {(n, p.deliveries): 1 for n, p in fate.items() if p.acked and case.transactional}
    )
    assert got == want, (
        f"side table: {sum(got.values())} rows; missing {sorted((want - got).elements())[:10]}, "
        f"extra {sorted((got - want).elements())[:10]}"
    )


def _check_fifo(log: list[dict[str, Any]]) -> None:
    """Per key, the deliveries in the order they started: message ids never go down (id
    order, a message's retries together), and each starts after the one before it ended
    (never two of a key in flight at once)."""
    by_key: dict[str, list[dict[str, Any]]] = {}
    for entry in log:
        key = fifo_key_for(entry["n"])
        if key is not None:
            by_key.setdefault(key, []).append(entry)
    assert len(by_key) == 7, f"the log has deliveries of keys {sorted(by_key)}"
    wrong = []
    for key, entries in sorted(by_key.items()):
        entries.sort(key=lambda e: e["start"])
        for before, after in itertools.pairwise(entries):
            if after["id"] < before["id"]:
                wrong.append(f"key {key}: message {after['id']} after {before['id']}")
            if after["start"] < before["end"]:
                wrong.append(
                    f"key {key}: message {after['id']} (attempt {after['attempt']}) started "
                    f"while {before['id']} (attempt {before['attempt']}) was in its handler"
                )
    assert not wrong, f"{len(wrong)} FIFO violations, the first ones:\n" + "\n".join(wrong[:20])


# ---------------------------------------------------------------- dedupe_key under contention

DEDUPE_SHAPES = [
    Shape(
        "lease",
        attempt=True,
        retry_after=True,
        processed_at=True,
        dead_letter="table",
        max_attempts=2,
        dedupe_key=True,
    ),
    Shape(
        "row_lock",
        attempt=True,
        retry_after=True,
        processed_at=True,
        group=True,
        dead_letter="group",
        max_attempts=2,
        dedupe_key=True,
    ),
    Shape("advisory", attempt=True, retry_after=True, dedupe_key=True),
]
KEYS = [f"k{i}" for i in range(6)]


@pytest.mark.parametrize("shape", DEDUPE_SHAPES, ids=[s.form for s in DEDUPE_SHAPES])
@pytest.mark.parametrize("engine_name", ENGINES)
def test_enqueuers_and_consumers_never_leave_two_pending_rows_of_one_key(
    engine_name: str, shape: Shape, tmp_path: Path
) -> None:
    """Four enqueuers repeat six keys while two Consumers ack, retry and dead-letter them: a
    watcher never finds two pending rows of one key, every id an enqueue returned is a row of
    its key, and each key has exactly as many rows as enqueues that were not duplicates."""
    engine = engine_for(engine_name, tmp_path)
    run(_dedupe_scenario(engine, shape, int(os.environ.get("QGEN_MODEL_SEED", 5))))


async def _dedupe_scenario(engine: Engine, shape: Shape, seed: int) -> None:
    table, dead_table = unique_table("mk"), unique_table("mkd")
    queue = render_queue(shape, engine.dialect_name, table, dead_table)
    q = queue.dialect.quote_ident
    col = {role: q(name) for role, name in queue.columns.items()}
    pending = [f"{col['processed_at']} IS NULL"] if shape.processed_at else []
    if shape.dead_letter == "group":
        pending.append(f"{col['group']} <> '{DEAD_GROUP}'")
    where = f" WHERE {' AND '.join(pending)}" if pending else ""
    doubles = (
        f"SELECT {col['dedupe_key']} AS k, COUNT(*) AS n FROM {q(table)}{where} "
        f"GROUP BY {col['dedupe_key']} HAVING COUNT(*) > 1"
    )
    db = await runtime.connect(engine.url)
    returned: list[tuple[str, runtime.Enqueued]] = []
    seen_doubles: list[dict[str, Any]] = []
    done = asyncio.Event()

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        await asyncio.sleep(0)
        roll = random.Random(f"{seed}:{message.id}:{ctx.attempt}").random()
        return runtime.ack() if roll < 0.6 else runtime.retry()

    async def enqueuer(i: int) -> None:
        rng = random.Random(f"{seed}:enqueuer:{i}")
        async with await runtime.connect(engine.url) as conn:
            for n in range(60):
                key = rng.choice(KEYS)
                returned.append((key, await queue.enqueue(conn, {"n": n, "i": i}, dedupe_key=key)))
                await asyncio.sleep(0)

    async def watcher() -> None:
        async with await runtime.connect(engine.url) as conn:
            while not done.is_set():
                seen_doubles.extend(await conn.fetchall(doubles))
                await asyncio.sleep(0.005)

    async def consume(c: runtime.Consumer) -> None:
        while not done.is_set():
            await c.drain()
            await asyncio.sleep(0.01)
        await c.drain()

    try:
        for sql in queue.rendered.require("schema"):
            await db.execute(sql)
        consumers = [
            runtime.Consumer(
                engine.url, queue, handle, concurrency=3, retry_policy=runtime.Immediate()
            )
            for _ in range(2)
        ]
        quiet = _Expected()
        logging.getLogger("runtime").addFilter(quiet)
        try:
            tasks = [asyncio.create_task(consume(c)) for c in consumers]
            tasks.append(asyncio.create_task(watcher()))
            await asyncio.gather(*(enqueuer(i) for i in range(4)))
            done.set()
            await asyncio.gather(*tasks)
        finally:
            logging.getLogger("runtime").removeFilter(quiet)
        assert not seen_doubles, f"two pending rows of one key: {seen_doubles[:5]}"
        tables = [table] + ([dead_table] if shape.dead_letter == "table" else [])
        rows = []
        for t in tables:
            rows += await db.fetchall(
                f"SELECT {col['id']} AS id, {col['dedupe_key']} AS k FROM {q(t)}"
            )
        key_of = {int(r["id"]): r["k"] for r in rows}
        wrong = [(k, int(i)) for k, i in returned if key_of.get(int(i), k) != k]
        assert not wrong, f"ids returned for another key's row: {wrong[:5]}"
        if shape.processed_at or shape.dead_letter:
            new = Counter(k for k, i in returned if not i.duplicate)
            assert Counter(key_of.values()) == new, (Counter(key_of.values()), new)
            assert all(int(i) in key_of for _, i in returned), "a returned id has no row"
        assert sum(1 for _, i in returned if i.duplicate) > 0, "no enqueue met a pending key"
        assert not (await db.fetchall(doubles))
    finally:
        for name in (table, dead_table):
            await db.execute(f"DROP TABLE IF EXISTS {q(name)}")
        await db.close()
