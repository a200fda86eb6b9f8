"""The bench runs to its report: a tiny SQLite run of ``bench/run.py`` and of
``bench/profile_drain.py`` (runtime and raw twin) ends with every table and the targets
printed, and ``bench/thread_trip.py`` prints its three sides, so a change to the runtime,
the raw twin or the report cannot leave the bench broken until someone next measures with
it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support.engines import Engine, engine_params

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def test_a_small_sqlite_bench_prints_its_tables_and_its_targets() -> None:
    out = _bench(
        "bench/run.py",
        "--engines",
        "sqlite",
        "--no-depth",
        "--no-pgqueuer",
        "-n",
        "50",
        "--repeats",
        "1",
        "--batch",
        "10",
    )
    for form in ("row_lock", "lease", "advisory"):
        assert f"sqlite  {form}" in out, out
    assert "Targets:" in out
    # the machine's speed before and after the run, to compare runs by
    assert re.search(
        r"^speed: a Python loop of 5M additions took \d+\.\d\d s before the run "
        r"and \d+\.\d\d s after it",
        out,
        re.M,
    ), out
    assert "runtime/raw ≥ 0.9 (postgres), 0.9 (mariadb), 0.8 (sqlite)" in out
    assert "overall: runtime/raw drain ratio" in out
    assert "failed:" not in out, out


def _profile(engine: Engine, *extra: str) -> str:
    """``bench/profile_drain.py`` on the engine's server: lease, batch 10, 200 messages."""
    where = () if engine.name == "sqlite" else ("--url", engine.url)
    return _bench(
        "bench/profile_drain.py",
        *where,
        *("--engine", engine.name, "--form", "lease", "--batch", "10", "-n", "200"),
        *extra,
    )


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres"), indirect=True)
def test_the_profile_runs_for_the_runtime_and_for_its_raw_twin(engine: Engine) -> None:
    for extra in ((), ("--raw",)):
        out = _profile(engine, *extra)
        who = "raw twin" if extra else "runtime"
        assert out.startswith(f"{who}: {engine.name} lease batch 10"), out
        assert "counts {'ack': 200}" in out, out
        assert "function calls" in out
        # the by-area table: the runtime's own code shows only when the runtime drained
        assert "own µs/msg" in out, out
        assert ("\nruntime " in out) != bool(extra), out


@pytest.mark.parametrize("engine", engine_params("sqlite", "mariadb"), indirect=True)
def test_the_profile_script_compares_the_runtime_and_its_raw_twin_in_turns(
    engine: Engine,
) -> None:
    out = _profile(engine, "--retry-once", "--ab", "2")
    assert out.startswith(f"A/B: {engine.name} lease batch 10 concurrency 4 retry-once"), out
    rows = {line.split()[0]: line.split() for line in out.splitlines()[2:4]}
    assert set(rows) == {"runtime", "raw"}, out
    for row in rows.values():  # msg/s, CPU µs/msg, on the loop, then two rounds' rates
        assert float(row[1].replace(",", "")) > 0 and len(row) == 6, out
    assert "runtime/raw " in out.splitlines()[-1], out


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_the_ab_times_each_sides_sqlite_write_transactions(engine: Engine) -> None:
    out = _profile(engine, "--ab", "1", "--holds")
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("one-trip write transactions"))
    rows = {line.split()[0]: line.split()[1:] for line in lines[at + 2 :]}
    assert list(rows) == ["runtime", "raw"], out
    for count, p50, p90, p99, mean, share, inside in rows.values():
        # each side finishes its acked batches by the next claim's transaction: ~20 of them
        assert int(count) >= 10 and 0 < float(p50) <= float(p90) <= float(p99), out
        assert float(mean) > 0 and share.endswith("%") and 0 < float(inside) <= 4, out


