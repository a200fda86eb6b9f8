"""Claim latency against queue depth, and the claim's plan on each engine.

Four tables per engine, filled with set-based SQL (generate_series on PostgreSQL, the
SEQUENCE engine on MariaDB, a recursive CTE on SQLite):

* ``small``: 10k pending rows; ``big``: 1M pending rows (100k with --quick);
* ``kept``: 10k pending rows in a processed_at table (finished rows are marked, not
  deleted); ``history``: the same table shape with 1M processed rows kept before 10k pending;
* ``ranked_small``: 10k pending rows in a table with a priority column, ten priorities
  mixed through the ids; ``ranked``: the same with 1M rows (the claim reads the highest
  priority first through its (priority DESC, id) index).

``big`` is compared with ``small``, ``history`` with ``kept``, ``ranked`` with
``ranked_small``: same schema, only the depth differs. After the fill the tables are analysed (PostgreSQL: VACUUM ANALYZE, as autovacuum
would) and the engine is let settle (a checkpoint). Each form then claims one batch through
the runtime's own step runner, timed from BEGIN to the rows in hand, and rolls back, so the
depth never changes (the advisory claim's keys are unlocked after it; on PostgreSQL the
tables are vacuumed after each form, so the lease claims' rolled-back updates do not slow the
next form's reads). The cases
are claimed round-robin, one claim each per round, so background noise falls on all of
them alike; a form whose claims are slow stops after a time budget (three rounds at least).
Tables are dropped at the end.
"""

from __future__ import annotations

import contextlib
import json
import re
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.queues import PAYLOAD, Engine, create_table, drop_table, quoted, render_queue
from runtime.drivers.base import Connection
from runtime.queue import Queue
from runtime.steps import run_step

WARMUP_ROUNDS = 2
MIN_ROUNDS = 3


@dataclass
class Case:
    name: str
    pending: int
    processed: int
    #: a processed_at table (finished rows are marked and kept)
    kept: bool = False
    #: a priority column, ten priorities mixed through the ids
    priority: bool = False

    @property
    def label(self) -> str:
        def short(n: int) -> str:
            if n >= 1_000_000 and n % 1_000_000 == 0:
                return f"{n // 1_000_000}M"
            return f"{n // 1000}k" if n % 1000 == 0 else str(n)

        if self.processed:
            return f"{short(self.processed)} processed + {short(self.pending)} pending"
        if self.kept:
            return f"{short(self.pending)} pending, processed_at table"
        if self.priority:
            return f"{short(self.pending)} pending, 10 priorities"
        return f"{short(self.pending)} pending"


@dataclass
class ClaimTiming:
    engine: str
    form: str
    case: Case
    seconds: list[float] = field(default_factory=list)
    plan: list[str] = field(default_factory=list)
    access: str = ""

    @property
    def median_ms(self) -> float:
        return statistics.median(self.seconds) * 1000


def cases(small: int, big: int) -> list[Case]:
    return [
        Case("small", small, 0),
        Case("big", big, 0),
        Case("kept", small, 0, kept=True),
        Case("history", small, big, kept=True),
        Case("ranked_small", small, 0, priority=True),
        Case("ranked", big, 0, priority=True),
    ]


#: which case each case is compared with
BASE = {"big": "small", "history": "kept", "ranked": "ranked_small"}


async def fill(db: Connection, engine: str, table: str, case: Case) -> None:
    """Processed rows first (they are the oldest, lowest ids), then the pending ones."""
    t = quoted(engine, table)
    payload = json.dumps(PAYLOAD, separators=(",", ":"))
    for n, processed in ((case.processed, True), (case.pending, False)):
        if not n:
            continue
        # a priority table: the row's number modulo 10, so every priority spans the ids
        ranked = ", priority" if case.priority else ""
        if engine == "postgres":
            cols = "payload, processed_at" if processed else "payload"
            vals = (
                "CAST(%(p)s AS JSONB), clock_timestamp()" if processed else "CAST(%(p)s AS JSONB)"
            )
            vals += ", mod(g, 10)" if case.priority else ""
            await db.execute(
                f"INSERT INTO {t} ({cols}{ranked}) SELECT {vals} FROM generate_series(1, {n}) AS g",
                {"p": payload},
            )
        elif engine == "mariadb":
            await _fill_mariadb(db, t, n, processed, payload, case.priority)
        else:
            cols = "payload, processed_at" if processed else "payload"
            vals = ":p, strftime('%Y-%m-%d %H:%M:%f', 'now')" if processed else ":p"
            vals += ", x % 10" if case.priority else ""
            await db.execute(
                f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {n}) "
                f"INSERT INTO {t} ({cols}{ranked}) SELECT {vals} FROM c",
                {"p": payload},
            )
    if engine == "postgres":
        await db.execute(f"VACUUM ANALYZE {t}")
    elif engine == "mariadb":
        await db.fetchall(f"ANALYZE TABLE {t}")
    else:
        await db.execute(f"ANALYZE {t}")


