"""The operator console's JSON API and /metrics through Starlette's TestClient, against the
real databases: the numbers are the database's, writes need --allow-writes and the token,
bad input is a one-line 4xx."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient
from support.consoles import SCRIPT, TOKEN, Project, drop_project, make_project
from support.engines import Engine, engine_params, run

from runtime.console import create_app
from runtime.console.security import CSP
from runtime.contract.errors import ConfigurationError

AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture
def project(engine: Engine, tmp_path: Path) -> Iterator[Project]:
    p, namespace = make_project(engine, tmp_path)
    yield p
    drop_project(engine, namespace)


def client(p: Project, **kw: object) -> TestClient:
    return TestClient(create_app(list(p.queues.values()), p.url, **kw))  # type: ignore[arg-type]


def writer(p: Project, **kw: object) -> TestClient:
    return client(p, allow_writes=True, token=TOKEN, **kw)


def test_the_numbers_are_the_databases(project):
    want = run(project.jobs_counts())
    assert want == {"ready": 2, "delayed": 1, "in_flight": 0, "dead": 3, "processed": 1}
    with client(project) as c:
        r = c.get("/api/queues")
        assert r.status_code == 200
        lines = {q["name"]: q for q in r.json()["queues"]}
        assert set(lines) == {"jobs", "tasks", "pings", "ledger"}
        jobs = lines["jobs"]["stats"]
        assert {k: jobs[k] for k in want} == want
        assert jobs["oldest_ready_s"] is not None and 0 <= jobs["oldest_ready_s"] < 600
        tasks = lines["tasks"]
        assert tasks["group"] == "tasks"
        assert tasks["stats"]["dead"] == run(project.count("tasks", "grp = 'tasks_dead'")) == 1
        assert tasks["stats"]["ready"] == run(project.count("tasks", "grp = 'tasks'")) == 1
        assert lines["pings"]["stats"]["dead"] is None  # no dead letter: not known

        one = c.get("/api/queues/jobs").json()
        assert one["stats"] == jobs and one["form"] == "lease"
        assert [m["id"] for m in one["newest_dead"]] == sorted(
            run(project.dead_ids()), reverse=True
        )


def _cell(page: str, queue: str, key: str) -> str:
    """The overview's cell of ``queue``'s own line for ``key``: its attributes and text."""
    row = re.search(rf'<tr data-queue="{queue}">(.*?)</tr>', page, re.S)
    assert row, queue
    cell = re.search(rf'<td class="num" data-key="{key}"([^>]*)>([^<]*)</td>', row.group(1))
    assert cell, (queue, key)
    return cell.group(1) + "|" + cell.group(2)


def test_a_count_past_count_cap_says_capped(project):
    """jobs holds 3 unfinished rows (2 ready, 1 delayed) and 3 dead: with count_cap 2 the
    counts stop and the API, the page and /metrics say so; with 3 they are the database's."""
    want = run(project.jobs_counts())
    assert want == {"ready": 2, "delayed": 1, "in_flight": 0, "dead": 3, "processed": 1}
    with client(project, count_cap=2) as c:
        jobs = c.get("/api/queues/jobs").json()["stats"]
        assert jobs["capped"] == ["ready", "delayed", "in_flight", "dead"]
        assert {k: jobs[k] for k in want} == {**want, "dead": 2}
        page = c.get("/").text
        assert _cell(page, "jobs", "dead").endswith("|≥ 2")
        assert "data-capped" in _cell(page, "jobs", "ready")
        assert _cell(page, "jobs", "processed") == "|1"  # 1 kept row: exact
        assert "≥ 2" in c.get("/queues/jobs").text
        metrics = c.get("/metrics").text
        assert 'qgen_queue_capped{queue="jobs",group="",count="dead"} 1' in metrics
        assert 'qgen_queue_capped{queue="jobs",group="",count="processed"}' not in metrics
    run(_enqueue(project, "pings", 2))
    with client(project, count_cap=1, outbox=project.outbox) as c:
        lines = {q["name"]: q["stats"] for q in c.get("/api/queues").json()["queues"]}
        # the outbox's 2 unmarked records; pings (2 or more ready, no retry_after): its
        # delayed is always 0, so never capped
        assert (lines["outbox"]["ready"], lines["outbox"]["capped"]) == (1, ["ready"])
        assert lines["pings"]["capped"] == ["ready", "in_flight"]
        assert _cell(c.get("/").text, "outbox", "ready") == (
            ' data-capped title="counted up to 1 rows: there are more"|≥ 1'
        )
    with client(project, count_cap=3) as c:
        jobs = c.get("/api/queues/jobs").json()["stats"]
        assert jobs["capped"] == [] and {k: jobs[k] for k in want} == want
        page = c.get("/").text
        cells = {k: _cell(page, "jobs", k) for k in want}
        assert cells == {k: f"|{n}" for k, n in want.items()}  # no "≥", no data-capped
        assert 'qgen_queue_capped{queue="jobs"' not in c.get("/metrics").text


