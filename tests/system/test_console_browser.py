"""The operator console's pages in a real headless Chromium (Debian's chromium and
chromium-driver, driven by selenium) against a server this test starts: the numbers on the
page are the database's, a <script> payload shows as text, and a redrive through the page
works after login and is refused without it.

Screenshots of the overview, a dead message and a queue page (logged in) are written under
pytest's tmp dir, and also to $QGEN_SCREENSHOTS when it names a folder.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.browser import (
    _need_chromium,
    _Server,
    browser_fixture,  # noqa: F401 (the browser fixture)
)
from support.consoles import SCRIPT, TOKEN, Project, drop_project, make_project
from support.engines import Engine, engine_params, run

import runtime


@pytest.fixture(params=engine_params("sqlite", "postgres", "mariadb"))
def served(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Project, str]]:
    from support.engines import engine_for

    _need_chromium()
    engine: Engine = engine_for(request.param, tmp_path)
    project, namespace = make_project(engine, tmp_path)
    server = _Server(project)
    try:
        yield project, server.url
    finally:
        server.stop()
        drop_project(engine, namespace)


def _shot(browser, tmp_path: Path, name: str) -> None:
    """A PNG of the page under pytest's tmp dir, and in $QGEN_SCREENSHOTS when set; the path
    printed (shown with ``pytest -s`` or ``-rP``)."""
    browser.save_screenshot(str(tmp_path / name))
    assert (tmp_path / name).stat().st_size > 1000
    print(f"screenshot: {tmp_path / name}")
    folder = os.environ.get("QGEN_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tmp_path / name, Path(folder) / name)
        print(f"screenshot: {Path(folder) / name}")


def _cells(browser, queue: str) -> dict[str, str]:
    from selenium.webdriver.common.by import By

    row = browser.find_element(By.CSS_SELECTOR, f'#queues tr[data-queue="{queue}"]')
    return {
        td.get_attribute("data-key"): td.text
        for td in row.find_elements(By.CSS_SELECTOR, "td[data-key]")
    }


def _no_alert(browser) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert  # noqa: B018 - reading it is the check


async def _per_minute(project: Project) -> dict[str, dict[str, list[int] | None]]:
    """Each queue's and the outbox's per-minute counts, read from the database now."""
    async with await runtime.connect(project.url) as db:
        return {
            q.name: await runtime.operate.per_minute(q, db)
            for q in [*project.queues.values(), project.outbox]
        }


def _bars(series: dict[str, list[int] | None]) -> dict[tuple[str, int], int]:
    return {
        (key, minute): n
        for key, per in series.items()
        if per is not None
        for minute, n in enumerate(per)
        if n > 0
    }


def test_pages_show_the_databases_numbers_and_payloads_as_text(browser, served, tmp_path):
    from selenium.webdriver.common.by import By

    project, url = served
    engine = project.engine.name
    before = run(_per_minute(project))
    browser.get(url + "/")
    after = run(_per_minute(project))  # a minute may turn while the page is read
    want = run(project.jobs_counts())
    cells = _cells(browser, "jobs")
    assert {k: int(cells[k]) for k in want} == want
    assert _cells(browser, "pings")["dead"] == "–"
    stray = browser.find_element(By.CSS_SELECTOR, '#queues tr[data-group="stray"]')
    assert stray.find_element(By.CSS_SELECTOR, 'td[data-key="ready"]').text == "1"
    assert _cells(browser, "outbox")["ready"] == "2"
    assert browser.find_element(By.ID, "login").text == "log in to act"  # not logged in yet

    # the per-minute charts: a bar for every minute with messages, its count the database's
    for name, series in after.items():
        if series["finished"] is None and series["enqueued"] is None:
            assert name in browser.find_element(By.ID, "no-minutes").text
            continue
        chart = browser.find_element(By.CSS_SELECTOR, f'.per-minute[data-queue="{name}"] svg')
        drawn = {
            (r.get_attribute("data-series"), int(r.get_attribute("data-minute"))): int(
                r.get_attribute("data-count")
            )
            for r in chart.find_elements(By.CSS_SELECTOR, "rect.bar")
        }
        assert drawn in (_bars(before[name]), _bars(series)), name
        assert chart.size["height"] > 100  # drawn, not an empty box
    jobs_done = run(project.count("jobs", "processed_at IS NOT NULL"))
    assert sum(after["jobs"]["finished"] or []) == jobs_done == 1
    _shot(browser, tmp_path, f"console-overview-{engine}.png")

    # the <script> payload: shown as text, never run
    script_id = next(
        int(r.get_attribute("data-id"))
        for r in _open(browser, url + "/queues/jobs/dead").find_elements(
            By.CSS_SELECTOR, "#dead tr[data-id]"
        )
        if "script" in r.text
    )
    browser.get(f"{url}/queues/jobs/dead/{script_id}")
    assert SCRIPT in browser.find_element(By.ID, "payload").text
    assert browser.find_element(By.CSS_SELECTOR, '[data-key="attempt"]').text == "2"
    _no_alert(browser)
    assert browser.find_elements(By.TAG_NAME, "script") == []
    _shot(browser, tmp_path, f"console-dead-message-{engine}.png")

    # a dead message of a queue with a last_error column: why it died, shown
    ledger_dead = run(project.dead_ids("ledger", "grp = 'ledger_dead'"))
    browser.get(f"{url}/queues/ledger/dead/{ledger_dead[0]}")
    assert "retry" in browser.find_element(By.CSS_SELECTOR, '[data-key="last_error"]').text
    _shot(browser, tmp_path, f"console-dead-last-error-{engine}.png")

    browser.get(url + "/queues/tasks")  # a payload holding "<script>" in a table cell
    assert SCRIPT in browser.find_element(By.ID, "dead").text
    _no_alert(browser)


def _shown(browser, element_id: str, timeout: float = 20):
    """The element once the page that holds it has loaded (a click or a script's submit
    returns before the next page is there on a busy machine)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    return WebDriverWait(browser, timeout).until(
        expected_conditions.presence_of_element_located((By.ID, element_id))
    )


