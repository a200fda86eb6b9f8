"""concurrency_limit and max_in_flight hold across consumer PROCESSES: three processes of
four workers each drain one queue while a sampler in the test process reads, from the
database every few milliseconds, how many messages are in flight per key and in total.

What the sampler counts, per form:

* lease: the rows whose lease is in the future (``locked_until`` after the database's
  now, not processed): exactly what the claim's limits count, read from the queue table.
* every form: the handlers running, from a marker table each handler writes on a
  connection of its own (a row inserted and committed when it starts, deleted when it
  ends). A row lock's hold lives in another session's transaction and an advisory key in
  another session's lock table, neither of which a query can count per key; the markers
  count the part of each hold in which the handler runs, which is where two deliveries of
  a key would meet.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, run, unique_table
from support.queues import NOW, make_queue

import runtime

WORKER = Path(__file__).resolve().parents[1] / "support" / "limits_worker.py"
REPO = Path(__file__).resolve().parents[2]
PROCESSES = 3
SECONDS = 3.0
PER_KEY = 2  # concurrency_limit N
IN_FLIGHT = 5  # max_in_flight M
KEYS = [f"k{i}" for i in range(4)]


async def sample(url: str, reads: list[str], until: float) -> list[list[dict[str, Any]]]:
    """Every few milliseconds until ``until``: the rows of each query in ``reads``."""
    seen: list[list[dict[str, Any]]] = []
    async with await runtime.connect(url) as db:
        while time.monotonic() < until:
            for sql in reads:
                seen.append(await db.fetchall(sql))
            await asyncio.sleep(0.003)
    return seen


@pytest.mark.parametrize("form", ["lease", "row_lock", "advisory"])
def test_limits_hold_across_consumer_processes(engine: Engine, form: str) -> None:
    if engine.name == "sqlite" and form != "lease":
        pytest.skip("SQLite: the lease form only (a row-lock batch holds the whole database)")
    extra: dict[str, Any] = {"concurrency_limit": PER_KEY}
    if form != "advisory":  # render refuses max_in_flight on advisory
        extra["max_in_flight"] = IN_FLIGHT

    async def go() -> None:
        qt = await make_queue(
            engine, form, columns=("attempt", "processed_at", "concurrency_key"), extra=extra
        )
        markers = "-" if engine.name == "sqlite" else unique_table("mark")
        ckey = qt.col("concurrency_key")
        reads = []
        if form == "lease":
            reads.append(
                f"SELECT {ckey} AS k, COUNT(*) AS n FROM {qt.q(qt.table)} "
                f"WHERE {qt.col('locked_until')} >= {NOW[engine.dialect_name]} "
                f"AND {qt.col('processed_at')} IS NULL GROUP BY {ckey}"
            )
        if markers != "-":
            await qt.sql(f"CREATE TABLE {qt.q(markers)} (id BIGINT PRIMARY KEY, ckey VARCHAR(20))")
            reads.append(f"SELECT ckey AS k, COUNT(*) AS n FROM {qt.q(markers)} GROUP BY ckey")
        try:
            async with await runtime.connect(qt.url) as db:
                for key in KEYS:
                    await qt.queue.enqueue_many(
                        db, [{"key": key} for _ in range(150)], concurrency_key=key
                    )
            with tempfile.TemporaryDirectory() as tmp:
                rendered = Path(tmp) / "queue.sql"
                rendered.write_text(qt.text, encoding="utf-8")
                procs = [
                    subprocess.Popen(
                        [sys.executable, str(WORKER), qt.url, str(rendered), markers, str(SECONDS)],
                        stdin=subprocess.PIPE,
                        stdout=subprocess.PIPE,
                        text=True,
                        cwd=REPO,
                    )
                    for _ in range(PROCESSES)
                ]
                try:
                    for p in procs:
                        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
                    for p in procs:
                        assert p.stdin is not None
                        p.stdin.write("go\n")
                        p.stdin.flush()
                    seen = await sample(qt.url, reads, time.monotonic() + SECONDS)
                    handled = [int(p.communicate(timeout=60)[0].strip()) for p in procs]
                finally:
                    for p in procs:
                        if p.poll() is None:
                            p.kill()
            assert sum(handled) > 0, f"the processes handled nothing: {handled}"
            per_key = max((int(r["n"]) for rows in seen for r in rows), default=0)
            total = max((sum(int(r["n"]) for r in rows) for rows in seen), default=0)
            assert len(seen) > 50, f"only {len(seen)} samples"
            assert 1 <= per_key <= PER_KEY, f"{per_key} of one key in flight, limit {PER_KEY}"
            limit = IN_FLIGHT if form != "advisory" else PER_KEY * len(KEYS)
            assert total <= limit, f"{total} in flight at once, limit {limit}"
        finally:
            if markers != "-":
                await qt.sql(f"DROP TABLE IF EXISTS {qt.q(markers)}")
            await qt.drop()

    run(go())
