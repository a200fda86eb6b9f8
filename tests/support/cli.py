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


@pytest.fixture(name="space")
def space_fixture(engine: Engine) -> Iterator[str]:
    """A URL into a namespace of the test's own, dropped afterwards with all it holds; a
    SQLite one asks for its file to be created, as the qgen commands want it said."""
    name, url = run(create_namespace(engine))
    try:
        if engine.name == "sqlite":
            url += ("&" if "?" in url else "?") + "mode=rwc"
        yield url
    finally:
        run(drop_namespace(engine, name))


def open_project(
    engine: Engine, tmp_path: Path, decl: str
) -> Iterator[tuple[Path, str, runtime.Queue]]:
    """A project of the test's own for the declaration ``decl`` (``{dialect}`` is filled in,
    one queue named jobs): rendered, its tables in a namespace of its own; yields the config
    file, the namespace's URL and the queue, and drops the namespace after."""
    name, url = run(create_namespace(engine))
    try:
        cfg = tmp_path / "qgen.toml"
        cfg.write_text(decl.format(dialect=engine.dialect_name), encoding="utf-8")
        assert main(["render", "--config", str(cfg)]) == 0
        queue = runtime.load(tmp_path / "sql" / engine.dialect_name / "jobs.sql")

        async def schema() -> None:
            async with await runtime.connect(url) as conn:
                for s in queue.rendered.require("schema"):
                    await conn.execute(s, {})

        run(schema())
        yield cfg, url, queue
    finally:
        run(drop_namespace(engine, name))


@pytest.fixture(name="project")
def project_fixture(engine: Engine, tmp_path: Path) -> Iterator[tuple[Path, str, runtime.Queue]]:
    """DECL's project (``open_project``)."""
    yield from open_project(engine, tmp_path, DECL)


def qgen(*argv: str) -> tuple[int, str, str]:
    """Run the qgen command in-process: its exit code, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()
