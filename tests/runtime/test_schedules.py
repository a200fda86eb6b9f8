"""Schedules: declared per queue, checked by render, fired exactly once per slot on every
engine and form, whatever number of schedulers run them, with processes killed mid-way."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.engines import run
from support.queues import QueueUnderTest, make_queue

import runtime
from qgen.build import render_declaration
from qgen.cli import main
from qgen.declaration import DeclarationError, load_declaration
from runtime.contract.schedule_slots import Schedule, due, parse_schedule, plan, slot_text
from runtime.forms import form_for
from runtime.schedules import (
    Scheduler,
    _ready_states,
    _states,
    db_now,
    fire,
    pause,
    resume,
    status,
)

HERE = Path(__file__).resolve().parents[1] / "support"  # schedule_worker.py
FORMS = ["row_lock", "lease", "advisory"]


def ts(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp())


# ---------------------------------------------------------------- the declaration


def write(tmp_path: Path, schedule: str, columns: str = "", others: str = "") -> Path:
    path = tmp_path / "qgen.toml"
    body = f"""
    dialects = ["postgres", "mysql", "mariadb", "sqlite"]
    [queues.reports]
    table = "reports_queue"
    form = "lease"
    {others}
    [queues.reports.columns]
    id = "id"
    payload = "payload"
    locked_until = "locked_until"
    {columns}
    [queues.reports.schedules.nightly]
    """
    path.write_text(textwrap.dedent(body) + textwrap.dedent(schedule), encoding="utf-8")
    return path


BAD = [
    ("bad-cron", 'cron = "61 * * * *"\npayload = 1', "cron", "Bad minute"),
    ("cron-fields", 'cron = "* * *"\npayload = 1', "cron", "has 3 fields"),
    ("never", 'cron = "0 0 30 2 *"\npayload = 1', "cron", "not a cron expression"),
    ("zone", 'cron = "0 3 * * *"\ntimezone = "Europe/Pariss"\npayload = 1', "timezone", "unknown"),
    ("both", 'cron = "0 3 * * *"\nevery = "1s"\npayload = 1', "cron", "exactly one"),
    ("neither", "payload = 1", "cron", "exactly one"),
    ("every", 'every = "10 parsecs"\npayload = 1', "every", "not an interval"),
    ("no-payload", 'every = "10s"', "payload", "missing"),
    ("policy", 'every = "10s"\npayload = 1\ncatch_up = "some"', "catch_up", "unknown policy"),
    ("limit", 'every = "1s"\npayload = 1\ncatch_up_limit = 5', "catch_up_limit", "applies to"),
    ("limit-range", 'every = "1s"\npayload = 1\ncatch_up = "all"\ncatch_up_limit = 0', "", "0"),
    ("group", 'every = "1s"\npayload = 1\ngroup = "x"', "group", "needs a group column"),
    ("slot", 'every = "1s"\npayload = 1\nslot_column = "slot"', "slot_column", "other_columns"),
    ("key", 'every = "1s"\npayload = 1\ncorn = "x"', "corn", "unknown key"),
]


@pytest.mark.parametrize(("body", "key", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_a_bad_schedule_is_one_line_from_render(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], body: str, key: str, words: str
) -> None:
    path = write(tmp_path, body)
    with pytest.raises(DeclarationError) as info:
        render_declaration(load_declaration(path))
    assert f"schedules.nightly.{key}" in info.value.key
    assert words in str(info.value) and "fix:" in str(info.value)
    capsys.readouterr()
    assert main(["render", "--config", str(path), "--stdout"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("qgen: ") and "schedules.nightly" in err


def test_a_good_schedule_is_in_the_sealed_header(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        'cron = "0 3 * * *"\ntimezone = "Europe/Paris"\npayload = { kind = "nightly" }\n'
        'slot_column = "slot"\n',
        others='other_columns = ["slot"]',
    )
    files = render_declaration(load_declaration(path))
    text = files[Path("sql/postgres/reports.sql")]
    assert '-- schedule_table: "reports_queue_schedules"' in text
    assert '"nightly": {"cron": "0 3 * * *", "timezone": "Europe/Paris"' in text
    header = runtime.contract.rendered.parse_rendered(text).header
    (nightly,) = header.schedules
    assert (nightly.catch_up, nightly.payload, nightly.slot_column) == (
        "latest",
        {"kind": "nightly"},
        "slot",
    )
    for name in ("schedule_now", "schedule_state", "schedule_start", "schedule_fire"):
        assert f"-- name: {name}\n" in text


# ---------------------------------------------------------------- slots, pure


def cron(expr: str, tz: str = "UTC", **kw: Any) -> Schedule:
    return parse_schedule("s", {"cron": expr, "timezone": tz, "payload": 1, **kw})


def every(spec: str, **kw: Any) -> Schedule:
    return parse_schedule("s", {"every": spec, "payload": 1, **kw})


def slots_between(s: Schedule, start: int, end: int) -> list[int]:
    out = []
    for slot in s.slots_after(start):
        if slot > end:
            break
        out.append(slot)
    return out


def test_every_slots_are_multiples_of_the_interval() -> None:
    assert slots_between(every("10s"), 95, 131) == [100, 110, 120, 130]
    assert every("5m").every_s == 300 and every("1d").every_s == 86_400


def test_spring_forward_a_slot_in_the_skipped_hour_fires_once_at_the_change() -> None:
    # Paris, 2025-03-30: 02:00 becomes 03:00; 02:30 does not exist that day
    s = cron("30 2 * * *", "Europe/Paris")
    got = slots_between(s, ts("2025-03-29T00:00:00+00:00"), ts("2025-03-31T12:00:00+00:00"))
    assert [slot_text(x) for x in got] == [
        "2025-03-29T01:30:00Z",  # 02:30 CET
        "2025-03-30T01:00:00Z",  # the change itself, 03:00 CEST (Debian cron's rule)
        "2025-03-31T00:30:00Z",  # 02:30 CEST
    ]


def test_fall_back_the_repeated_hour_fires_once() -> None:
    # Paris, 2025-10-26: 03:00 becomes 02:00 again; 02:30 happens twice
    s = cron("30 2 * * *", "Europe/Paris")
    got = slots_between(s, ts("2025-10-25T12:00:00+00:00"), ts("2025-10-27T12:00:00+00:00"))
    assert [slot_text(x) for x in got] == ["2025-10-26T00:30:00Z", "2025-10-27T01:30:00Z"]
    # finer than an hour: both passes are real instants, each fires once
    half = cron("*/30 * * * *", "Europe/Paris")
    got = slots_between(half, ts("2025-10-26T00:00:00+00:00"), ts("2025-10-26T02:00:00+00:00"))
    assert len(got) == 4 and len(set(got)) == 4


DST_DAYS = [("2025-03-29T12:00:00+00:00", "2025-03-31T00:00:00+00:00")]
DST_DAYS += [("2025-10-25T12:00:00+00:00", "2025-10-27T00:00:00+00:00")]


@settings(max_examples=60, deadline=None)
@given(
    expr=st.sampled_from(["30 2 * * *", "0 * * * *", "*/20 * * * *", "15 1-3 * * *"]),
    day=st.sampled_from(DST_DAYS),
    cuts=st.lists(st.integers(0, 36 * 3600), max_size=12),
)
def test_slots_read_in_pieces_are_the_slots_read_at_once(
    expr: str, day: tuple[str, str], cuts: list[int]
) -> None:
    """A scheduler reads slots from whatever horizon the table holds: any split of a span
    across a DST change gives the same slots, none twice."""
    s = cron(expr, "Europe/Paris")
    start, end = ts(day[0]), ts(day[1])
    whole = slots_between(s, start, end)
    pieces, horizon = [], start
    for cut in [*sorted(start + c for c in cuts if start + c < end), end]:
        pieces += slots_between(s, horizon, cut)
        horizon = cut
    assert pieces == whole


def test_catch_up_policies() -> None:
    start, now = 1000, 1030.4  # 30 one-second slots missed
    latest = plan(every("1s"), start, now)
    assert latest.fire == (1030,) and latest.horizon == 1030
    allof = plan(every("1s", catch_up="all", catch_up_limit=5), start, now)
    assert allof.fire == (1026, 1027, 1028, 1029, 1030) and allof.skipped >= 1
    assert plan(every("1s", catch_up="all", catch_up_limit=50), start, now).fire == tuple(
        range(1001, 1031)
    )
    late = plan(every("1h", catch_up="none"), 0, 3600 * 5 + 61)
    assert late.fire == () and late.horizon == 3600 * 5
    on_time = plan(every("1h", catch_up="none"), 0, 3600 * 5 + 59)
    assert on_time.fire == (3600 * 5,)
    assert plan(every("1s"), 1030, 1030.9) == plan(every("1s"), 1030, 1030.0)
    assert plan(every("1s"), 1030, 1030.9).horizon is None


def test_a_long_outage_costs_no_more_than_a_short_one() -> None:
    s = cron("* * * * * *")  # every second
    began = time.perf_counter()
    slots, more = due(s, 0, 40 * 86_400.0, 10)
    assert slots == list(range(40 * 86_400 - 9, 40 * 86_400 + 1)) and more
    assert time.perf_counter() - began < 1.0


# ---------------------------------------------------------------- on the engines


async def scheduled_queue(engine: Any, form: str, **schedule: Any) -> QueueUnderTest:
    spec = {"every": "1s", "payload": {"job": "tick"}, "slot_column": "slot"} | schedule
    return await make_queue(
        engine,
        form,
        columns=("attempt", "retry_after", "processed_at"),
        extra={"other_columns": ["slot"], "schedules": {"tick": spec}},
    )


async def fired_slots(qt: QueueUnderTest) -> list[str]:
    rows = await qt.sql(f"SELECT {qt.q('slot')} AS slot FROM {qt.q(qt.table)}")
    return sorted(str(r["slot"]) for r in rows)


@pytest.mark.parametrize("form", FORMS)
def test_racing_schedulers_fire_each_slot_once(engine: Any, form: str) -> None:
    """Four schedulers on their own connections, each deciding from the state it read (often
    stale), at clock readings that move on: every slot fires once, and the messages are
    claimable in the queue's form."""

    async def go() -> None:
        qt = await scheduled_queue(engine, form, catch_up="all", catch_up_limit=100)
        queue = qt.queue
        (schedule,) = queue.rendered.header.schedules
        conns = [await runtime.connect(qt.url) for _ in range(4)]
        try:
            start = await db_now(conns[0], queue)
            await _ready_states(conns[0], queue, start)
            horizon = int((await _states(conns[0], queue))["tick"]["horizon"])
            clock = float(horizon)
            rng = random.Random(7)
            fired: list[int] = []
            for _ in range(12):
                clock += rng.choice([0.4, 1.0, 2.5, 4.0])
                states = [(await _states(c, queue))["tick"] for c in conns]
                got = await asyncio.gather(
                    *(
                        fire(c, queue, schedule, s, clock)
                        for c, s in zip(conns, states, strict=True)
                    )
                )
                assert sum(1 for g in got if g) <= 1, got  # one scheduler per decision
                fired += [slot for g in got for slot in g]
            want = list(range(horizon + 1, int(clock) + 1))
            assert sorted(fired) == want
            assert await fired_slots(qt) == sorted(slot_text(s) for s in want)
            async with await runtime.connect(qt.url) as db:
                claimed = await form_for(queue).claim(db, 100, queue.default_group)
                assert len(claimed) == min(len(want), 100)
                payloads = {json.dumps(d.message.payload) for d in claimed}
                assert payloads == {'{"job": "tick"}'}
                await db.rollback()
        finally:
            for c in conns:
                await c.close()
            await qt.drop()

    run(go())


