"""The bench's shared pieces: settings, the samples each contender collects, progress."""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass, field

from bench.counting import Tally

#: runtime/raw at least this, by engine: the runtime close to its bare driver
RATIO_TARGETS = {"postgres": 0.9, "mariadb": 0.9, "sqlite": 0.8}
#: × PgQueuer (ack) at least this on PostgreSQL, by (form, batch); when every message fails
#: once, at least PGQ_RETRY_TARGET in every form
PGQ_TARGETS = {
    ("row_lock", 10): 3.0,
    ("row_lock", 100): 4.0,
    ("lease", 10): 3.0,
    ("lease", 100): 4.0,
    ("advisory", 10): 2.5,
    ("advisory", 100): 3.5,
}
PGQ_RETRY_TARGET = 5.0
#: after a failed drain, how long the consumer's other workers get to finish their batches
STRAGGLER_WAIT_S = 2.0
SQLITE_FACTOR = 4
DEPTH_TARGET = 1.2


# ----------------------------------------------------------------- progress


class Progress:
    """One stderr line, rewritten in place on a terminal (one line per step otherwise)."""

    def __init__(self, total: int) -> None:
        self.total = max(total, 1)
        self.done = 0
        self.t0 = time.perf_counter()
        self.tty = sys.stderr.isatty()
        #: the 1-minute load average at every step: other work on the machine shows here
        self.loads: list[float] = []

    def __call__(self, label: str, advance: bool = True) -> None:
        self.loads.append(os.getloadavg()[0])
        if advance:
            self.done = min(self.done + 1, self.total)
        width = 24
        filled = int(width * self.done / self.total)
        bar = "#" * filled + "." * (width - filled)
        line = f"[{bar}] {self.done:3d}/{self.total} {time.perf_counter() - self.t0:6.1f}s {label}"
        if self.tty:
            sys.stderr.write("\r\x1b[2K" + line[:150])
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def finish(self) -> None:
        if self.tty:
            sys.stderr.write("\r\x1b[2K")
            sys.stderr.flush()


# ------------------------------------------------------------------ results


@dataclass
class Side:
    """One contender's samples for one scenario: rates per repeat and what it sent."""

    #: drain rate per repeat (a repeat whose run failed has none)
    by_rep: dict[int, float] = field(default_factory=dict)
    enqueue_rates: list[float] = field(default_factory=list)
    tally: Tally = field(default_factory=Tally)
    messages: int = 0
    cpu_s: float = 0.0
    peak_bytes: int | None = None
    #: PgQueuer only: the rate by wall time, its drain-mode shutdown included
    wall_rates: list[float] = field(default_factory=list)

    def per_msg(self, what: str) -> float | None:
        if not self.messages:
            return None
        if what == "cpu_us":
            return self.cpu_s / self.messages * 1e6
        return float(getattr(self.tally, what)) / self.messages

    @property
    def rates(self) -> list[float]:
        return list(self.by_rep.values())

    def add(
        self,
        rep: int,
        messages: int,
        enqueue_s: float | None,
        drain_s: float,
        cpu_s: float,
        tally: Tally,
    ) -> None:
        if enqueue_s is not None:
            self.enqueue_rates.append(messages / enqueue_s)
        self.by_rep[rep] = messages / drain_s
        self.tally += tally
        self.messages += messages
        self.cpu_s += cpu_s


@dataclass
class FormResult:
    engine: str
    form: str
    rt_ack: Side = field(default_factory=Side)
    raw_ack: Side = field(default_factory=Side)
    sync_ack: Side = field(default_factory=Side)
    rt_retry: Side = field(default_factory=Side)
    raw_retry: Side = field(default_factory=Side)
    problems: list[str] = field(default_factory=list)
    skipped: str = ""
    has_raw: bool = True
    #: rows per claim of this row's drains
    batch: int = 0

    def ratios(self, retry: bool = False, sync: bool = False) -> list[float]:
        """runtime/raw per repeat (each repeat's runs ran back to back)."""
        if sync:
            rt, rw = self.rt_ack, self.sync_ack
        else:
            rt, rw = (self.rt_retry, self.raw_retry) if retry else (self.rt_ack, self.raw_ack)
        return [rt.by_rep[k] / rw.by_rep[k] for k in rt.by_rep if rw.by_rep.get(k)]


@dataclass
class Settings:
    messages: int
    repeats: int
    concurrency: int
    #: rows per claim of this pass (the bench runs one pass per value of ``batches``)
    batch: int
    depth_small: int
    depth_big: int
    claim_repeats: int
    claim_budget_s: float
    quick: bool
    batches: tuple[int, ...] = ()

    def messages_for(self, engine: str) -> int:
        """SQLite drains a few thousand a second: it gets more messages, or noise wins."""
        return self.messages * SQLITE_FACTOR if engine == "sqlite" else self.messages


#: the speed probe's size: a pure-Python loop of this many additions (about 0.15 s here)
SPEED_PROBE_ADDS = 5_000_000


def speed_probe() -> float:
    """Seconds a pure-Python loop of ``SPEED_PROBE_ADDS`` additions takes now: how fast the machine runs
    Python at this moment (lower is faster). A VM's CPU is not always as fast, so the bench
    prints it before and after a run: two runs' rates compare only at alike speeds."""
    t0 = time.perf_counter()
    total = 0
    for i in range(SPEED_PROBE_ADDS):
        total += i
    return time.perf_counter() - t0


def cpu_seconds() -> float:
    """CPU time of this process, every thread included (the aiosqlite/PyMySQL threads too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
