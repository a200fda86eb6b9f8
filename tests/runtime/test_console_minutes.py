"""The console's numbers that come from the rendered statements it added: per-minute counts
(finished_per_minute, enqueued_per_minute), a line per group (groups, stats), ready by
priority, fifo keys waiting behind a head, the outbox's stats; each compared with the
test's own SQL on every engine (the mysql dialect's files on MariaDB)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from support.consoles import TOKEN, Project, drop_project, make_project
from support.engines import Engine, run

import runtime
from runtime.console import create_app

AUTH = {"Authorization": f"Bearer {TOKEN}"}
#: the database's clock, s seconds ago
AGO = {
    "postgres": "clock_timestamp() - make_interval(secs => {s})",
    "mariadb": "UTC_TIMESTAMP(6) - INTERVAL {s} SECOND",
    "mysql": "UTC_TIMESTAMP(6) - INTERVAL {s} SECOND",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-{s} seconds')",
}


@pytest.fixture
def project(engine: Engine, tmp_path: Path) -> Iterator[Project]:
    p, namespace = make_project(engine, tmp_path)
    yield p
    drop_project(engine, namespace)


def backdate(p: Project) -> dict[str, int]:
    """Moves the ledger's two finished rows to 10.5 and 125 minutes ago and one ready row's
    enqueue to 30.5 minutes ago; returns those rows' ids."""
    ago = AGO[p.engine.dialect_name]

    async def go() -> dict[str, int]:
        async with await runtime.connect(p.url) as db:
            done = await db.fetchall(
                "SELECT id FROM ledger WHERE processed_at IS NOT NULL ORDER BY id", {}
            )
            ready = await db.fetchall(
                "SELECT id FROM ledger WHERE processed_at IS NULL AND grp = 'ledger' ORDER BY id",
                {},
            )
            ids = {
                "recent": int(done[0]["id"]),
                "old": int(done[1]["id"]),
                "late": int(ready[0]["id"]),
            }
            for col, key, s in (
                ("processed_at", "recent", 630),
                ("processed_at", "old", 7500),
                ("enqueued_at", "late", 1830),
            ):
                await db.execute(
                    f"UPDATE ledger SET {col} = {ago.format(s=s)} WHERE id = {ids[key]}", {}
                )
        return ids

    return run(go())


async def scalar(p: Project, sql: str) -> int:
    async with await runtime.connect(p.url) as db:
        row = await db.fetchone(sql, {})
    assert row is not None
    return int(next(iter(row.values())))


def app(p: Project, **kw: object):
    return create_app(list(p.queues.values()), p.url, outbox=p.outbox, cache_s=0, **kw)  # type: ignore[arg-type]


def test_per_minute_counts_are_the_databases(project):
    backdate(project)
    with TestClient(app(project)) as c:
        lines = {q["name"]: q for q in c.get("/api/queues").json()["queues"]}
    ledger = lines["ledger"]["per_minute"]
    assert len(ledger["finished"]) == len(ledger["enqueued"]) == 60
    # finished: the row 10.5 min ago in minute 10; the one 125 min ago is outside the hour
    assert ledger["finished"][10] == 1 and sum(ledger["finished"]) == 1
    # enqueued: the group's rows still in the table, unfinished or finished this hour
    want = run(
        scalar(
            project,
            "SELECT COUNT(*) FROM ledger WHERE grp = 'ledger' "
            f"AND (processed_at IS NULL OR processed_at >= {AGO[project.engine.dialect_name].format(s=3600)})",
        )
    )
    assert sum(ledger["enqueued"]) == want == 6
    assert ledger["enqueued"][30] == 1 and sum(ledger["enqueued"][:2]) == 5

    jobs = lines["jobs"]["per_minute"]
    assert sum(jobs["finished"]) == run(
        scalar(project, "SELECT COUNT(*) FROM jobs WHERE processed_at IS NOT NULL")
    )
    assert sum(jobs["enqueued"]) == run(scalar(project, "SELECT COUNT(*) FROM jobs"))
    # tasks keeps neither column: no counts, and the page says so
    assert lines["tasks"]["per_minute"] == {"finished": None, "enqueued": None}
    outbox = lines["outbox"]
    assert outbox["kind"] == "outbox"
    assert sum(outbox["per_minute"]["finished"]) == 1 and sum(outbox["per_minute"]["enqueued"]) == 3
    assert outbox["stats"]["ready"] == 2 and outbox["stats"]["processed"] == 1
    assert outbox["stats"]["oldest_ready_s"] is not None


