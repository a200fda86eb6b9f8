"""`qgen worker`: a queue's consumer as a process, stopped gracefully by SIGTERM mid-drain."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.engines import Engine, drop_tables, engine_params, run, unique_table
from support.queues import make_queue

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


# ------------------------------------------------------- several queues, options, fail fast

JOBS = """\
import asyncio, logging, runtime

logging.getLogger("chatty").warning("a library's warning at import")


async def handle_order(message, ctx):
    logging.getLogger("chatty").info("a library's info line")
    if message.payload.get("fail") and ctx.attempt == 1:
        raise RuntimeError("the partner is down")
    if message.payload.get("hang"):
        await asyncio.sleep(30)
    print(f"order {message.id}", flush=True)


async def send_mail(message, ctx):
    print(f"mail {message.id}", flush=True)
    return runtime.ack()
"""


class Project:
    """A service folder: qgen.toml with queues orders and mails (fresh tables), their files
    rendered for the engine, the tables created (unless ``create=False``) and jobs.py."""

    def __init__(self, engine: Engine, folder: Path, create: bool = True) -> None:
        from qgen.build import render_declaration
        from qgen.declaration import parse_declaration

        self.engine, self.folder = engine, folder
        self.tables = {"orders": unique_table("w_orders"), "mails": unique_table("w_mails")}
        cols = {
            "id": "id",
            "payload": "payload",
            "attempt": "attempt",
            "retry_after": "retry_after",
            "locked_until": "locked_until",
            "processed_at": "processed_at",
        }
        raw = {
            "dialects": [engine.dialect_name],
            "out": "sql",
            "queues": {
                name: {"table": t, "form": "lease", "lease_s": 30, "columns": cols}
                for name, t in self.tables.items()
            },
        }
        lines = [f'dialects = ["{engine.dialect_name}"]', 'out = "sql"']
        for name, t in self.tables.items():
            lines += [f"[queues.{name}]", f'table = "{t}"', 'form = "lease"', "lease_s = 30"]
            lines += [f"[queues.{name}.columns]"] + [f'{k} = "{v}"' for k, v in cols.items()]
        (folder / "qgen.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        decl = parse_declaration(raw, folder / "qgen.toml")
        for rel, text in render_declaration(decl).items():
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text, encoding="utf-8")
        (folder / "jobs.py").write_text(JOBS, encoding="utf-8")
        import runtime

        self.queues = {
            n: runtime.load(folder / "sql" / engine.dialect_name / f"{n}.sql") for n in self.tables
        }
        if create:
            run(self._create())

    async def _create(self) -> None:
        import runtime

        await drop_tables(self.engine.url, *self.tables.values())
        async with await runtime.connect(self.engine.url) as db:
            for q in self.queues.values():
                for statement in q.rendered.require("schema"):
                    await db.execute(statement, {})

    def enqueue(self, name: str, *payloads: dict) -> list[int]:
        import runtime

        async def go() -> list[int]:
            async with await runtime.connect(self.engine.url) as db:
                return [await self.queues[name].enqueue(db, p) for p in payloads]

        return run(go())

    def seconds_left(self, name: str) -> list[float | None]:
        """Per row of queue ``name``: seconds until its retry_after (None: no delay)."""
        import runtime

        until = {
            "postgres": "EXTRACT(EPOCH FROM (retry_after - clock_timestamp()))",
            "sqlite": "(julianday(retry_after) - julianday('now')) * 86400.0",
        }.get(
            self.engine.dialect_name,
            "TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), retry_after) / 1000000.0",
        )

        async def go() -> list[float | None]:
            async with await runtime.connect(self.engine.url) as db:
                rows = await db.fetchall(
                    f"SELECT {until} AS s FROM {self.tables[name]} ORDER BY id", {}
                )
            return [None if r["s"] is None else float(r["s"]) for r in rows]

        return run(go())

    def worker(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if k != "QGEN_DATABASE_URL"}
        return subprocess.run(
            [sys.executable, "-m", "qgen.cli", "worker", "--db", self.engine.url, *args],
            cwd=self.folder,
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout,
        )

    def drop(self) -> None:
        run(drop_tables(self.engine.url, *self.tables.values()))


def _counts(out: str, queue: str) -> dict[str, int]:
    (line,) = [x for x in out.splitlines() if x.startswith(f"qgen worker: {queue}: ")]
    return {k: int(v) for k, v in (p.split("=") for p in line.split(": ", 2)[2].split(", "))}


def test_two_queues_in_one_process_are_both_drained_and_named_at_start(
    engine: Engine, tmp_path: Path
) -> None:
    p = Project(engine, tmp_path)
    try:
        p.enqueue("orders", *({"n": n} for n in range(7)))
        p.enqueue("mails", *({"n": n} for n in range(5)))
        proc = p.worker(
            "--queue",
            "orders=jobs:handle_order",
            "--queue",
            "mails=jobs:send_mail",
            "--concurrency",
            "3",
            "--batch",
            "4",
            "--drain",
        )
        assert proc.returncode == 0, proc.stderr
        assert _counts(proc.stdout, "orders") == {"ack": 7}
        assert _counts(proc.stdout, "mails") == {"ack": 5}
        assert proc.stdout.count("order ") == 7 and proc.stdout.count("mail ") == 5
        starts = [x for x in proc.stderr.splitlines() if "INFO runtime: queue" in x]
        assert len(starts) == 2, proc.stderr
        # the host and database (the SQLite file), never a password
        where = engine.url.removeprefix("sqlite:///").split("@")[-1]
        for name, line in zip(("orders", "mails"), starts, strict=True):
            assert f"queue {name}: " in line and p.tables[name] in line
            assert f" on {engine.dialect_name} at " in line and where in line, line
            assert "form lease, concurrency 3, batch 4" in line and "retry exponential" in line
        if engine.name != "sqlite":
            assert "127.0.0.1:" in starts[0]
        # --log-level sets the qgen and runtime loggers only: a library's info stays out
        assert "a library's info line" not in proc.stderr
        assert "a library's warning at import" in proc.stderr
    finally:
        p.drop()


def test_retry_options_reach_the_consumer(engine: Engine, tmp_path: Path) -> None:
    p = Project(engine, tmp_path)
    try:
        # default: a failure waits about 1 s (the default backoff) in the row's retry_after
        p.enqueue("orders", {"fail": True}, {"n": 1})
        proc = p.worker("--queue", "orders", "--handler", "jobs:handle_order", "--drain")
        assert proc.returncode == 0, proc.stderr
        assert _counts(proc.stdout, "orders") == {"ack": 1, "retry_after": 1}
        left = p.seconds_left("orders")[0]
        assert left is not None and 0 < left <= 1.05, left
        # --retry-base/--retry-cap: a longer first delay
        p.drop()
        p = Project(engine, tmp_path)
        p.enqueue("orders", {"fail": True})
        proc = p.worker(
            "--queue",
            "orders=jobs:handle_order",
            "--retry-base",
            "100",
            "--retry-cap",
            "200",
            "--drain",
        )
        assert proc.returncode == 0, proc.stderr
        assert "retry exponential 100 s to 200 s" in proc.stderr
        (left,) = p.seconds_left("orders")
        assert left is not None and 70 <= left <= 100.05, left
        # --retry immediate: it comes straight back and is handled in the same drain
        p.drop()
        p = Project(engine, tmp_path)
        p.enqueue("orders", {"fail": True}, {"n": 1})
        proc = p.worker("--queue", "orders=jobs:handle_order", "--retry", "immediate", "--drain")
        assert proc.returncode == 0, proc.stderr
        assert _counts(proc.stdout, "orders") == {"ack": 2, "retry": 1}
        assert "retry immediate" in proc.stderr
        # --handler-timeout: a hanging handler is cancelled and taken as a retry
        p.drop()
        p = Project(engine, tmp_path)
        p.enqueue("orders", {"hang": True})
        began = time.monotonic()
        proc = p.worker(
            "--queue",
            "orders=jobs:handle_order",
            "--handler-timeout",
            "0.3",
            "--retry-base",
            "300",
            "--drain",
        )
        assert proc.returncode == 0, proc.stderr
        assert _counts(proc.stdout, "orders") == {"retry_after": 1}
        assert "ran past 0.3s" in proc.stderr and time.monotonic() - began < 20
    finally:
        p.drop()


def test_a_missing_table_is_one_line_and_exit_2_within_seconds(
    engine: Engine, tmp_path: Path
) -> None:
    p = Project(engine, tmp_path, create=False)
    if engine.name == "sqlite":  # the file exists; its tables do not
        run(_touch(engine.url))
    began = time.monotonic()
    proc = p.worker("--queue", "orders=jobs:handle_order", "--queue", "mails=jobs:send_mail")
    assert time.monotonic() - began < 15
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    errors = [x for x in proc.stderr.splitlines() if " INFO " not in x and "chatty" not in x]
    assert len(errors) == 1, proc.stderr
    assert errors[0].startswith("qgen worker: queue '")
    assert "does not exist" in errors[0] and "qgen apply --db URL" in errors[0]
    assert any(t in errors[0] for t in p.tables.values())


async def _touch(url: str) -> None:
    import runtime

    async with await runtime.connect(url):
        pass


@pytest.mark.parametrize(
    "command",
    [
        ["worker", "--queue", "orders=jobs:handle_order"],
        ["stats"],
        ["verify"],
        ["dead", "list", "orders"],
        ["prune", "--older-than", "60"],
        ["cancel", "orders", "1"],
    ],
    ids=lambda c: c[0],
)
def test_a_sqlite_file_that_does_not_exist_is_refused_not_created(
    tmp_path: Path, command: list[str]
) -> None:
    p = Project(Engine("sqlite", "sqlite:///absent.db", "sqlite"), tmp_path, create=False)
    env = {k: v for k, v in os.environ.items() if k != "QGEN_DATABASE_URL"}
    proc = subprocess.run(
        [sys.executable, "-m", "qgen.cli", *command, "--db", "sqlite:///absent.db"],
        cwd=p.folder,
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = [x for x in proc.stderr.splitlines() if "chatty" not in x]
    assert "'absent.db' does not exist" in line and "?mode=rwc" in line, line
    assert not (tmp_path / "absent.db").exists()


def test_a_sqlite_url_with_mode_rwc_creates_the_file(tmp_path: Path) -> None:
    p = Project(Engine("sqlite", "sqlite:///made.db?mode=rwc", "sqlite"), tmp_path, create=False)
    proc = p.worker("--queue", "orders=jobs:handle_order", "--drain")
    assert (tmp_path / "made.db").exists()
    # created, but empty: the missing table is the next thing it says
    assert proc.returncode == 2 and "does not exist; create it" in proc.stderr, proc.stderr


@pytest.mark.parametrize(
    ("module", "words"),
    [
        ("def handle(message, ctx)\n    return None\n", ["broken.py:1", "SyntaxError"]),
        ("import os\nimport no_such_dependency_xyz\n", ["broken.py:2", "no_such_dependency_xyz"]),
        ("from os import no_such_name\n", ["broken.py:1", "ImportError", "no_such_name"]),
        ("X = 1\nraise RuntimeError('no config')\n", ["broken.py:2", "RuntimeError: no config"]),
        ("def other(message, ctx):\n    pass\n", ["broken.py", "has no 'handle'"]),
    ],
    ids=["syntax", "missing-dependency", "import-error", "raises", "no-function"],
)
def test_a_handler_module_that_does_not_import_is_one_line_with_file_and_line(
    tmp_path: Path, module: str, words: list[str]
) -> None:
    p = Project(Engine("sqlite", "sqlite:///w.db?mode=rwc", "sqlite"), tmp_path, create=False)
    (tmp_path / "broken.py").write_text(module, encoding="utf-8")
    proc = p.worker("--queue", "orders=broken:handle")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("qgen worker: handler 'broken:handle'"), lines
    for w in words:
        assert w in lines[0], lines[0]


@pytest.mark.parametrize("level", ["debugg", "LOUD", ""])
def test_a_bad_log_level_is_one_line_and_exit_2(tmp_path: Path, level: str) -> None:
    p = Project(Engine("sqlite", "sqlite:///w.db?mode=rwc", "sqlite"), tmp_path, create=False)
    proc = p.worker("--queue", "orders=jobs:handle_order", "--log-level", level)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    (line,) = proc.stderr.strip().splitlines()
    assert line == (
        f"qgen worker: --log-level {level!r} is not a level; use DEBUG, INFO, WARNING, "
        "ERROR or CRITICAL"
    )
    assert not (tmp_path / "w.db").exists()


def test_log_level_debug_reaches_the_runtime_and_not_other_libraries(tmp_path: Path) -> None:
    engine = Engine("sqlite", f"sqlite:///{tmp_path / 'w.db'}", "sqlite")
    run(_touch(engine.url))
    p = Project(engine, tmp_path)
    p.enqueue("orders", {"n": 1})
    proc = p.worker("--queue", "orders=jobs:handle_order", "--drain", "--log-level", "debug")
    assert proc.returncode == 0, proc.stderr
    assert " DEBUG runtime: " in proc.stderr  # the settlement's line
    assert "a library's info line" not in proc.stderr and " DEBUG asyncio" not in proc.stderr
    quiet = p.worker("--queue", "orders=jobs:handle_order", "--drain", "--log-level", "warning")
    assert quiet.returncode == 0 and " INFO runtime" not in quiet.stderr, quiet.stderr


def test_where_a_url_points_never_shows_its_password() -> None:
    from runtime.worker import where_url

    assert where_url("postgresql://app:s3cret@db.example:6432/shop") == "app@db.example:6432/shop"
    assert where_url("mysql://root:pw@127.0.0.1/jobs?connect_timeout=5") == "root@127.0.0.1/jobs"
    assert where_url("sqlite:///data/app.db?mode=rwc") == "data/app.db"


@pytest.mark.parametrize("engine", engine_params("sqlite", "postgres", "mysql"), indirect=True)
def test_sigterm_stops_every_queue_of_the_process_gracefully(
    engine: Engine, tmp_path: Path
) -> None:
    p = Project(engine, tmp_path)
    try:
        p.enqueue("orders", {"n": 1})
        p.enqueue("mails", {"n": 1})
        env = {k: v for k, v in os.environ.items() if k != "QGEN_DATABASE_URL"}
        proc = subprocess.Popen(
            [
                *(sys.executable, "-m", "qgen.cli", "worker", "--db", engine.url),
                *("--queue", "orders=jobs:handle_order", "--queue", "mails=jobs:send_mail"),
            ],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        assert proc.stdout is not None
        seen: set[str] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:
            seen.add(proc.stdout.readline().split(" ", 1)[0])
        assert seen >= {"order", "mail"}
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "SIGTERM: stopping" in err
        assert _counts(out, "orders") == {"ack": 1} and _counts(out, "mails") == {"ack": 1}
    finally:
        p.drop()