def test_pause_resume_and_status(engine: Any) -> None:
    async def go() -> None:
        qt = await scheduled_queue(engine, "lease")
        queue = qt.queue
        (schedule,) = queue.rendered.header.schedules
        try:
            (before,) = await status(qt.url, queue)
            assert before.horizon is None and not before.paused and before.next_slot
            assert await pause(qt.url, queue, "tick") is True
            assert await pause(qt.url, queue, "tick") is False
            async with await runtime.connect(qt.url) as db:
                state = (await _states(db, queue))["tick"]
                assert await fire(db, queue, schedule, state, state["horizon"] + 10.0) == ()
                (paused,) = await status(db, queue)
                assert paused.paused and paused.last_slot is None
                assert await resume(qt.url, queue, "tick") is True
                now = await db_now(db, queue)
                state = (await _states(db, queue))["tick"]
                assert int(state["horizon"]) >= int(now) - 1  # the paused slots never fire
                assert await fire(db, queue, schedule, state, now + 2) != ()
            (after,) = await status(qt.url, queue)
            assert not after.paused and after.last_slot is not None
            assert await fired_slots(qt) != []
            with pytest.raises(runtime.ConfigurationError, match="no schedule 'nope'"):
                await pause(qt.url, queue, "nope")
        finally:
            await qt.drop()

    run(go())


