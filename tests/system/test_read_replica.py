"""Reads on a replica: stats and the dead-letter listing on a streaming standby, writes on the
primary. A standby refuses every write (SQLSTATE 25006), so reads that work there while
redrive, which writes, works too proves each went where it belongs.

The test starts its own primary and standby (tests/support/pg_cluster.py); the shared server is
never touched."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from support.cli import DECL, qgen
from support.engines import run
from support.pg_cluster import PrivatePostgres

import runtime

pytestmark = pytest.mark.slow


async def _replayed(standby: PrivatePostgres, sql: str, want: int) -> None:
    deadline = time.monotonic() + 30
    async with await runtime.connect(standby.url, read_only=True) as conn:
        while True:
            try:
                row = await conn.fetchone(sql)
            except runtime.DatabaseError as exc:  # the CREATE TABLE is not replayed yet
                row = {"n": None, "error": str(exc)}
            if row is not None and row["n"] == want:
                return
            assert time.monotonic() < deadline, f"the standby did not replay: {row}"
            await asyncio.sleep(0.1)


def test_stats_and_dead_letter_read_on_the_standby_writes_on_the_primary(tmp_path: Path) -> None:
    primary = PrivatePostgres()
    try:
        standby = PrivatePostgres(standby_of=primary, name="replica")
        try:
            _scenario(primary, standby, tmp_path)
        finally:
            standby.close()
    finally:
        primary.close()


def _scenario(primary: PrivatePostgres, standby: PrivatePostgres, tmp_path: Path) -> None:
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(DECL.format(dialect="postgres"), encoding="utf-8")
    assert qgen("render", "--config", str(cfg))[0] == 0
    queue = runtime.load(tmp_path / "sql" / "postgres" / "jobs.sql")

    async def setup() -> None:
        async with await runtime.connect(primary.url) as conn:
            for s in queue.rendered.require("schema"):
                await conn.execute(s, {})
            await queue.enqueue(conn, {"n": 1})
            await queue.enqueue(conn, {"n": 2})
            await conn.execute(
                "INSERT INTO jobs_dead (id, payload, attempt) VALUES (99, '{\"n\": 99}', 2)"
            )
        await _replayed(standby, "SELECT COUNT(*) AS n FROM jobs_dead", 1)

    run(setup())

    async def reads_on_the_standby() -> None:
        async with await runtime.connect(standby.url, read_only=True) as conn:
            stats = await queue.stats(conn)
            assert stats["ready"] == 2 and stats["dead"] == 1
            assert [r["id"] for r in await queue.dead_list(conn)] == [99]
            assert (await queue.dead_show(conn, 99) or {})["id"] == 99
            with pytest.raises(runtime.BrokerError):  # nothing writes there
                await queue.enqueue(conn, {"n": 3})
        # a read-only connection to the primary cannot write either
        async with await runtime.connect(primary.url, read_only=True) as conn:
            with pytest.raises(runtime.BrokerError):
                await queue.enqueue(conn, {"n": 3})

    run(reads_on_the_standby())

    code, out, err = qgen(
        "stats", "--config", str(cfg), "--db", primary.url, "--read-db", standby.url, "--json"
    )
    assert code == 0, err
    assert json.loads(out)["jobs"]["ready"] == 2
    # --read-db alone: the replica's URL says the dialect
    code, out, err = qgen("dead", "list", "jobs", "--config", str(cfg), "--read-db", standby.url)
    assert code == 0, err
    assert out.startswith("99 ")
    code, out, err = qgen(
        "dead", "show", "jobs", "99", "--config", str(cfg), "--db", primary.url,
        "--read-db", standby.url, "--json",
    )  # fmt: skip
    assert code == 0 and json.loads(out)["id"] == 99, err
    # redrive writes: it goes to --db (the primary), never to --read-db (the standby)
    code, out, err = qgen(
        "dead", "redrive", "jobs", "--all", "--config", str(cfg), "--db", primary.url,
        "--read-db", standby.url,
    )  # fmt: skip
    assert code == 0, err
    assert "1 dead message(s) sent back" in out
    run(_replayed(standby, "SELECT COUNT(*) AS n FROM jobs_dead", 0))
