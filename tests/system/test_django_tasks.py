"""The Django tasks backend (runtime.django) end to end, through the example project in
generated_examples/django_service: `manage.py migrate` creates the queue table, requests
enqueue tasks in transaction.atomic() blocks that commit or roll back with the order,
`manage.py qgen_worker` runs them, and get_result reads their outcome. On PostgreSQL,
MariaDB and SQLite, each in a namespace of its own; every step is a process of its own, as
in a deployment (Django's settings are one per process).

It runs on whatever Django the venv has: Django 6's django.tasks under Python 3.12 (CI's
.venv312), the django-tasks backport on Django 5.2 under Python 3.11."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.engines import Engine, engine_params, run
from support.statements import create_namespace, drop_namespace

import runtime

pytest.importorskip("django", reason="the django extra is not installed: pip install -e '.[dev]'")

REPO = Path(__file__).resolve().parents[2]
SERVICE = REPO / "generated_examples" / "django_service"
ENGINES = engine_params("sqlite", "postgres", "mariadb")

#: what each step script starts with: Django set up with the example's settings
SETUP = "import json, django; django.setup()\n"


def manage(url: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``python manage.py ARGS`` in the example project, on the database at ``url``."""
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=SERVICE,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "SHOP_DATABASE_URL": url},
    )


