"""Chaos: consumers killed, their backends terminated, the network cut, and nothing lost.

One scenario per engine (PostgreSQL, MariaDB), claim form and mode (plain, transactional).
Consumer processes (tests/support/chaos_worker.py, three workers each) reach the database through
a TCP proxy (tests/support/tcp_proxy.py) while the test, at random moments:

* kills a consumer process with SIGKILL and starts another in its place;
* terminates some of the consumers' own server sessions from a separate admin connection
  (``pg_terminate_backend`` / ``KILL``); they are picked by the client port the server shows
  for them, which is one of the proxy's own upstream ports, so no other session is touched;
* cuts the network for two seconds (every connection dropped, new ones refused).

Then it stops the chaos and checks, counted from the tables:

* lost 0: every message is acked (processed_at set) once the chaos stops;
* stuck 0: they are all acked within lease_s + 30 s of that (no row held past its lease);
* transactional: the handler's side-table write committed exactly once per message.

Each scenario reports a line (in the terminal summary, under "chaos scenarios") with its
duplicate-delivery rate: deliveries beyond the first, per message. ``--chaos-scale=N`` (or
``QGEN_CHAOS_SCALE=N``) runs N times the messages, kills and outages.

Two more, every form at once, each with its line per form (messages, handled twice, settled
twice, lost, stuck, time to recover):

* failover (``test_chaos_failover``): a PostgreSQL primary and its synchronous standby of
  the test's own (tests/support/pg_cluster.py); consumer processes drain through a URL naming both,
  and mid-drain the primary stops and the standby is promoted. Leases last 60 s, yet every
  message is acked within FAILOVER_RECOVER_S of the promotion, none acked before it is
  delivered again;
* poison (``test_chaos_poison``, PostgreSQL and MariaDB): among ordinary messages some kill
  their handler's process, some terminate its session; each goes to the dead letter after
  at most max_attempts deliveries, every other message is settled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from support.engines import Engine, engine_for, run, unique_table
from support.pg_cluster import PrivatePostgres, sync_replication
from support.queues import QueueUnderTest, make_queue
from support.tcp_proxy import TcpProxy

import runtime

pytestmark = pytest.mark.chaos

WORKER = Path(__file__).resolve().parents[1] / "support" / "chaos_worker.py"
REPO = Path(__file__).resolve().parents[2]
LEASE_S = 2
#: messages per scenario at scale 1
MESSAGES = 90
PROCESSES = 2


@dataclass
class Tally:
    kills: int = 0
    backend_kills: int = 0
    outages: int = 0
    spawned: int = 0
    logs: list[Path] = field(default_factory=list)


class Workers:
    """The consumer processes of one scenario."""

    def __init__(self, url: str, rendered: Path, side: str, transactional: bool, tmp: Path):
        self.args = [url, str(rendered), side, "1" if transactional else "0"]
        self.tmp = tmp
        self.procs: list[subprocess.Popen[bytes]] = []
        self.tally = Tally()
        self.env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        }

    def spawn(self) -> None:
        i = self.tally.spawned
        self.tally.spawned += 1
        log = self.tmp / f"deliveries-{i}.txt"
        self.tally.logs.append(log)
        self.procs.append(
            subprocess.Popen(
                [sys.executable, str(WORKER), *self.args, str(log), str(i)],
                stdout=subprocess.DEVNULL,
                stderr=open(self.tmp / f"stderr-{i}.txt", "wb"),  # noqa: SIM115
                env=self.env,
            )
        )

    def kill_one(self, rng: random.Random) -> None:
        alive = [p for p in self.procs if p.poll() is None]
        if alive:
            victim = rng.choice(alive)
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            self.tally.kills += 1
        self.spawn()

    def died(self) -> list[str]:
        """What the processes that ended on their own said (none should)."""
        out = []
        for i, p in enumerate(self.procs):
            if p.poll() is not None and p.returncode != -signal.SIGKILL:
                out.append(f"worker {i} exited {p.returncode}: {self.stderr(i)[-2000:]}")
        return out

    def stderr(self, i: int) -> str:
        return (self.tmp / f"stderr-{i}.txt").read_text(errors="replace")

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()

    def respawn(self) -> None:
        """Start a process in place of each that killed itself (a poison message)."""
        for i, p in enumerate(self.procs):
            if p.returncode is None and p.poll() is not None:
                assert p.returncode == -signal.SIGKILL, self.stderr(i)[-2000:]
                self.tally.kills += 1
                self.spawn()

    def _lines(self, log: Path) -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    def marks(self) -> list[int]:
        """How many lines each log has now (``deliveries(since=…)``)."""
        return [len(self._lines(log)) for log in self.tally.logs]

    def deliveries(self, since: list[int] | None = None) -> list[int]:
        """The numbers of the messages handed to a handler (after ``since``'s marks)."""
        out = []
        for i, log in enumerate(self.tally.logs):
            skip = since[i] if since is not None and i < len(since) else 0
            for line in self._lines(log)[skip:]:
                if line.strip().isdigit():
                    out.append(int(line))
        return out

    def settled_twice(self) -> int:
        """Final settlements (not a retry) the consumers counted beyond one per message
        (their ``s <id> <outcome>`` lines)."""
        ids = [
            words[1]
            for log in self.tally.logs
            for words in map(str.split, self._lines(log))
            if len(words) == 3 and words[0] == "s" and words[2] not in ("retry", "retry_after")
        ]
        return len(ids) - len(set(ids))


async def _kill_backends(
    engine: Engine, admin: runtime.Connection, ports: set[int], k: int, rng: random.Random
) -> int:
    """Terminate up to ``k`` of the sessions that came through the proxy (and only those)."""
    if not ports:
        return 0
    if engine.name == "postgres":
        rows = await admin.fetchall(
            "SELECT pid AS id FROM pg_stat_activity WHERE client_addr = '127.0.0.1' "
            "AND client_port = ANY(%(ports)s) AND pid <> pg_backend_pid()",
            {"ports": sorted(ports)},
        )
        ids = [r["id"] for r in rows]
    else:
        rows = await admin.fetchall(
            "SELECT ID AS id, HOST AS host FROM information_schema.PROCESSLIST"
        )
        ids = [
            r["id"]
            for r in rows
            if str(r["host"]).rsplit(":", 1)[0] in ("127.0.0.1", "localhost")
            and str(r["host"]).rsplit(":", 1)[-1].isdigit()
            and int(str(r["host"]).rsplit(":", 1)[-1]) in ports
        ]
    killed = 0
    for sid in rng.sample(sorted(ids), min(k, len(ids))):
        try:
            if engine.name == "postgres":
                await admin.fetchone("SELECT pg_terminate_backend(%(pid)s) AS ok", {"pid": sid})
            else:
                await admin.execute(f"KILL {int(sid)}")
            killed += 1
        except Exception:  # the session ended by itself in between
            pass
    return killed


async def _acked(qt: QueueUnderTest) -> int:
    (row,) = await qt.sql(
        f"SELECT COUNT(*) AS n FROM {qt.q(qt.table)} WHERE {qt.col('processed_at')} IS NOT NULL"
    )
    return int(row["n"])


async def _scenario(
    engine: Engine, form: str, transactional: bool, scale: int, seed: int, tmp: Path
) -> str:
    rng = random.Random(seed)
    n = MESSAGES * scale
    qt = await make_queue(engine, form, lease_s=LEASE_S)
    side = unique_table("chs")
    q = qt.q
    rendered = tmp / "queue.sql"
    rendered.write_text(qt.text, encoding="utf-8")
    await qt.sql(f"CREATE TABLE {q(side)} (n INTEGER NOT NULL, msg_id BIGINT NOT NULL)")
    proxy = TcpProxy(engine.url).start()
    url = proxy.url + "?connect_timeout=2"
    workers = Workers(url, rendered, side if transactional else "-", transactional, tmp)
    admin = await runtime.connect(engine.url)
    try:
        async with await runtime.connect(qt.url) as db:
            await db.begin()
            await qt.queue.enqueue_many(db, [{"n": i} for i in range(n)])
            await db.commit()
        for _ in range(PROCESSES):
            workers.spawn()
        tally = workers.tally

        # the chaos: kills of processes and backends at random moments, `scale` outages
        outages_due = scale
        chaos_until = time.monotonic() + 60 * scale
        while time.monotonic() < chaos_until:
            await asyncio.sleep(rng.uniform(0.2, 0.6))
            assert not workers.died(), workers.died()
            done = await _acked(qt)
            if done >= n * 0.9 and tally.kills and tally.backend_kills and not outages_due:
                break
            if outages_due and done >= n * (scale - outages_due + 0.5) / (scale + 1):
                proxy.outage(2)
                outages_due -= 1
                tally.outages += 1
                await asyncio.sleep(2)
            elif rng.random() < 0.4:
                workers.kill_one(rng)
            else:
                tally.backend_kills += await _kill_backends(
                    engine, admin, proxy.upstream_ports(), rng.randint(1, 3), rng
                )
        calm_at = time.monotonic()

        # calm: every message must be acked within a lease (plus slack) of the last chaos
        while (done := await _acked(qt)) < n and time.monotonic() < calm_at + LEASE_S + 30:
            assert not workers.died(), workers.died()
            await asyncio.sleep(0.2)
        workers.stop()

        rows = await qt.rows()
        assert len(rows) == n, f"{n - len(rows)} messages vanished"
        unacked = [r["payload"]["n"] for r in rows if r["processed_at"] is None]
        held = [r["payload"]["n"] for r in rows if r.get("locked_until_future")]
        lost = stuck = len(unacked)
        assert not unacked, (
            f"not acked within {LEASE_S + 30}s of the chaos ending: {unacked} (of them with a "
            f"lease still in the future: {held}); worker stderr: "
            + " | ".join(workers.stderr(i)[-500:] for i in range(tally.spawned))
        )
        effects = "effects n/a"
        if transactional:
            per_n = await qt.sql(f"SELECT n, COUNT(*) AS c FROM {q(side)} GROUP BY n")
            counted = {int(r["n"]): int(r["c"]) for r in per_n}
            twice = {k: c for k, c in counted.items() if c != 1}
            missing = sorted(set(range(n)) - set(counted))
            assert not twice and not missing, f"effects twice: {twice}; missing: {missing}"
            effects = "effects exactly-once"
        deliveries = workers.deliveries()
        seen = set(deliveries)
        # a delivery whose log line a SIGKILL cut short is not counted, so `seen` may miss a
        # message acked by a delivery killed right after its COMMIT: only the table counts
        dup_rate = (len(deliveries) - len(seen)) / n
        mode = "transactional" if transactional else "plain"
        return (
            f"chaos {engine.name} {form} {mode}: {n} msgs, {tally.kills} kills, "
            f"{tally.backend_kills} backend kills, {tally.outages} outage"
            f"{'s' if tally.outages != 1 else ''}, dup rate {dup_rate:.1%}, lost {lost}, "
            f"stuck {stuck}, {effects}"
        )
    finally:
        workers.stop()
        proxy.close()
        await admin.close()
        await qt.sql(f"DROP TABLE IF EXISTS {q(side)}")
        await qt.drop()


@pytest.mark.parametrize("transactional", [False, True], ids=["plain", "transactional"])
@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
@pytest.mark.parametrize(
    "engine_name", [pytest.param(e, marks=pytest.mark.engine(e)) for e in ("postgres", "mariadb")]
)
def test_chaos(engine_name: str, form: str, transactional: bool, tmp_path: Path, request) -> None:
    engine = engine_for(engine_name, tmp_path)
    scale = max(1, int(request.config.getoption("--chaos-scale")))
    seed = int(os.environ.get("QGEN_CHAOS_SEED", random.randrange(1 << 30)))
    try:
        line = run(_scenario(engine, form, transactional, scale, seed, tmp_path))
    except AssertionError as exc:
        raise AssertionError(f"[rerun with QGEN_CHAOS_SEED={seed}] {exc}") from None
    request.node.user_properties.append(("summary:chaos scenarios", line))


# ---------------------------------------------------- failover and poison, every form

FORMS = ["row_lock", "lease", "advisory"]
#: messages per form at scale 1, and the lease: a row left to wait out its lease stalls 60 s
FAILOVER_MESSAGES = 100
FAILOVER_LEASE_S = 60
#: every message acked within this many seconds of the promotion
FAILOVER_RECOVER_S = 30
#: messages per scenario at scale 1, of which poison: POISONS of each kind
POISON_MESSAGES = 100
POISONS = 1
MAX_ATTEMPTS = 3


async def _done(qt: QueueUnderTest) -> set[int] | None:
    """The numbers of the messages acked so far; None while no writable server answers."""
    try:
        rows = await qt.rows()
    except runtime.ConnectionLost:
        return None
    return {r["payload"]["n"] for r in rows if r["processed_at"] is not None}


def _line(kind: str, what: str, n: int, workers: Workers, counted: dict[str, object]) -> str:
    """A scenario's summary line: messages, handled twice (deliveries beyond the first),
    settled twice, lost, stuck, time to recover, then what else it counted."""
    deliveries = workers.deliveries()
    figures = {
        "handled twice": len(deliveries) - len(set(deliveries)),
        "settled twice": workers.settled_twice(),
        **counted,
    }
    return f"{kind} {what}: {n} msgs, " + ", ".join(f"{k} {v}" for k, v in figures.items())


async def _consumers_up(admin: runtime.Connection) -> None:
    """Wait (up to 60 s) for every consumer's sessions: three workers and a listener per
    process, per form."""
    deadline = time.monotonic() + 60
    while True:
        row = await admin.fetchone(
            "SELECT COUNT(*) AS n FROM pg_stat_activity WHERE backend_type = "
            "'client backend' AND pid <> pg_backend_pid()"
        )
        if row is not None and row["n"] >= len(FORMS) * PROCESSES * 4:
            return
        assert time.monotonic() < deadline, f"consumers not up: {row}"
        await asyncio.sleep(0.1)


async def _failover_line(
    form: str,
    qt: QueueUnderTest,
    w: Workers,
    n: int,
    mark: list[int],
    acked_before: set[int],
    recovered: float | None,
) -> str:
    """One form's summary line, after asserting every message was acked after the promotion
    and none acked before it was delivered again."""
    rows = await qt.rows()
    unacked = sorted(r["payload"]["n"] for r in rows if r["processed_at"] is None)
    again = sorted(set(w.deliveries(since=mark)) & acked_before)
    line = _line(
        "failover",
        f"postgres {form}",
        n,
        w,
        {
            "lost": n - len(rows) + len(unacked),
            "stuck": len(unacked),
            "acked then delivered again": len(again),
            "time to recover": f"{recovered:.1f} s" if recovered is not None else "-",
        },
    )
    assert len(rows) == n and not unacked, (
        f"{line}; not acked within {FAILOVER_RECOVER_S} s of the promotion: {unacked}"
    )
    assert not again, f"{line}: acked before the failover, delivered again: {again}"
    return line


async def _failover_scenario(
    engine: Engine, primary: PrivatePostgres, standby: PrivatePostgres, scale: int, tmp: Path
) -> list[str]:
    """Every form drains its queue through a multi-host URL (two consumer processes each);
    a third of the way through, the primary stops and the standby is promoted."""
    n = FAILOVER_MESSAGES * scale
    queues: dict[str, QueueUnderTest] = {}
    workers: dict[str, Workers] = {}
    loop = asyncio.get_running_loop()
    try:
        for form in FORMS:
            qt = queues[form] = await make_queue(engine, form, lease_s=FAILOVER_LEASE_S)
            (tmp / form).mkdir()
            rendered = tmp / form / "queue.sql"
            rendered.write_text(qt.text, encoding="utf-8")
            workers[form] = Workers(engine.url, rendered, "-", False, tmp / form)
            for _ in range(PROCESSES):
                workers[form].spawn()
        # every consumer up (three workers and a listener per process), then the messages:
        # the forms drain side by side, so the failover comes in the middle of each
        async with await runtime.connect(engine.url) as admin:
            await _consumers_up(admin)
            for qt in queues.values():
                await admin.begin()
                await qt.queue.enqueue_many(admin, [{"n": i} for i in range(n)])
                await admin.commit()
        deadline = time.monotonic() + 60 * scale
        while True:
            done = {form: await _done(qt) or set() for form, qt in queues.items()}
            if all(len(d) >= n // 3 for d in done.values()):
                break
            for w in workers.values():
                assert not w.died(), w.died()
            assert time.monotonic() < deadline, {f: len(d) for f, d in done.items()}
            await asyncio.sleep(0.1)
        # acked on the primary, so on the synchronous standby: never to be delivered again
        acked_before = done
        marks = {form: w.marks() for form, w in workers.items()}
        await loop.run_in_executor(None, primary.ctl, "stop", "-m", "fast")
        await loop.run_in_executor(None, standby.ctl, "promote")
        promoted = time.monotonic()
        recovered: dict[str, float] = {}
        while len(recovered) < len(FORMS) and time.monotonic() < promoted + FAILOVER_RECOVER_S:
            for form, qt in queues.items():
                if form not in recovered and len(await _done(qt) or ()) == n:
                    recovered[form] = time.monotonic() - promoted
            for w in workers.values():
                assert not w.died(), w.died()
            await asyncio.sleep(0.1)
        for w in workers.values():
            w.stop()
        return [
            await _failover_line(
                form, qt, workers[form], n, marks[form], acked_before[form], recovered.get(form)
            )
            for form, qt in queues.items()
        ]
    finally:
        for w in workers.values():
            w.stop()
        for qt in queues.values():
            with contextlib.suppress(Exception):
                await qt.drop()


def test_chaos_failover(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A PostgreSQL failover mid-drain, every form at once: a primary and its synchronous
    standby of the test's own (tests/support/pg_cluster.py). Nothing lost, nothing acked before the
    failover delivered again, and every message acked within FAILOVER_RECOVER_S of the
    promotion although leases last 60 s (a lease worker settles or gives back the rows its
    lost connection held once the new primary answers)."""
    scale = max(1, int(request.config.getoption("--chaos-scale")))
    primary: PrivatePostgres | None = None
    standby: PrivatePostgres | None = None
    try:
        primary = PrivatePostgres(name="primary")
        standby = PrivatePostgres(standby_of=primary, name="standby")
        run(sync_replication(primary, "standby"))
        url = f"postgresql://postgres@{primary.host},{standby.host}/postgres?connect_timeout=2"
        engine = Engine(name="postgres", url=url, dialect_name="postgres")
        lines = run(_failover_scenario(engine, primary, standby, scale, tmp_path))
    finally:
        for cluster in (standby, primary):
            if cluster is not None:
                cluster.close()
    for line in lines:
        request.node.user_properties.append(("summary:chaos scenarios", line))


async def _poison_scenario(
    engine: Engine, form: str, scale: int, rng: random.Random, tmp: Path
) -> str:
    """Two consumer processes drain a queue in which some messages kill their handler's
    process and some terminate its worker's session (then raise), at every delivery."""
    n = POISON_MESSAGES * scale
    kinds = ["process", "backend"] * (POISONS * scale)
    poison = dict(zip(rng.sample(range(n), len(kinds)), kinds, strict=True))
    qt = await make_queue(engine, form, dead="table", max_attempts=MAX_ATTEMPTS, lease_s=LEASE_S)
    rendered = tmp / "queue.sql"
    rendered.write_text(qt.text, encoding="utf-8")
    workers = Workers(engine.url, rendered, "-", False, tmp)
    try:
        async with await runtime.connect(qt.url) as db:
            await db.begin()
            await qt.queue.enqueue_many(
                db, [{"n": i, **({"poison": poison[i]} if i in poison else {})} for i in range(n)]
            )
            await db.commit()
        started = time.monotonic()
        for _ in range(PROCESSES):
            workers.spawn()
        deadline = started + 60 * scale
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            workers.respawn()
            assert not workers.died(), workers.died()
            acked = await _done(qt) or set()
            if len(acked) + len(await qt.dead_rows()) >= n:
                break
        took = time.monotonic() - started
        workers.stop()
        rows = await qt.rows()
        dead = {r["payload"]["n"] for r in await qt.dead_rows()}
        acked = {r["payload"]["n"] for r in rows if r["processed_at"] is not None}
        unsettled = sorted(r["payload"]["n"] for r in rows if r["processed_at"] is None)
        deliveries = workers.deliveries()
        innocent_dead = sorted(dead - set(poison))
        line = _line(
            "poison",
            f"{engine.name} {form}",
            n,
            workers,
            {
                "lost": n - len(acked) - len(dead),
                "stuck": len(unsettled),
                "time to recover": f"{took:.1f} s",
                "poison": len(poison),
                "poison deliveries": sum(deliveries.count(i) for i in poison),
                "process kills": workers.tally.kills,
                "innocent dead": len(innocent_dead),
            },
        )
        assert not unsettled and len(acked) + len(dead) == n, f"{line}: unsettled {unsettled}"
        assert set(poison) <= dead, f"{line}: poison not dead: {sorted(set(poison) - dead)}"
        # each poison message is delivered at most max_attempts times, then dead unhandled
        assert all(deliveries.count(i) <= MAX_ATTEMPTS for i in poison), line
        return line
    finally:
        workers.stop()
        await qt.drop()


@pytest.mark.parametrize(
    "engine_name", [pytest.param(e, marks=pytest.mark.engine(e)) for e in ("postgres", "mariadb")]
)
def test_chaos_poison(engine_name: str, tmp_path: Path, request) -> None:
    """Poison messages among ordinary ones, every form at once (a queue and two consumer
    processes each): each poison message goes to the dead letter after at most
    max_attempts deliveries; every other message is settled, none lost or stuck. A message
    claimed in the same batch as a poison message that kills its process is counted too
    (its delivery never settled): the line reports those sent to the dead letter with it."""
    engine = engine_for(engine_name, tmp_path)
    scale = max(1, int(request.config.getoption("--chaos-scale")))
    seed = int(os.environ.get("QGEN_CHAOS_SEED", random.randrange(1 << 30)))

    async def every_form() -> list[str | BaseException]:
        for form in FORMS:
            (tmp_path / form).mkdir()
        return await asyncio.gather(
            *(
                _poison_scenario(engine, form, scale, random.Random(seed + i), tmp_path / form)
                for i, form in enumerate(FORMS)
            ),
            return_exceptions=True,
        )

    results = run(every_form())
    for result in results:
        if isinstance(result, str):
            request.node.user_properties.append(("summary:chaos scenarios", result))
    for result in results:
        if isinstance(result, AssertionError):
            raise AssertionError(f"[rerun with QGEN_CHAOS_SEED={seed}] {result}") from None
        if isinstance(result, BaseException):
            raise result