def test_the_overview_draws_the_per_minute_bars(project):
    backdate(project)
    with TestClient(app(project)) as c:
        page = c.get("/").text
        minutes = {q["name"]: q["per_minute"] for q in c.get("/api/queues").json()["queues"]}
    assert 'data-series="finished" data-minute="10" data-count="1"' in page
    assert 'data-series="enqueued" data-minute="30" data-count="1"' in page
    drawn = page.count('class="bar ')
    want = sum(
        1
        for pm in minutes.values()
        for counts in pm.values()
        if counts is not None
        for n in counts
        if n > 0
    )
    assert drawn == want
    assert "No per-minute chart for tasks, pings:" in page
    assert "<script" not in page


def test_a_line_per_group_and_the_queue_page(project):
    run(_two_waiting(project))
    with TestClient(app(project)) as c:
        ledger = c.get("/api/queues/ledger").json()
        metrics = c.get("/metrics").text
        page = c.get("/queues/ledger").text
        overview = c.get("/").text
    groups = {g["group"]: g["stats"] for g in ledger["groups"]}
    assert list(groups) == ["ledger", "stray"]
    assert groups["ledger"] == ledger["stats"]
    assert groups["ledger"]["dead"] == run(
        scalar(project, "SELECT COUNT(*) FROM ledger WHERE grp = 'ledger_dead'")
    )
    assert groups["stray"]["ready"] == 1 and groups["stray"]["delayed"] == 1
    assert groups["stray"]["dead"] is None  # the dead letter is the queue's
    assert 'qgen_queue_ready{queue="ledger",group="stray"} 1' in metrics
    assert 'qgen_queue_delayed{queue="ledger",group="stray"} 1' in metrics
    assert 'qgen_queue_ready{queue="outbox",group=""} 2' in metrics
    assert 'data-group="stray"' in overview

    # ready by priority, highest first, as the database counts them
    async def by_priority() -> list[dict[str, int]]:
        async with await runtime.connect(project.url) as db:
            rows = await db.fetchall(
                "SELECT priority, COUNT(*) AS n FROM ledger WHERE grp = 'ledger' AND "
                "processed_at IS NULL GROUP BY priority ORDER BY priority DESC",
                {},
            )
        return [{"priority": int(r["priority"]), "ready": int(r["n"])} for r in rows]

    assert (
        ledger["priorities"]
        == run(by_priority())
        == [
            {"priority": 5, "ready": 4},
            {"priority": 0, "ready": 2},
        ]
    )
    head = run(scalar(project, "SELECT MIN(id) FROM ledger WHERE account = 'acct-1'"))
    assert ledger["fifo_waiting"] == [
        {"fifo_key": "acct-1", "head_id": head, "waiting": 2},
        {"fifo_key": "acct-2", "head_id": ledger["fifo_waiting"][1]["head_id"], "waiting": 1},
    ]
    assert 'id="priorities"' in page and 'data-key="acct-1"' in page and 'id="groups"' in page
    assert c.get("/api/queues/jobs").json()["priorities"] is None  # no priority column


async def _two_waiting(p: Project) -> None:
    """acct-2 gets a second message: two keys wait behind a head."""
    async with await runtime.connect(p.url) as db:
        await p.queues["ledger"].enqueue(db, {"n": 9}, priority=5, fifo_key="acct-2")


def test_redrive_the_selected_dead_messages(project):
    dead = run(project.dead_ids())
    with TestClient(app(project, allow_writes=True, token=TOKEN)) as c:
        for body, status in (
            ({"ids": "1"}, 400),
            ({"ids": []}, 400),
            ({"ids": [True]}, 400),
            ({"ids": list(range(501))}, 400),
        ):
            r = c.post("/api/queues/jobs/dead/redrive", json=body, headers=AUTH)
            assert r.status_code == status and list(r.json()) == ["error"], body
        r = c.post("/api/queues/jobs/dead/redrive", json={"ids": dead[:2]}, headers=AUTH)
        assert r.json() == {"redriven": 2}
    assert run(project.dead_ids()) == dead[2:]


