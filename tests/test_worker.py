"""`qgen worker`: a queue's consumer as a process, stopped gracefully by SIGTERM mid-drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from engines import Engine, engine_params, run
from queues import make_queue

HANDLER = """\
import asyncio, runtime

async def handle(message, ctx):
    await asyncio.sleep(0.05)
    print(f"handled {message.id}", flush=True)
    return runtime.ack()
"""


def worker(cwd: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "qgen.cli", "worker", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres", "mariadb"), indirect=True)
def test_sigterm_mid_drain_settles_in_flight_and_returns_the_rest(
    engine: Engine, tmp_path: Path
) -> None:
    qt = run(make_queue(engine, "lease", columns=("attempt", "processed_at"), lease_s=60))
    try:
        (tmp_path / "svc_jobs.py").write_text(HANDLER)
        file = tmp_path / "q.sql"
        file.write_text(qt.text, encoding="utf-8")

        async def fill() -> None:
            import runtime

            async with await runtime.connect(qt.url) as db:
                await qt.queue.enqueue_many(db, [{"n": n} for n in range(200)])

        run(fill())
        proc = worker(
            tmp_path,
            "--file",
            str(file),
            "--handler",
            "svc_jobs:handle",
            "--concurrency",
            "2",
            "--batch",
            "10",
            "--drain",
            env={"QGEN_DATABASE_URL": qt.url},
        )
        assert proc.stdout is not None
        handled = 0
        deadline = time.monotonic() + 60
        while handled < 20 and time.monotonic() < deadline:
            if proc.stdout.readline().startswith("handled"):
                handled += 1
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        acked = handled + out.count("handled")
        assert f"ack={acked}" in out.splitlines()[-1], out
        assert "SIGTERM: stopping" in err
        rows = run(
            qt.sql(
                f"SELECT {qt.col('processed_at')} AS done, {qt.col('locked_until')} AS lease "
                f"FROM {qt.q(qt.table)}"
            )
        )
        assert len(rows) == 200
        assert sum(r["done"] is not None for r in rows) == acked < 200
        # nothing is left leased: every unfinished row is claimable at once
        assert all(r["lease"] is None for r in rows if r["done"] is None)
    finally:
        run(qt.drop())


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--file", "missing.sql", "--handler", "svc:handle"], ["missing.sql", "qgen render"]),
        (
            ["--file", "q.sql", "--handler", "nocolon", "--db", "sqlite:///w.db"],
            ["is not module:function"],
        ),
        (
            ["--file", "q.sql", "--handler", "nosuchmodule:handle", "--db", "sqlite:///w.db"],
            ["cannot import"],
        ),
        (
            ["--file", "q.sql", "--handler", "svc_jobs:nope", "--db", "sqlite:///w.db"],
            ["has no 'nope'"],
        ),
        (
            ["--file", "q.sql", "--handler", "svc_jobs:handle", "--db", "nosuch://x"],
            ["unknown scheme"],
        ),
        (["--file", "q.sql", "--handler", "svc_jobs:handle"], ["QGEN_DATABASE_URL"]),
    ],
)
def test_a_bad_handler_file_or_url_is_one_line_and_exit_2(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    (tmp_path / "svc_jobs.py").write_text(HANDLER)
    from qgen.build import build_unit
    from qgen.declaration import parse_declaration

    decl = parse_declaration(
        {"dialects": ["sqlite"], "queues": {"q": {"table": "q", "form": "lease"}}}
    )
    (tmp_path / "q.sql").write_text(build_unit(decl.queues["q"], "sqlite"), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k != "QGEN_DATABASE_URL"}
    proc = subprocess.run(
        [sys.executable, "-m", "qgen.cli", "worker", *args],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qgen worker: "), proc.stderr
    for w in words:
        assert w in lines[0], lines[0]