def test_dead_letter_pages_and_one_message(project):
    ids = sorted(run(project.dead_ids()), reverse=True)
    with client(project) as c:
        first = c.get("/api/queues/jobs/dead?page=1&size=2").json()
        assert [m["id"] for m in first["items"]] == ids[:2]
        assert first["next_page"] == 2 and first["next_after"] == ids[1]
        second = c.get("/api/queues/jobs/dead?page=2&size=2").json()
        assert [m["id"] for m in second["items"]] == ids[2:]
        assert second["next_page"] is None
        after = c.get(f"/api/queues/jobs/dead?after={ids[1]}&size=2").json()
        assert after["items"] == second["items"]

        script = next(m for m in first["items"] + second["items"] if m["payload"].get("html"))
        one = c.get(f"/api/queues/jobs/dead/{script['id']}").json()
        assert one["payload"] == {"n": 3, "html": SCRIPT}
        assert one["attempt"] == 2 and one["enqueued_at"]


BAD_INPUT = [
    ("/api/queues/nope", 404, "no queue 'nope'"),
    ("/api/queues/nope/dead", 404, "no queue 'nope'"),
    ("/api/queues/pings/dead", 404, "declares no dead letter"),
    ("/api/queues/jobs/dead/abc", 400, "whole number, not 'abc'"),
    ("/api/queues/jobs/dead/99999999999999999999", 400, "whole number"),
    ("/api/queues/jobs/dead/424242", 404, "no dead message 424242"),
    ("/api/queues/jobs/dead?size=100000", 400, "size must be a whole number from 1 to 200"),
    ("/api/queues/jobs/dead?size=-1", 400, "size must be"),
    ("/api/queues/jobs/dead?page=0", 400, "page must be"),
    ("/api/queues/jobs/dead?page=200&size=200", 400, "follow next_after"),
    ("/api/queues/jobs/dead?after=x", 400, "after id must be a whole number"),
    ("/api/nothing/here", 404, "no such page"),
]


def test_bad_input_is_a_one_line_4xx(project):
    with client(project) as c:
        for path, status, words in BAD_INPUT:
            r = c.get(path)
            assert r.status_code == status, (path, r.text)
            assert r.headers["content-type"] == "application/json"
            message = r.json()["error"]
            assert words in message, (path, message)
            assert "\n" not in message and "Traceback" not in r.text
        with writer(project) as w:
            for path, status in [
                ("/api/queues/jobs/dead/abc/redrive", 400),
                ("/api/queues/jobs/messages/1.5/cancel", 400),
                ("/api/queues/nope/dead/purge", 404),
                ("/api/queues/pings/dead/redrive", 404),
                # one group's dead messages: only a dead-letter table with a group column
                ("/api/queues/jobs/dead/redrive?of_group=x", 409),
                ("/api/queues/tasks/dead/redrive?of_group=tasks", 409),
            ]:
                r = w.post(path, headers=AUTH)
                assert r.status_code == status, (path, r.text)
            r = w.post("/api/queues/tasks/dead/redrive?of_group=tasks", headers=AUTH)
            assert "dead-letter table and a group column" in r.json()["error"]
            r = w.post(
                "/api/queues/jobs/dead/redrive", headers=AUTH, json={"of_group": "x", "ids": [1]}
            )
            assert r.status_code == 400 and "not both" in r.json()["error"]
            r = w.post("/api/queues/jobs/dead/redrive", headers=AUTH, content=b"[1]")
            assert r.status_code == 400 and "JSON object" in r.json()["error"]
            r = w.post("/api/queues/jobs/dead/redrive", headers=AUTH, content=b"x" * 20000)
            assert r.status_code == 413
            r = w.get("/api/queues/jobs/messages/1/cancel")
            assert r.status_code == 405 and r.json() == {"error": "this method is not allowed here"}