def test_the_dead_list_form_redrives_the_ticked_ones_and_refuses_bad_ids(project):
    import re

    dead = run(project.dead_ids())
    with TestClient(app(project, allow_writes=True, token=TOKEN)) as c:
        r = c.post("/login", data={"token": TOKEN, "next": "/"}, follow_redirects=False)
        assert r.status_code == 303
        page = c.get("/queues/jobs/dead").text
        match = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
        assert match and 'name="ids"' in page
        csrf, action = match.group(1), "/queues/jobs/dead/redrive-selected"
        for form, words in (
            ({"csrf": csrf}, "tick at least one"),
            ({"csrf": csrf, "ids": "x1"}, "whole number"),
            ({"csrf": csrf, "ids": "9" * 30}, "whole number"),
        ):
            r = c.post(action, data=form, follow_redirects=False)
            assert r.status_code == 400 and words in r.text and "Traceback" not in r.text
        r = c.post(
            action, data={"csrf": csrf, "ids": [str(i) for i in dead[:2]]}, follow_redirects=False
        )
        assert r.status_code == 303 and r.headers["location"].endswith("done=redriven&n=2")
    assert run(project.dead_ids()) == dead[2:]


def test_the_overview_reuses_its_read_connections(project):
    """Opening a connection costs more than the overview's statements: the console keeps its
    read connections between requests (at most read_connections), and closes them when the
    app shuts down."""
    a = app(project)
    console = a.state.console
    with TestClient(a) as c:
        assert c.get("/").status_code == 200
        kept = [conn for _, _, conn in console._idle]
        assert 1 <= len(kept) <= console.read_connections
        assert c.get("/").status_code == 200
        assert c.get("/api/queues").status_code == 200
        again = [conn for _, _, conn in console._idle]
        assert {id(x) for x in again} == {id(x) for x in kept}  # the same ones, none new
    assert console._idle == []
    assert all(conn.closed for conn in kept)


#: (group, enqueued minutes ago, processed minutes ago or None): half minutes, away from the
#: minute's edges; two rows enqueued before the hour, one of them processed within it
SPREAD = [
    ("ledger", 0.5, None),
    ("ledger", 5.5, None),
    ("ledger", 5.5, 2.5),
    ("ledger", 20.5, 20.25),
    ("ledger", 45.5, None),
    ("ledger", 59.5, 30.5),
    ("ledger", 75.0, 65.0),
    ("ledger", 75.0, 30.5),
    ("ledger", 90.0, None),
    ("stray", 5.5, None),
    ("stray", 10.5, 3.5),
]


async def _spread(p: Project) -> None:
    ago = AGO[p.engine.dialect_name]
    ledger = p.queues["ledger"]
    async with await runtime.connect(p.url) as db:
        await db.execute("DELETE FROM ledger", {})
        for i, (group, _, _) in enumerate(SPREAD):
            await ledger.enqueue(db, {"i": i}, group=group)
        rows = await db.fetchall("SELECT id FROM ledger ORDER BY id", {})
        for row, (_, enqueued, processed) in zip(rows, SPREAD, strict=True):
            done = "NULL" if processed is None else ago.format(s=int(processed * 60))
            await db.execute(
                f"UPDATE ledger SET enqueued_at = {ago.format(s=int(enqueued * 60))}, "
                f"processed_at = {done} WHERE id = {int(row['id'])}",
                {},
            )


def test_per_minute_counts_rows_across_minutes(project):
    """Each minute's count, exact, over unfinished and processed rows of two groups: a
    row enqueued within the hour counts in its minute (unfinished or processed since), one
    enqueued before it never does; a processed row counts in its processed minute."""
    run(_spread(project))
    want_enqueued, want_finished = [0] * 60, [0] * 60
    for group, enqueued, processed in SPREAD:
        if group != "ledger":
            continue
        if enqueued < 60:
            want_enqueued[int(enqueued)] += 1
        if processed is not None and processed < 60:
            want_finished[int(processed)] += 1
    assert sum(want_enqueued) == 6 and sum(want_finished) == 4

    async def read() -> dict[str, list[int] | None]:
        async with await runtime.connect(project.url) as db:
            return await runtime.operate.per_minute(project.queues["ledger"], db, group="ledger")

    assert run(read()) == {"enqueued": want_enqueued, "finished": want_finished}
    with TestClient(app(project)) as c:
        lines = {q["name"]: q for q in c.get("/api/queues").json()["queues"]}
    assert lines["ledger"]["per_minute"] == {"enqueued": want_enqueued, "finished": want_finished}
