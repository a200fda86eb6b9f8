"""`qgen serve`: the console under uvicorn from a declaration, as an operator starts it; bad
options are one line and exit 2."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.consoles import TOKEN, Project, drop_project, make_project
from support.engines import Engine, engine_params, run

from qgen.cli import main


@pytest.fixture
def project(engine: Engine, tmp_path: Path) -> Iterator[Project]:
    p, namespace = make_project(engine, tmp_path)
    yield p
    drop_project(engine, namespace)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, **kw: object) -> tuple[int, bytes]:
    request = urllib.request.Request(url, **kw)  # type: ignore[arg-type]
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres"), indirect=True)
def test_qgen_serve_answers_with_the_databases_numbers(project, tmp_path):
    port = _free_port()
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n", encoding="utf-8")
    argv = [sys.executable, "-m", "qgen.cli", "serve", "--config", str(project.config)]
    argv += ["--db", project.url, "--port", str(port), "--allow-writes"]
    argv += ["--token-file", str(token_file), "--log-level", "WARNING"]
    env = {k: v for k, v in os.environ.items() if k != "QGEN_CONSOLE_TOKEN"}
    server = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                status, body = _get(base + "/api/queues")
                break
            except OSError:
                if time.monotonic() > deadline or server.poll() is not None:
                    pytest.fail(
                        f"qgen serve did not answer: {server.stderr and server.stderr.read()}"
                    )
                time.sleep(0.2)
        assert status == 200
        lines = {q["name"]: q for q in json.loads(body)["queues"]}
        outbox = lines["outbox"]  # its counts, from its rendered stats statement
        assert outbox["kind"] == "outbox" and outbox["stats"]["ready"] == 2
        jobs = lines["jobs"]
        want = run(project.jobs_counts())
        assert {k: jobs["stats"][k] for k in want} == want
        dead = run(project.dead_ids())
        redrive = f"{base}/api/queues/jobs/dead/{dead[0]}/redrive"
        assert _get(redrive, method="POST")[0] == 401
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert _get(redrive, method="POST", headers=auth) == (200, b'{"redriven":1}')
        assert run(project.dead_ids()) == dead[1:]
        # SIGTERM is the graceful stop: the server shuts down and exits 0, as qgen worker does
        server.terminate()
        assert server.wait(10) == 0
    finally:
        if server.poll() is None:
            server.terminate()
            server.wait(10)


def _qgen(*argv: str) -> tuple[int, str]:
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(list(argv))
    return code, err.getvalue()


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_qgen_serve_refuses_bad_options_in_one_line(project, tmp_path, monkeypatch):
    monkeypatch.delenv("QGEN_CONSOLE_TOKEN", raising=False)
    common = ["serve", "--config", str(project.config), "--db", project.url]
    short = tmp_path / "short"
    short.write_text("abc\n", encoding="utf-8")
    cases = [
        (["--allow-writes"], "writes need an operator token"),
        (["--allow-writes", "--token-file", str(short)], "at least 16"),
        (["--token-file", str(tmp_path / "none")], "cannot read the token file"),
        (
            ["--read-db", "postgresql://x@127.0.0.1/y"],
            "--read-db must be a URL of the same dialect",
        ),
        (["--port", "70000"], "--port must be from 1 to 65535"),
        (["--cache", "-1"], "--cache must be 0 or more"),
        (["--count-cap", "0"], "--count-cap must be 1 or more"),
    ]
    for extra, words in cases:
        code, err = _qgen(*common, *extra)
        assert code == 2, (extra, err)
        assert words in err and err.count("\n") == 1, (extra, err)
    code, err = _qgen("serve", "--config", str(tmp_path / "missing.toml"), "--db", project.url)
    assert code == 2 and err.count("\n") == 1