@pytest.mark.parametrize("engine", engine_params("mariadb"), indirect=True)
def test_the_thread_trip_script_prices_a_statement_three_ways(engine: Engine) -> None:
    out = _bench("bench/thread_trip.py", "--url", engine.url, "-n", "50", "--rounds", "2")
    lines = out.splitlines()
    assert lines[0] == "MariaDB SELECT 1, 50 trips a side, median of 2 rounds in turns", out
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert list(rows) == ["direct", "executor", "CallThread"], out
    for row in rows.values():  # wall, CPU, then what the thread switch adds to each
        assert len(row) == 4 and float(row[0]) > 0 and float(row[1]) > 0, out
    assert rows["direct"][2:] == ["0.0", "0.0"], out


#: checks of bench/profile_drain.area_of, run in the bench's own interpreter setting
_AREAS_CHECK = """
import asyncio, json, selectors, sys
from pathlib import Path
import psycopg
import bench.profile_drain as p

assert p.area_of(p.__file__) == "bench", p.area_of(p.__file__)
assert p.area_of(str(p.ROOT / "runtime" / "consumer.py")) == "runtime"
for module, area in ((asyncio, "asyncio"), (json, "json"), (psycopg, "psycopg"),
                     (selectors, "selectors")):
    assert p.area_of(module.__file__) == area, (module.__file__, p.area_of(module.__file__))
assert p.area_of("~") == "builtins" and p.area_of("<string>") == "other"
# a checkout under folders named runtime and bench: sorted by where in the checkout
p.ROOT = Path(sys.argv[1]) / "runtime" / "bench" / "checkout"
assert p.area_of(str(p.ROOT / "bench" / "run.py")) == "bench"
assert p.area_of(str(p.ROOT / "runtime" / "loop.py")) == "runtime"
assert p.area_of(str(p.ROOT / "tests" / "test_x.py")) == "other"
assert p.area_of(asyncio.__file__) == "asyncio"
print("areas ok")
"""


def test_the_profile_counts_a_function_by_where_its_file_lies(tmp_path: Path) -> None:
    """The by-area table sorts the runtime's and the bench's code by where it lies in the
    checkout, and a library's by its folder, whatever folders the checkout lies under."""
    assert _bench("-c", _AREAS_CHECK, str(tmp_path)).strip() == "areas ok"


#: drains of 100 and 200 messages by the runtime and by its raw twin, one worker: for each,
#: the statements and commits the bench counted for the second hundred (what a consumer
#: sends when it starts, before its first claim, drops out)
_TALLY_CHECK = """
import asyncio, sys, tempfile
from pathlib import Path
from bench.contenders import FormBench
from bench.counting import Tally
from bench.queues import Engine
from bench.results import Settings

async def main(name, url, form):
    s = Settings(messages=100, repeats=1, concurrency=1, batch=10, depth_small=0,
                 depth_big=0, claim_repeats=0, claim_budget_s=0, quick=True)
    fb = FormBench(Engine(name, url), form, s, Path(tempfile.mkdtemp()), "tally")
    await fb.setup()
    try:
        for kind in ("runtime", "async"):
            tallies = []
            for n in (100, 200):
                await fb._enqueue(kind, n)
                tallies.append(tally := Tally())
                counts = await fb._drain(kind, False, tally)
                assert dict(counts).get("ack") == n, counts
            small, big = tallies
            print(kind, big.statements - small.statements, big.commits - small.commits)
    finally:
        await fb.teardown()

asyncio.run(main(*sys.argv[1:]))
"""


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres", "mariadb"), indirect=True)
@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
def test_the_bench_counts_the_runtimes_statements_as_it_counts_its_raw_twins(
    engine: Engine, form: str
) -> None:
    # one worker, so no claim meets another's rows: a message costs the runtime the
    # statements it costs the raw twin (one sent with another in one trip counts as a
    # statement still), and the bench's statements and commits per message say so
    out = _bench("-c", _TALLY_CHECK, engine.name, engine.url, form).split("\n")
    runtime, raw = (line.split()[1:] for line in out[:2])
    assert runtime == raw, out