def django(url: str, code: str) -> Any:
    """Run ``code`` in a process with the example's settings; what it printed last, as JSON."""
    done = subprocess.run(
        [sys.executable, "-c", SETUP + code],
        cwd=SERVICE,
        capture_output=True,
        text=True,
        timeout=120,
        env={
            **os.environ,
            "SHOP_DATABASE_URL": url,
            "DJANGO_SETTINGS_MODULE": "config.settings",
            "PYTHONPATH": str(SERVICE),
        },
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def database_url(engine: Engine, url: str, tmp_path: Path) -> str:
    """The example's SHOP_DATABASE_URL: SQLite in a file of the test's own."""
    return f"sqlite:///{tmp_path / 'shop.db'}" if engine.name == "sqlite" else url


@pytest.fixture
def shop(engine: Engine, tmp_path: Path) -> Any:
    """The example project migrated into a namespace of its own: its database URL."""
    name, url = run(create_namespace(engine))
    url = database_url(engine, url, tmp_path)
    try:
        migrated = manage(url, "migrate")
        assert migrated.returncode == 0, migrated.stderr
        yield url
    finally:
        run(drop_namespace(engine, name))


async def _rows(url: str, sql: str) -> list[dict[str, Any]]:
    async with await runtime.connect(url) as db:
        return await db.fetchall(sql, {})


PLACE = """
from shop.views import place_order
from shop.tasks import audit
placed = place_order("book", "ann@example.com")
try:
    place_order("pen", "bob@example.com", fail=True)
except RuntimeError:
    pass
bad = place_order("cup", "nobody")
print(json.dumps({"placed": placed, "bad": bad}))
"""


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_tasks_commit_and_roll_back_with_the_order_and_the_worker_runs_them(
    engine: Engine, shop: str
) -> None:
    placed = django(shop, PLACE)
    orders = run(_rows(shop, "SELECT id, item, status FROM shop_order ORDER BY id"))
    assert [o["item"] for o in orders] == ["book", "cup"]  # the pen rolled back
    tasks = run(_rows(shop, "SELECT id, payload, priority FROM shop_tasks ORDER BY id"))
    payloads = [json.loads(t["payload"]) for t in tasks]
    assert [(p["task"], p["args"]) for p in payloads] == [
        ("shop.tasks.ship", [placed["placed"][0]]),
        ("shop.tasks.receipt", [placed["placed"][0]]),
        ("shop.tasks.ship", [placed["bad"][0]]),
        ("shop.tasks.receipt", [placed["bad"][0]]),
    ]  # the rolled-back order's tasks are gone with it
    assert [t["priority"] for t in tasks] == [0, 10, 0, 10]
    assert [f"tasks:{t['id']}" for t in tasks] == placed["placed"][1] + placed["bad"][1]

    worker = manage(shop, "qgen_worker", "--drain", "--retry", "immediate")
    assert worker.returncode == 0, worker.stderr
    # three tasks succeed; the bad receipt fails, is retried once, then goes dead
    assert "qgen worker: tasks: ack=3, dead_letter=1" in worker.stdout, worker.stdout
    assert "queue tasks: consuming shop_tasks" in worker.stderr  # qgen worker's own log line
    orders = run(_rows(shop, "SELECT status FROM shop_order ORDER BY id"))
    assert [o["status"] for o in orders] == ["shipped", "shipped"]
    dead = run(_rows(shop, "SELECT last_error FROM shop_tasks WHERE queue = 'tasks_dead'"))
    assert len(dead) == 1
    assert dead[0]["last_error"].startswith("builtins.ValueError\nTraceback")
    assert "no address for order" in dead[0]["last_error"]


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_arguments_that_are_not_json_are_refused_at_enqueue(engine: Engine, shop: str) -> None:
    refused = django(
        shop,
        """
import datetime
from runtime import PayloadError
from shop.tasks import ship
try:
    ship.enqueue(datetime.date(2024, 1, 2))
except PayloadError as exc:
    print(json.dumps(str(exc)))
""",
    )
    assert refused.startswith("task shop.tasks.ship: its arguments are sent as JSON, and a date")
    assert "['args'][0]" in refused
    assert run(_rows(shop, "SELECT id FROM shop_tasks")) == []


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_aenqueue_async_tasks_and_their_context(engine: Engine, shop: str) -> None:
    ids = django(
        shop,
        """
import asyncio
from shop.tasks import audit
print(json.dumps(asyncio.run(audit.aenqueue("stock take")).id))
""",
    )
    assert ids.startswith("tasks:")
    worker = manage(shop, "qgen_worker", "--drain", "--queue", "default")
    assert worker.returncode == 0, worker.stderr
    assert "qgen worker: tasks: ack=1" in worker.stdout, worker.stdout


def test_the_framework_is_djangos_own_from_django_6_and_the_backport_before() -> None:
    import django

    from runtime.django import compat

    expected = "django.tasks" if django.VERSION >= (6,) else "django_tasks"
    assert expected == compat.FRAMEWORK
    assert compat.TaskResultStatus.READY == "READY"


RESULTS = """
from shop.tasks import audit, receipt, ship
ids = {RESULT_IDS}
out = {{}}
for name, id_ in ids.items():
    task = {{"ship": ship, "receipt": receipt, "audit": audit}}[name.split("_")[0]]
    r = task.get_result(id_)
    out[name] = {{
        "status": str(r.status),
        "value": r.return_value if r.status == "SUCCESSFUL" else None,
        "errors": [[e.exception_class_path, e.traceback] for e in r.errors],
        "args": r.args,
        "attempts": r.attempts,
    }}
print(json.dumps(out))
"""


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_get_result_reads_ready_successful_and_failed(engine: Engine, shop: str) -> None:
    placed = django(shop, PLACE)
    ids = {
        "ship": placed["placed"][1][0],
        "receipt_ok": placed["placed"][1][1],
        "receipt_bad": placed["bad"][1][1],
    }
    before = django(shop, RESULTS.format(RESULT_IDS=ids))
    assert {v["status"] for v in before.values()} == {"READY"}
    assert before["ship"]["args"] == [placed["placed"][0]]
    worker = manage(shop, "qgen_worker", "--drain", "--retry", "immediate")
    assert worker.returncode == 0, worker.stderr
    after = django(shop, RESULTS.format(RESULT_IDS=ids))
    assert after["ship"]["status"] == "SUCCESSFUL"
    assert after["ship"]["value"] == {"order": placed["placed"][0], "status": "shipped"}
    assert after["receipt_ok"]["value"] == "sent to ann@example.com"
    bad = after["receipt_bad"]
    assert bad["status"] == "FAILED"
    assert bad["attempts"] == 2
    [(cls, trace)] = bad["errors"]
    assert cls == "builtins.ValueError"
    assert "no address for order" in trace
    missing = django(
        shop,
        """
from shop.tasks import ship
from runtime.django.compat import TaskResultDoesNotExist
try:
    ship.get_result("tasks:999999")
except TaskResultDoesNotExist as exc:
    print(json.dumps(str(exc)))
""",
    )
    assert "tasks:999999" in missing


@pytest.mark.parametrize("engine", ENGINES, indirect=True)
def test_get_result_reads_running_while_a_worker_holds_the_task(engine: Engine, shop: str) -> None:
    """A consumer on the task's table (as qgen_worker's would be) reads get_result from
    another process while it holds the lease: RUNNING, with the task's arguments; after its
    ack with a result: SUCCESSFUL with that return value."""
    (id_,) = django(
        shop,
        """
from shop.tasks import ship
print(json.dumps([ship.enqueue(7).id]))
""",
    )
    read = RESULTS.format(RESULT_IDS={"ship": id_})
    dialect = "sqlite" if engine.name == "sqlite" else engine.name
    queue = runtime.load(SERVICE / "sql" / dialect / "tasks.sql")
    seen: list[Any] = []

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        assert message.payload["task"] == "shop.tasks.ship"
        seen.append(await asyncio.to_thread(django, shop, read))
        return runtime.ack(result={"order": 7, "status": "shipped"})

    counts = run(runtime.Consumer(shop, queue, handle, concurrency=1, batch=1).drain())
    assert counts["ack"] == 1, counts
    [during] = seen
    assert during["ship"]["status"] == "RUNNING"
    assert (during["ship"]["args"], during["ship"]["attempts"]) == ([7], 1)
    after = django(shop, read)["ship"]
    assert after["status"] == "SUCCESSFUL"
    assert after["value"] == {"order": 7, "status": "shipped"}