def test_bad_input_on_a_page_is_a_one_line_4xx_page(project):
    with client(project) as c:
        for path, status in [
            ("/queues/nope", 404),
            ("/queues/jobs/dead/abc", 400),
            ("/queues/jobs/dead?size=100000", 400),
            ("/nowhere", 404),
        ]:
            r = c.get(path)
            assert r.status_code == status, (path, r.text)
            assert r.headers["content-type"].startswith("text/html")
            assert 'id="error"' in r.text and "Traceback" not in r.text


def test_redrive_with_the_token(project):
    dead = run(project.dead_ids())
    with writer(project) as c:
        r = c.post(f"/api/queues/jobs/dead/{dead[0]}/redrive", headers=AUTH)
        assert r.status_code == 200 and r.json() == {"redriven": 1}
        assert run(project.dead_ids()) == dead[1:]
        assert run(project.jobs_counts())["ready"] == 3  # back as a first delivery
        again = c.post(f"/api/queues/jobs/dead/{dead[0]}/redrive", headers=AUTH)
        assert again.status_code == 404 and "no dead message" in again.json()["error"]

        r = c.post("/api/queues/tasks/dead/redrive", headers=AUTH)
        assert r.json() == {"redriven": 1}
        assert run(project.count("tasks", "grp = 'tasks'")) == 2

        r = c.post("/api/queues/jobs/dead/purge", headers=AUTH)
        assert r.json() == {"purged": 2} and run(project.dead_ids()) == []
        # the cached stats are dropped after a write: the next read is the database's
        assert c.get("/api/queues/jobs").json()["stats"]["dead"] == 0


def test_cancel_with_the_token(project):
    with writer(project) as c:
        pending = c.get("/api/queues/jobs/dead").json()  # dead ones are not cancellable
        dead_id = pending["items"][0]["id"]
        r = c.post(f"/api/queues/jobs/messages/{dead_id}/cancel", headers=AUTH)
        assert r.status_code == 409 and "not cancelled" in r.json()["error"]
        ready = run(project.count("jobs", "processed_at IS NULL"))
        ids = [i for i in range(1, 10) if i not in run(project.dead_ids())]
        done = None
        for i in ids:  # the first pending message (1 is processed)
            r = c.post(f"/api/queues/jobs/messages/{i}/cancel", headers=AUTH)
            if r.status_code == 200:
                done = i
                break
        assert done is not None and done != 1
        assert run(project.count("jobs", "processed_at IS NULL")) == ready - 1


REFUSED = [
    ("/api/queues/jobs/dead/redrive", {}),
    ("/api/queues/jobs/dead/redrive", {"Authorization": "Bearer wrong-token-wrong-token"}),
    ("/api/queues/jobs/dead/redrive", {"Authorization": TOKEN}),
    ("/api/queues/jobs/dead/purge", {}),
    ("/api/queues/jobs/dead/2/redrive", {}),
    ("/api/queues/jobs/dead/2/purge", {}),
    ("/api/queues/jobs/messages/5/cancel", {}),
]


def test_writes_are_refused_without_the_token(project):
    before = run(project.jobs_counts())
    with writer(project) as c:
        for path, headers in REFUSED:
            r = c.post(path, headers=headers)
            assert r.status_code == 401 and "Bearer" in r.json()["error"], (path, headers)
        # a browser's session cookie is no credential for the API
        login = c.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
        assert login.status_code == 303
        for path, headers in REFUSED:
            assert c.post(path, headers=headers).status_code == 401
    assert run(project.jobs_counts()) == before


def test_writes_are_refused_read_only(project):
    before = run(project.jobs_counts())
    with client(project, token=TOKEN) as c:
        r = c.post("/api/queues/jobs/dead/redrive", headers=AUTH)
        assert r.status_code == 403 and "--allow-writes" in r.json()["error"]
        assert c.post("/login", data={"token": TOKEN}).status_code == 403
    assert run(project.jobs_counts()) == before


def test_writes_need_a_token_to_start(project):
    with pytest.raises(ConfigurationError, match="QGEN_CONSOLE_TOKEN"):
        create_app(list(project.queues.values()), project.url, allow_writes=True)


