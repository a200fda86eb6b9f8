"""Pause and resume through the operator console: the API (token, optional group) and the
queue page's buttons in a real headless Chromium, with a consumer running beside it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient
from support.browser import _need_chromium, _Server, browser_fixture  # noqa: F401
from support.consoles import TOKEN, Project, drop_project, make_project
from support.engines import Engine, run

import runtime
from runtime.console import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def project(engine: Engine, tmp_path: Path) -> Iterator[Project]:
    p, namespace = make_project(engine, tmp_path)
    yield p
    drop_project(engine, namespace)


def test_pause_and_resume_through_the_api(project):
    app = create_app(list(project.queues.values()), project.url, allow_writes=True, token=TOKEN)
    with TestClient(app) as c:
        assert c.post("/api/queues/jobs/pause").status_code == 401  # the token, as for redrive
        r = c.post("/api/queues/jobs/pause", headers=AUTH)
        assert r.status_code == 200 and r.json() == {"paused": [None]}
        assert c.post("/api/queues/jobs/pause", headers=AUTH).json() == {"paused": [None]}
        assert c.get("/api/queues/jobs").json()["stats"]["paused"] is True
        assert 'qgen_queue_paused{queue="jobs",group=""} 1' in c.get("/metrics").text
        # a group, on the queue with a group column
        r = c.post("/api/queues/tasks/pause", headers=AUTH, json={"group": "tasks"})
        assert r.json() == {"paused": ["tasks"]}
        assert c.get("/api/queues/tasks").json()["stats"]["paused"] is True
        r = c.post("/api/queues/jobs/pause", headers=AUTH, json={"group": "eu"})
        assert r.status_code == 400 and "no group column" in r.json()["error"]
        r = c.post("/api/queues/tasks/resume", headers=AUTH, json={"group": "tasks"})
        assert r.json() == {"paused": []}
        assert c.post("/api/queues/jobs/resume", headers=AUTH).json() == {"paused": []}
        assert c.get("/api/queues/jobs").json()["stats"]["paused"] is False
    with TestClient(create_app(list(project.queues.values()), project.url, token=TOKEN)) as c:
        r = c.post("/api/queues/jobs/pause", headers=AUTH)  # a read-only console
        assert r.status_code == 403 and "--allow-writes" in r.json()["error"]
    assert run(_paused(project, "jobs")) == []


async def _paused(project: Project, name: str) -> list[str | None]:
    async with await runtime.connect(project.url) as db:
        return await project.queues[name].paused(db)


class _Consumer:
    """A consumer of one queue running in a thread of its own, counting what it handles."""

    def __init__(self, project: Project, name: str) -> None:
        self.handled: list[int] = []

        async def handle(message: Any, ctx: Any) -> runtime.Outcome:
            self.handled.append(message.id)
            return runtime.ack()

        self.consumer = runtime.Consumer(
            project.url, project.queues[name], handle, max_poll_interval=0.2
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(
            target=self.loop.run_until_complete, args=(self.consumer.run(),), daemon=True
        )
        self.thread.start()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.consumer.stop)
        self.thread.join(30)
        self.loop.close()


def _says(driver: Any, element_id: str, text: str) -> None:
    """Wait for the next page: the element saying ``text`` (the page before the click may
    hold an element of that id, e.g. the login's flash)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    WebDriverWait(driver, 20).until(
        expected_conditions.text_to_be_present_in_element((By.ID, element_id), text)
    )


@pytest.mark.parametrize("engine", ["sqlite", "postgres", "mariadb"], indirect=True)
def test_pause_through_the_page_stops_a_running_consumer_and_resume_restarts_it(
    browser,
    project,
):
    from selenium.webdriver.common.by import By

    _need_chromium()
    server = _Server(project)
    url = server.url
    consumer = _Consumer(project, "pings")
    try:
        browser.delete_all_cookies()
        browser.get(f"{url}/login?next=/queues/pings")
        browser.find_element(By.NAME, "token").send_keys(TOKEN)
        browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
        _says(browser, "paused", "Not paused")
        browser.find_element(By.CSS_SELECTOR, "#pause button").click()
        _says(browser, "flash", "Paused: no consumer claims")
        assert "the whole queue" in browser.find_element(By.ID, "paused").text
        assert run(_paused(project, "pings")) == [None]

        async def enqueue() -> list[int]:
            async with await runtime.connect(project.url) as db:
                return [await project.queues["pings"].enqueue(db, {"n": n}) for n in range(3)]

        ids = run(enqueue())
        time.sleep(1.5)  # the running consumer polls several times: it claims none
        assert consumer.handled == []

        browser.find_element(By.CSS_SELECTOR, "#resume button").click()
        _says(browser, "flash", "Resumed: consumers claim")
        assert "Not paused" in browser.find_element(By.ID, "paused").text
        deadline = time.monotonic() + 20
        while len(consumer.handled) < len(ids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(consumer.handled) == sorted(ids)
    finally:
        consumer.stop()
        server.stop()