def test_a_missing_schedule_table_stops_the_scheduler_with_the_fix(engine: Any) -> None:
    async def go() -> None:
        qt = await scheduled_queue(engine, "lease")
        try:
            from support.engines import drop_tables

            await drop_tables(qt.url, qt.queue.rendered.header.schedule_table or "")
            with pytest.raises(runtime.ConfigurationError, match="qgen apply"):
                await asyncio.wait_for(Scheduler(qt.url, [qt.queue]).run(), 30)
        finally:
            await qt.drop()

    run(go())


def test_a_consumer_with_schedules_fires_and_handles_them(engine: Any) -> None:
    async def go() -> None:
        qt = await scheduled_queue(engine, "lease")
        seen: list[Any] = []

        async def handle(message: Any, ctx: Any) -> None:
            seen.append(message.payload)

        consumer = runtime.Consumer(qt.url, qt.queue, handle, schedules=True, concurrency=1)
        try:
            task = asyncio.create_task(consumer.run())
            deadline = time.monotonic() + 15
            while len(seen) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
            consumer.stop()
            await asyncio.wait_for(task, 30)
            assert seen[:2] == [{"job": "tick"}] * 2
            assert len(set(await fired_slots(qt))) == len(await fired_slots(qt))
        finally:
            await qt.drop()

    run(go())