def test_a_form_needs_login_and_its_csrf_token(project):
    dead = run(project.dead_ids())
    with writer(project) as c:
        form = {"csrf": "x"}
        r = c.post(f"/queues/jobs/dead/{dead[0]}/redrive", data=form, follow_redirects=False)
        assert r.status_code == 401
        r = c.post("/login", data={"token": "wrong", "next": "/"}, follow_redirects=False)
        assert r.status_code == 401
        r = c.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
        assert r.status_code == 303
        cookie = r.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie
        r = c.post(f"/queues/jobs/dead/{dead[0]}/redrive", data=form, follow_redirects=False)
        assert r.status_code == 403 and "CSRF" in r.text
        page = c.get(f"/queues/jobs/dead/{dead[0]}").text
        csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page).group(1)
        r = c.post(
            f"/queues/jobs/dead/{dead[0]}/redrive",
            data={"csrf": csrf},
            headers={"Origin": "https://evil.example"},
            follow_redirects=False,
        )
        assert r.status_code == 403
        assert run(project.dead_ids()) == dead
        r = c.post(
            f"/queues/jobs/dead/{dead[0]}/redrive", data={"csrf": csrf}, follow_redirects=False
        )
        assert (
            r.status_code == 303 and r.headers["location"] == "/queues/jobs/dead?done=redriven&n=1"
        )
        assert run(project.dead_ids()) == dead[1:]


def test_pages_escape_every_value_and_carry_the_csp(project):
    with client(project) as c:
        script_id = next(
            m["id"]
            for m in c.get("/api/queues/jobs/dead").json()["items"]
            if "html" in m["payload"]
        )
        for path in [
            "/",
            "/queues/jobs",
            "/queues/jobs/dead",
            f"/queues/jobs/dead/{script_id}",
            "/queues/tasks",
        ]:
            r = c.get(path)
            assert r.status_code == 200
            assert r.headers["content-security-policy"] == CSP
            assert "<script" not in r.text.lower(), path
        shown = c.get(f"/queues/jobs/dead/{script_id}").text
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in shown
        assert "&lt;script&gt;" in c.get("/queues/tasks").text  # a payload on the queue page


def test_metrics_format_and_cache(project):
    with client(project) as c:
        r = c.get("/metrics")
        assert r.status_code == 200 and r.headers["content-type"].startswith(
            "text/plain; version=0.0.4"
        )
        text = r.text
        sample = re.compile(r'^[a-z_]+(\{[a-z_]+="[^"\n]*"(,[a-z_]+="[^"\n]*")*\})? -?[0-9.e+]+$')
        for line in text.splitlines():
            assert line.startswith("# HELP ") or line.startswith("# TYPE ") or sample.match(line), (
                line
            )
        want = run(project.jobs_counts())
        assert f'qgen_queue_dead{{queue="jobs",group=""}} {want["dead"]}' in text
        assert f'qgen_queue_ready{{queue="jobs",group=""}} {want["ready"]}' in text
        assert 'qgen_queue_dead{queue="tasks",group="tasks"} 1' in text
        assert 'qgen_queue_dead{queue="pings"' not in text  # not known: left out
        assert 'qgen_queue_up{queue="pings"} 1' in text
        # a second scrape within the cache's 5 s reads no database: the same reading
        run(_enqueue(project))
        again = c.get("/metrics").text
        assert again == text


async def _enqueue(p: Project, queue: str = "jobs", n: int = 1) -> None:
    import runtime

    async with await runtime.connect(p.url) as db:
        for _ in range(n):
            await p.queues[queue].enqueue(db, {"n": 8})


def test_the_app_mounts_in_a_service(project):
    console = create_app(list(project.queues.values()), project.url, allow_writes=True, token=TOKEN)
    service = Starlette(routes=[Mount("/ops/queues", app=console)])
    with TestClient(service) as c:
        page = c.get("/ops/queues/")
        assert page.status_code == 200
        assert 'href="/ops/queues/queues/jobs"' in page.text
        assert 'href="/ops/queues/static/console.css"' in page.text
        assert c.get("/ops/queues/static/console.css").status_code == 200
        assert c.get("/ops/queues/api/queues/nope").status_code == 404
        r = c.post(
            "/ops/queues/login",
            data={"token": TOKEN, "next": "/queues/jobs"},
            follow_redirects=False,
        )
        assert r.headers["location"] == "/ops/queues/queues/jobs?done=login"
        assert "Path=/ops/queues" in r.headers["set-cookie"]
        assert c.get("/ops/queues/queues/jobs").text.count('name="csrf"') >= 3


def test_a_queue_whose_table_is_gone_spoils_only_its_line(project):
    from support.engines import drop_tables

    run(drop_tables(project.url, "pings"))
    with client(project) as c:
        lines = {q["name"]: q for q in c.get("/api/queues").json()["queues"]}
        assert lines["pings"]["stats"] is None and lines["pings"]["error"]
        assert lines["jobs"]["stats"]["dead"] == 3
        text = c.get("/metrics").text
        assert 'qgen_queue_up{queue="pings"} 0' in text and 'qgen_queue_up{queue="jobs"} 1' in text
        assert c.get("/").status_code == 200


