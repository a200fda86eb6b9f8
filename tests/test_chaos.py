"""Chaos: consumers killed, their backends terminated, the network cut, and nothing lost.

One scenario per engine (PostgreSQL, MariaDB), claim form and mode (plain, transactional).
Consumer processes (tests/chaos_worker.py, three workers each) reach the database through
a TCP proxy (tests/tcp_proxy.py) while the test, at random moments:

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
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from engines import Engine, engine_for, run, unique_table
from queues import QueueUnderTest, make_queue
from tcp_proxy import TcpProxy

import runtime

pytestmark = pytest.mark.chaos

WORKER = Path(__file__).resolve().parent / "chaos_worker.py"
REPO = Path(__file__).resolve().parent.parent
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

    def deliveries(self) -> list[int]:
        out = []
        for log in self.tally.logs:
            if log.exists():
                for line in log.read_text().splitlines():
                    if line.strip().isdigit():
                        out.append(int(line))
        return out


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