def _says(browser, element_id: str, text: str, timeout: float = 20) -> None:
    """Wait until the element holds ``text``: the page a click leaves may still be there
    (with an element of that id) when the wait starts, and go stale under it."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.wait import WebDriverWait

    try:
        WebDriverWait(browser, timeout).until(
            expected_conditions.text_to_be_present_in_element((By.ID, element_id), text)
        )
    except TimeoutException:
        shown = browser.find_elements(By.ID, element_id)
        found = shown[0].text if shown else "no such element"
        raise AssertionError(f"#{element_id} never said {text!r} (it says {found!r})") from None


def _open(browser, address: str):
    browser.get(address)
    return browser


def test_a_redrive_through_the_page_needs_the_login(browser, served, tmp_path):
    from selenium.webdriver.common.by import By

    project, url = served
    browser.delete_all_cookies()
    dead = run(project.dead_ids())
    browser.get(f"{url}/queues/jobs/dead/{dead[0]}")
    assert browser.find_elements(By.ID, "redrive") == []  # no button before the login
    assert browser.find_element(By.ID, "login-to-act")
    # a form posted anyway (as another page would) is refused and moves nothing
    browser.execute_script(
        "const f = document.createElement('form'); f.method = 'post';"
        "f.action = arguments[0]; const i = document.createElement('input');"
        "i.name = 'csrf'; i.value = 'guess'; f.appendChild(i); document.body.appendChild(f);"
        "f.submit();",
        f"{url}/queues/jobs/dead/{dead[0]}/redrive",
    )
    _says(browser, "error", "log in with the operator token first")
    assert run(project.dead_ids()) == dead

    browser.get(f"{url}/queues/jobs/dead/{dead[0]}")
    browser.find_element(By.ID, "login-to-act").click()
    _shown(browser, "login-form")
    browser.find_element(By.NAME, "token").send_keys("not-the-token")
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
    _says(browser, "error", "not the operator token")
    browser.find_element(By.NAME, "token").send_keys(TOKEN)
    browser.find_element(By.CSS_SELECTOR, "#login-form button").click()
    _shown(browser, "redrive")  # back on the message, its actions open
    assert browser.current_url.startswith(f"{url}/queues/jobs/dead/{dead[0]}")
    browser.find_element(By.CSS_SELECTOR, "#redrive button").click()
    _says(browser, "flash", "1 dead message(s) sent back")
    assert run(project.dead_ids()) == dead[1:]
    browser.get(url + "/")
    assert (
        int(_cells(browser, "jobs")["dead"]) == len(dead) - 1 == run(project.jobs_counts())["dead"]
    )
    browser.get(url + "/queues/jobs")  # logged in: the actions shown
    assert browser.find_element(By.ID, "redrive-all") and browser.find_element(By.ID, "cancel")
    _shot(browser, tmp_path, f"console-queue-{project.engine.name}.png")

    # the dead list: tick two messages, redrive them
    browser.get(url + "/queues/jobs/dead")
    left = run(project.dead_ids())
    for id in left[:2]:
        browser.find_element(By.CSS_SELECTOR, f'#dead input[value="{id}"]').click()
    browser.find_element(By.CSS_SELECTOR, "#redrive-selected button[type=submit]").click()
    _says(browser, "flash", "2 dead message(s) sent back")
    assert run(project.dead_ids()) == left[2:]


def test_a_read_only_console_refuses_a_redrive(browser, served):
    from selenium.webdriver.common.by import By

    project, _ = served
    server = _Server(project, allow_writes=False)
    try:
        dead = run(project.dead_ids())
        browser.delete_all_cookies()
        browser.get(f"{server.url}/queues/jobs/dead/{dead[0]}")
        assert browser.find_element(By.ID, "mode").text == "read-only"
        assert browser.find_elements(By.TAG_NAME, "form") == []
        browser.execute_script(
            "const f = document.createElement('form'); f.method = 'post';"
            "f.action = arguments[0]; document.body.appendChild(f); f.submit();",
            f"{server.url}/queues/jobs/dead/{dead[0]}/redrive",
        )
        _says(browser, "error", "read-only")
        assert run(project.dead_ids()) == dead
    finally:
        server.stop()