def test_an_unreachable_database_is_a_503_in_one_line(project):
    url = "postgresql://nobody@127.0.0.1:1/none"
    with TestClient(create_app(list(project.queues.values()), url)) as c:
        r = c.get("/api/queues")
        assert r.status_code == 503 and "cannot be reached" in r.json()["error"]
        assert c.get("/metrics").status_code == 503
        assert c.get("/").status_code == 503


def test_charts_escape_their_labels():
    from runtime.console.chart import line_chart

    svg = str(line_chart("<b>t</b>", [("<script>x</script>", [(0.0, 1.0), (10.0, 3.0)])]))
    assert "<script>" not in svg and "&lt;script&gt;x&lt;/script&gt;" in svg
    assert "<polyline" in svg and "&lt;b&gt;t&lt;/b&gt;" in svg
    assert "no samples yet" in str(line_chart("t", [("q", [(0.0, 1.0)])]))


def test_reads_go_to_read_db_and_writes_to_db(project, engine, tmp_path):
    from dataclasses import replace

    from support.engines import engine_url

    where = tmp_path / "replica"
    where.mkdir()
    other = replace(engine, url=engine_url(engine.name, where))  # SQLite: another file
    replica, namespace = make_project(other, where)
    try:
        dead = run(project.dead_ids())
        assert run(replica.dead_ids()) == dead
        app = create_app(
            list(project.queues.values()),
            project.url,
            read_db=replica.url,
            allow_writes=True,
            token=TOKEN,
            cache_s=0,
        )
        with TestClient(app) as c:
            assert (
                c.post(f"/api/queues/jobs/dead/{dead[0]}/redrive", headers=AUTH).status_code == 200
            )
            assert run(project.dead_ids()) == dead[1:]  # written to db
            # read from read_db, which did not change
            assert [m["id"] for m in c.get("/api/queues/jobs/dead").json()["items"]] == dead[::-1]
            assert c.get("/api/queues/jobs").json()["stats"]["dead"] == len(dead)
            # every read side: the pages, the dead letter's page and /metrics
            assert f'qgen_queue_dead{{queue="jobs",group=""}} {len(dead)}' in c.get("/metrics").text
            assert f'<td class="num" data-key="dead">{len(dead)}</td>' in c.get("/").text
            assert f'data-id="{dead[0]}"' in c.get("/queues/jobs/dead").text
            assert c.get(f"/api/queues/jobs/dead/{dead[0]}").status_code == 200
        assert run(replica.dead_ids()) == dead  # the write never went there
    finally:
        drop_project(other, namespace)


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_an_undecodable_dead_payload_shows_as_text(project):
    # PostgreSQL's and MariaDB's JSON columns refuse such text; SQLite's TEXT column keeps it
    async def insert() -> None:
        import runtime

        async with await runtime.connect(project.url) as db:
            await db.execute(
                "INSERT INTO jobs_dead (id, payload, attempt) VALUES (1000, '<b>not json', 1)", {}
            )

    run(insert())
    with client(project) as c:
        page = c.get("/api/queues/jobs/dead").json()["items"]
        assert [m["id"] for m in page] == [1000, 4, 3, 2]  # the others still listed
        bad = c.get("/api/queues/jobs/dead/1000").json()
        assert bad["payload"] == "<b>not json" and "not JSON" in bad["payload_error"]
        shown = c.get("/queues/jobs/dead/1000").text
        assert "&#34;&lt;b&gt;not json&#34;" in shown and "<b>not" not in shown


def test_the_charts_draw_the_samples_kept_since_start(project):
    app = create_app(list(project.queues.values()), project.url, cache_s=0)
    app.state.console.sample_s = 0  # every reading is a sample
    with TestClient(app) as c:
        assert "no samples yet" in c.get("/queues/jobs").text
        for _ in range(3):
            c.get("/metrics")
        samples = c.get("/api/history").json()["samples"]
        assert len(samples) >= 3 and samples[-1]["queues"]["jobs"]["dead"] == 3
        page = c.get("/").text
        assert page.count("<polyline") >= 3  # ready and dead, for jobs, tasks and pings
        assert "<polyline" in c.get("/queues/jobs").text
