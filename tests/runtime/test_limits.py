"""Limits the claim enforces, on every engine and form where they apply: concurrency_limit
per concurrency_key, max_in_flight and rate_limit (qgen.toml), and the declarations render
refuses."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, run
from support.ordering import hold, serial, settle
from support.queues import QueueUnderTest, make_queue

import runtime
from runtime.forms import form_for

FORMS = ["row_lock", "lease", "advisory"]
BASE = ("attempt", "retry_after", "processed_at")


async def claim_rated(qt: QueueUnderTest, db: Any, limit: int) -> list[Any]:
    """Claim as the consumer does (held to the rate limit) and keep the deliveries open."""
    return list(await form_for(qt.queue, keyspace=qt.url).claim_within_rate(db, limit, None))


@pytest.mark.parametrize("form", FORMS)
def test_concurrency_limit_keeps_at_most_n_of_a_key_in_flight(engine: Engine, form: str) -> None:
    async def go() -> None:
        qt = await make_queue(
            engine,
            form,
            columns=(*BASE, "concurrency_key"),
            extra={"concurrency_limit": 2},
        )
        try:
            a = [i for n in range(4) for i in await qt.enqueue({"n": n}, concurrency_key="A")]
            b = [i for n in range(3) for i in await qt.enqueue({"n": n}, concurrency_key="B")]
            free = await qt.enqueue({"n": 9})  # no key: not limited
            async with await runtime.connect(qt.url) as one:
                first = await hold(qt, one)
                # a key's two oldest, however large the batch
                assert sorted(d.message.id for d in first) == sorted([*a[:2], *b[:2], *free])
                if not serial(engine, form):
                    async with await runtime.connect(qt.url) as two:
                        assert await hold(qt, two) == []  # both keys are at their limit
                # A's first finishes: A's third is claimable; B's two return unfinished
                await settle(
                    qt,
                    one,
                    [
                        (d, runtime.ack() if d.message.id == a[0] else runtime.retry())
                        for d in first
                    ],
                )
            async with await runtime.connect(qt.url) as three:
                again = await hold(qt, three)
                assert sorted(d.message.id for d in again) == sorted([*a[1:3], *b[:2], *free])
                await settle(qt, three, [(d, runtime.retry()) for d in again])
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", ["row_lock", "lease"])
def test_max_in_flight_keeps_at_most_m_in_flight_across_claims(engine: Engine, form: str) -> None:
    async def go() -> None:
        qt = await make_queue(engine, form, extra={"max_in_flight": 3})
        try:
            await qt.enqueue(*({"n": n} for n in range(10)))
            async with await runtime.connect(qt.url) as one:
                first = await claim_rated(qt, one, 2 if not serial(engine, form) else 10)
                if serial(engine, form):  # the database is held: the batch is all in flight
                    assert len(first) == 3
                else:
                    assert len(first) == 2
                    async with await runtime.connect(qt.url) as two:
                        second = await claim_rated(qt, two, 10)
                        assert len(second) == 1  # 3 less the 2 the first claim holds
                        async with await runtime.connect(qt.url) as three:
                            assert await claim_rated(qt, three, 10) == []
                        await settle(qt, two, [(d, runtime.ack()) for d in second])
                await settle(qt, one, [(d, runtime.ack()) for d in first])
            async with await runtime.connect(qt.url) as four:
                nxt = await claim_rated(qt, four, 10)
                assert len(nxt) == 3  # the settled ones left room again
                await settle(qt, four, [(d, runtime.ack()) for d in nxt])
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("form", FORMS)
def test_rate_limit_grants_at_most_the_bucket_and_refills_by_the_clock(
    engine: Engine, form: str
) -> None:
    async def go() -> None:
        qt = await make_queue(engine, form, extra={"rate_limit": {"per_s": 4, "burst": 3}})
        try:
            await qt.enqueue(*({"n": n} for n in range(10)))
            async with await runtime.connect(qt.url) as db:
                first = await claim_rated(qt, db, 10)
                assert len(first) == 3  # the full bucket
                await settle(qt, db, [(d, runtime.ack()) for d in first])
                before_empty = time.monotonic()
                assert await claim_rated(qt, db, 10) == []  # empty: nothing granted
                after_empty = time.monotonic()
                await asyncio.sleep(0.6)  # 4 a second: two tokens back, more if the wait ran long
                before_second = time.monotonic()
                second = await claim_rated(qt, db, 10)
                waited_least = before_second - after_empty
                waited_most = time.monotonic() - before_empty
                fewest = min(3, math.floor(4 * waited_least))
                most = min(3, math.ceil(4 * waited_most))  # never past the burst
                assert fewest <= len(second) <= most, (len(second), waited_least, waited_most)
                await settle(qt, db, [(d, runtime.ack()) for d in second])
        finally:
            await qt.drop()

    run(go())


def test_rate_limit_returns_the_tokens_a_claim_did_not_use(engine: Engine) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease", extra={"rate_limit": {"per_s": 0.01, "burst": 5}})
        try:
            await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as db:
                assert len(await claim_rated(qt, db, 10)) == 1  # granted 5, used 1
                await qt.enqueue(*({"n": n} for n in range(10)))
                assert len(await claim_rated(qt, db, 10)) == 4  # the 4 it returned
        finally:
            await qt.drop()

    run(go())


BAD = [
    ("concurrency_limit = 2\n", "concurrency_limit needs a concurrency_key column"),
    (
        'concurrency_limit = 0\n[queues.q.columns]\nid = "id"\npayload = "p"\nconcurrency_key = "k"\n',
        "is not a whole number from 1",
    ),
    (
        '[queues.q.columns]\nid = "id"\npayload = "p"\nconcurrency_key = "k"\n',
        "a concurrency_key without concurrency_limit",
    ),
    ('form = "advisory"\nmax_in_flight = 3\n', "the advisory form cannot enforce max_in_flight"),
    ("max_in_flight = -1\n", "is not a whole number from 1"),
    ("rate_limit = { per_s = 0 }\n", "rate_limit.per_s"),
    ("rate_limit = { burst = 3 }\n", "rate_limit.per_s"),
    ("rate_limit = { per_s = 5, every = 3 }\n", "unknown key"),
    (
        'max_in_flight = 3\nmax_attempts = 5\ndead_letter = { table = "q_dead" }\n',
        "row lock cannot enforce max_in_flight together with max_attempts",
    ),
]


@pytest.mark.parametrize(("decl", "says"), BAD)
def test_render_refuses_a_bad_limit_in_one_line_exit_2(
    tmp_path: Path, decl: str, says: str
) -> None:
    form = "" if "form =" in decl else 'form = "row_lock"\n'
    (tmp_path / "qgen.toml").write_text(f'[queues.q]\ntable = "q"\n{form}{decl}')
    done = subprocess.run(
        [sys.executable, "-m", "qgen.cli", "render"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr
    assert "Traceback" not in done.stderr