def test_a_consumer_refuses_schedules_a_queue_does_not_declare(engine: Any) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            with pytest.raises(runtime.ConfigurationError, match="declare none"):
                runtime.Consumer(qt.url, qt.queue, lambda m, c: None, schedules=True)
        finally:
            await qt.drop()

    run(go())


# ---------------------------------------------------------------- processes, SIGKILL


def test_four_scheduler_processes_killed_and_restarted_fire_each_slot_once(
    engine: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Four processes run a one-second schedule (catch_up = "all"); one at a time is killed
    with SIGKILL and started again. Counted slot by slot from the table: none twice, none
    missed between the first and the last."""
    scale = int(request.config.getoption("--chaos-scale"))
    seconds = 5.0 * scale

    async def setup() -> QueueUnderTest:
        return await scheduled_queue(engine, "lease", catch_up="all", catch_up_limit=1000)

    qt = run(setup())
    path = tmp_path / "tick.sql"
    path.write_text(qt.text, encoding="utf-8")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}

    logs = tmp_path / "workers.log"

    def start() -> subprocess.Popen[str]:
        with logs.open("a") as log:
            return subprocess.Popen(
                [sys.executable, str(HERE / "schedule_worker.py"), str(path), qt.url],
                env=env,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )

    procs = [start() for _ in range(4)]
    kills = 0
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready", logs.read_text()
        rng = random.Random(11)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(rng.uniform(0.3, 0.9))
            i = rng.randrange(4)
            procs[i].kill()  # SIGKILL: mid-transaction or not, whatever it was doing
            procs[i].wait()
            procs[i] = start()
            kills += 1
        time.sleep(1.5)  # the survivors catch up with what the killed ones held
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    try:
        slots = run(fired_slots(qt))
        as_int = [int(datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()) for s in slots]
        print(logs.read_text()[-3000:])
        assert len(as_int) == len(set(as_int)), "a slot fired twice"
        assert as_int == list(range(as_int[0], as_int[-1] + 1)), "a slot was missed"
        # liveness, loosely (a loaded machine restarts processes slowly): exactness is above
        assert len(as_int) >= 2 and kills >= 3
        print(f"\n{engine.name}: {len(as_int)} slots, {kills} SIGKILLs, none twice, none missed")
    finally:
        run(qt.drop())


def test_list_pause_and_resume_from_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, 'every = "1h"\npayload = 1\n', columns='group = "queue"\n', others="")
    text = path.read_text().replace('"postgres", "mysql", "mariadb", ', "")
    path.write_text(text + '\n[queues.other]\ntable = "other_queue"\n')
    assert main(["render", "--config", str(path)]) == 0
    url = f"sqlite:///{tmp_path / 'q.db'}?mode=rwc"
    assert main(["apply", "--config", str(path), "--db", url]) == 0
    capsys.readouterr()
    assert main(["schedules", "pause", "nightly", "--config", str(path), "--db", url]) == 0
    assert capsys.readouterr().out.strip() == "reports.nightly: paused"
    assert main(["schedules", "list", "--config", str(path), "--db", url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == [
        "schedule",
        "every",
        "timezone",
        "catch_up",
        "next_slot",
        "last_slot",
        "paused",
    ]
    assert out[1].split()[0] == "reports.nightly" and out[1].split()[-1] == "yes"
    assert main(["schedules", "resume", "reports.nightly", "--config", str(path), "--db", url]) == 0
    assert capsys.readouterr().out.strip() == "reports.nightly: resumed"
    assert main(["schedules", "pause", "nope", "--config", str(path), "--db", url]) == 2
    assert "no queue has it" in capsys.readouterr().err