async def _fill_mariadb(
    db: Connection, t: str, n: int, processed: bool, payload: str, priority: bool = False
) -> None:
    cols = "payload, processed_at" if processed else "payload"
    vals = "%(p)s, UTC_TIMESTAMP(6)" if processed else "%(p)s"
    try:  # MariaDB's SEQUENCE engine: one set-based INSERT … SELECT
        await db.execute(
            f"INSERT INTO {t} ({cols}{', priority' if priority else ''}) "
            f"SELECT {vals}{', MOD(seq, 10)' if priority else ''} FROM seq_1_to_{n}",
            {"p": payload},
        )
        return
    except Exception:  # the sequence plugin is off: double a seed row instead
        pass
    if priority:  # mixed priorities by the row's place: FLOOR(RAND() * 10) per row
        cols += ", priority"
        vals += ", FLOOR(RAND() * 10)"
    await db.execute(f"INSERT INTO {t} ({cols}) VALUES ({vals})", {"p": payload})
    have = 1
    while have < n:  # the values are constants: any `take` rows of the table will do
        take = min(have, n - have)
        await db.execute(
            f"INSERT INTO {t} ({cols}) SELECT {vals} FROM {t} LIMIT {take}", {"p": payload}
        )
        have += take


async def claim_once(db: Connection, queue: Queue, form: str, batch: int) -> float:
    """One claim of ``batch`` rows, timed, then rolled back (advisory: its keys unlocked)."""
    claim = queue.rendered.require("claim")
    params = claim_params(queue, batch)
    t0 = time.perf_counter()
    if form != "advisory":
        await db.begin(immediate=True)
    result = await run_step(db, claim, params)
    dt = time.perf_counter() - t0
    rows = result.rows
    if form != "advisory":
        await db.rollback()
    elif rows and "held" in rows[0]:  # the server took the keys of the rows it kept
        rows = [r for r in rows if r["held"]]
        await run_step(db, queue.rendered.require("unlock"), {"ids": _ids(rows)})
    else:  # SQLite lists candidates; the keys live in the consumer's process
        rows = rows[:batch]
    if len(rows) != batch:
        raise RuntimeError(f"the claim returned {len(rows)} rows, not {batch}")
    return dt


def claim_params(queue: Queue, batch: int) -> dict[str, Any]:
    """What the Consumer binds to a claim (scan: as far as four workers' batches)."""
    return {"limit": batch, "scan": batch * 4, "group": None, "lease_s": queue.lease_s}


def _ids(rows: list[dict[str, Any]]) -> str:
    return json.dumps([r["id"] for r in rows])


async def explain(db: Connection, engine: str, queue: Queue, batch: int) -> tuple[list[str], str]:
    """Every statement of the claim explained, as lines; and how it reaches the rows."""
    params = claim_params(queue, batch)
    # MariaDB's claims bind an earlier statement's ids (and the lease's token) into the next
    params |= {"token": "2030-01-01 00:00:00", "ids": json.dumps(list(range(1, batch + 1)))}
    lines: list[str] = []
    access: list[str] = []
    stmts = queue.rendered.require("claim")
    for n, sql in enumerate(stmts, 1):
        if len(stmts) > 1:
            lines.append(f"statement {n}: {sql.split(chr(10))[0][:60]} …")
        if engine == "postgres":
            plan = [r["QUERY PLAN"] for r in await db.fetchall(f"EXPLAIN {sql}", params)]
            access.append(_pg_access(plan, queue.table))
        elif engine == "mariadb":
            rows = await db.fetchall(f"EXPLAIN {sql}", params)
            keys = ("select_type", "table", "type", "key", "rows", "Extra")
            plan = [" ".join(f"{k}={r[k]}" for k in keys if k in r) for r in rows]
            access.append(_mariadb_access(rows, queue.table))
        else:
            rows = await db.fetchall(f"EXPLAIN QUERY PLAN {sql}", params)
            depth_of: dict[int, int] = {}
            plan = []
            for r in rows:
                d = depth_of.get(r["parent"], -1) + 1
                depth_of[r["id"]] = d
                plan.append("  " * d + r["detail"])
            access.append(_sqlite_access(plan, queue.table))
        lines += plan
    return lines, " → ".join(a for a in access if a)


