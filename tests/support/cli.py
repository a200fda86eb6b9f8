"""The qgen command in-process over a project of the test's own."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

import runtime
from qgen.cli import main
from support.engines import Engine, run
from support.statements import create_namespace, drop_namespace

DECL = """\
dialects = ["{dialect}"]
[queues.jobs]
table = "jobs"
form = "lease"
max_attempts = 1
dead_letter = {{ table = "jobs_dead" }}
[queues.jobs.columns]
id = "id"
payload = "payload"
attempt = "attempt"
locked_until = "locked_until"
processed_at = "processed_at"
enqueued_at = "enqueued_at"
"""


@pytest.fixture(name="project")
def project_fixture(engine: Engine, tmp_path: Path) -> Iterator[tuple[Path, str, runtime.Queue]]:
    """A rendered declaration, its tables in a namespace of the test's own, and its queue."""
    name, url = run(create_namespace(engine))
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(DECL.format(dialect=engine.dialect_name), encoding="utf-8")
    assert main(["render", "--config", str(cfg)]) == 0
    queue = runtime.load(tmp_path / "sql" / engine.dialect_name / "jobs.sql")

    async def schema() -> None:
        async with await runtime.connect(url) as conn:
            for s in queue.rendered.require("schema"):
                await conn.execute(s, {})

    run(schema())
    yield cfg, url, queue
    run(drop_namespace(engine, name))


def qgen(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()