def _short(name: str, table: str) -> str:
    return name.replace(f"{table}_", "")


def _pg_access(lines: list[str], table: str) -> str:
    """The scans that read the queue table: ``index claim``, ``index pkey``, ``seq scan``."""
    found = []
    for ln in lines:
        m = re.search(r"(Index Only Scan|Index Scan|Bitmap Index Scan) using (\S+)", ln)
        if m:
            found.append(f"index {_short(m.group(2), table)}")
        elif re.search(rf"Seq Scan on {re.escape(table)}\b", ln):
            found.append("seq scan")
    return ", ".join(found)


def _mariadb_access(rows: list[dict[str, Any]], table: str) -> str:
    """``type`` (index = the whole index in order, ref/range/eq_ref = a lookup) and key."""
    return ", ".join(
        f"{r.get('type')} {_short(str(r.get('key') or 'no key'), table)} ~{r.get('rows')} rows"
        for r in rows
        if r.get("table") == table
    )


def _sqlite_access(lines: list[str], table: str) -> str:
    out = []
    for ln in lines:
        s = ln.strip()
        if s == f"SCAN {table}":
            out.append("rowid scan (the primary key)")
        elif m := re.match(rf"(SCAN|SEARCH) {re.escape(table)} USING (?:COVERING )?INDEX (\S+)", s):
            out.append(f"{m.group(1).lower()} index {_short(m.group(2), table)}")
        elif s.startswith(f"SEARCH {table} USING INTEGER PRIMARY KEY"):
            out.append("rowid lookup")
        elif s.startswith(("SCAN", "SEARCH")):
            out.append(s.lower())
    return ", ".join(out)


async def settle(db: Connection, engine: str) -> None:
    """Let the engine write out the fill before timing (a fill's checkpoint is not the claim's)."""
    if engine == "postgres":
        await db.execute("CHECKPOINT")
    elif engine == "sqlite":
        await db.fetchall("PRAGMA wal_checkpoint(TRUNCATE)")


async def run_depth(
    engine: Engine,
    connect: Callable[[], Any],
    forms: tuple[str, ...],
    small: int,
    big: int,
    batch: int,
    repeats: int,
    budget_s: float,
    out_dir: Path,
    prefix: str,
    progress: Callable[[str], None],
) -> list[ClaimTiming]:
    """Fill the four tables on one engine, time every form's claim on each, explain it."""
    results: list[ClaimTiming] = []
    db: Connection = await connect()
    tables: dict[str, str] = {}
    try:
        all_cases = cases(small, big)
        for case in all_cases:
            table = f"{prefix}_depth_{case.name}"
            # the lease declaration's schema has every column any form reads
            schema = render_queue(
                engine.name,
                "lease",
                table,
                out_dir,
                processed_at=case.kept,
                priority=case.priority,
            )
            tables[case.name] = table
            await create_table(db, schema)
            progress(f"{engine.name} depth: filling {case.label}")
            await fill(db, engine.name, table, case)
        await settle(db, engine.name)
        for form in forms:
            progress(f"{engine.name} depth: {form} claims")
            queues = {
                c.name: render_queue(
                    engine.name,
                    form,
                    tables[c.name],
                    out_dir,
                    processed_at=c.kept,
                    priority=c.priority,
                )
                for c in all_cases
            }
            timings = {c.name: ClaimTiming(engine.name, form, c) for c in all_cases}
            t0 = time.perf_counter()
            rounds = 0
            while rounds < WARMUP_ROUNDS + repeats:
                spent = time.perf_counter() - t0
                if rounds >= WARMUP_ROUNDS + MIN_ROUNDS and spent > budget_s:
                    break
                for c in all_cases:
                    dt = await claim_once(db, queues[c.name], form, batch)
                    if rounds >= WARMUP_ROUNDS:
                        timings[c.name].seconds.append(dt)
                rounds += 1
            for c in all_cases:
                t = timings[c.name]
                t.plan, t.access = await explain(db, engine.name, queues[c.name], batch)
                results.append(t)
            if engine.name == "postgres":
                # the lease claims' rolled-back updates leave dead row versions at the head of
                # each table; vacuum them, as autovacuum would, before the next form claims
                for table in tables.values():
                    await db.execute(f"VACUUM {quoted(engine.name, table)}")
    finally:
        for table in tables.values():
            with contextlib.suppress(Exception):  # report the numbers even if a drop fails
                await drop_table(db, engine.name, table)
        await db.close()
    return results
