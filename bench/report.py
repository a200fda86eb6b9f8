"""The bench's report: the throughput, cost and depth tables, the machine, the targets and the
``overall:`` line."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import statistics
from pathlib import Path

from bench import depth as depth_mod
from bench import pgq
from bench.queues import (
    Engine,
)
from bench.results import (
    DEPTH_TARGET,
    PGQ_RETRY_TARGET,
    PGQ_TARGETS,
    RATIO_TARGETS,
    SPEED_PROBE_ADDS,
    FormResult,
    Settings,
    Side,
)
from runtime.drivers.base import Connection

# ------------------------------------------------------------------ formatting


def fmt_rate(values: list[float]) -> str:
    if not values:
        return "—"
    med = statistics.median(values)
    return f"{med:,.0f} ({min(values):,.0f}–{max(values):,.0f})"


def fmt_ratio(values: list[float], target: float | None = None) -> str:
    """Median (min–max); `` !`` when the median is below ``target``."""
    if not values:
        return "—"
    med = statistics.median(values)
    flag = " !" if target is not None and med < target else ""
    return f"{med:.2f} ({min(values):.2f}–{max(values):.2f}){flag}"


def fmt_per(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def fmt_kib(value: int | None) -> str:
    return "—" if value is None else f"{value / 1024:,.0f}"


def table(headers: list[str], rows: list[list[str]], left: int = 3) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]

    def line(cells: list[str]) -> str:
        out = []
        for i, c in enumerate(cells):
            out.append(c.ljust(widths[i]) if i < left else c.rjust(widths[i]))
        return "  ".join(out).rstrip()

    sep = "  ".join("-" * w for w in widths)
    return "\n".join([line(headers), sep, *(line(r) for r in rows)])


def throughput_table(results: list[FormResult]) -> str:
    rows = []
    for r in results:
        if r.skipped:
            rows.append([r.engine, r.form, str(r.batch or ""), f"skipped: {r.skipped}"] + [""] * 7)
            continue
        sync = bool(r.sync_ack.rates)
        rows.append(
            [
                r.engine,
                r.form,
                str(r.batch),
                fmt_rate(r.rt_ack.rates),
                fmt_rate(r.raw_ack.rates),
                fmt_ratio(r.ratios(), RATIO_TARGETS.get(r.engine)) if r.has_raw else "—",
                fmt_rate(r.sync_ack.rates),
                fmt_ratio(r.ratios(sync=True)) if sync else "—",
                fmt_rate(r.rt_retry.rates),
                fmt_rate(r.raw_retry.rates),
                fmt_ratio(r.ratios(retry=True), RATIO_TARGETS.get(r.engine)) if r.has_raw else "—",
            ]
        )
    return table(
        [
            "engine",
            "form",
            "batch",
            "runtime ack",
            "raw ack",
            "runtime/raw",
            "sync ack",
            "runtime/sync",
            "runtime retry-once",
            "raw retry-once",
            "runtime/raw",
        ],
        rows,
    )


def cost_table(results: list[FormResult]) -> str:
    rows = []
    for r in results:
        if r.skipped:
            continue

        def pair(a: Side, b: Side, what: str, has_raw: bool = r.has_raw) -> str:
            return f"{fmt_per(a.per_msg(what))} / {fmt_per(b.per_msg(what)) if has_raw else '—'}"

        def cpu(a: Side, b: Side, c: Side) -> str:
            vals = [a.per_msg("cpu_us"), b.per_msg("cpu_us"), c.per_msg("cpu_us")]
            return " / ".join("—" if v is None else f"{v:,.0f}" for v in vals)

        rows.append(
            [
                r.engine,
                r.form,
                str(r.batch),
                fmt_rate(r.rt_ack.enqueue_rates),
                fmt_rate(r.raw_ack.enqueue_rates) if r.has_raw else "—",
                pair(r.rt_ack, r.raw_ack, "statements"),
                pair(r.rt_ack, r.raw_ack, "commits"),
                pair(r.rt_retry, r.raw_retry, "statements"),
                pair(r.rt_retry, r.raw_retry, "commits"),
                cpu(r.rt_ack, r.raw_ack, r.sync_ack),
                f"{fmt_kib(r.rt_ack.peak_bytes)} / {fmt_kib(r.raw_ack.peak_bytes)}",
            ]
        )
    return table(
        [
            "engine",
            "form",
            "batch",
            "enqueue msg/s",
            "raw enqueue msg/s",
            "ack stmts/msg",
            "ack commits/msg",
            "retry stmts/msg",
            "retry commits/msg",
            "ack CPU µs/msg",
            "ack peak KiB",
        ],
        rows,
    )


def fmt_ms(t: depth_mod.ClaimTiming) -> str:
    return f"{t.median_ms:.3f} ({min(t.seconds) * 1e3:.3f}–{max(t.seconds) * 1e3:.3f})"


def depth_table(timings: list[depth_mod.ClaimTiming]) -> str:
    if not timings:
        return "(no depth results)"
    by_key = {(t.engine, t.form, t.case.name): t for t in timings}
    labels = {t.case.name: t.case.label for t in timings}
    rows = []
    for t in timings:
        if t.case.name != "small":
            continue
        cells = [t.engine, t.form]
        for name in ("small", "big", "kept", "history", "ranked_small", "ranked"):
            x = by_key.get((t.engine, t.form, name))
            base = by_key.get((t.engine, t.form, depth_mod.BASE.get(name, "")))
            if x is None:
                cells.append("—")
            elif base is None:
                cells.append(fmt_ms(x))
            else:
                ratio = x.median_ms / base.median_ms
                flag = " !" if ratio > DEPTH_TARGET else ""
                cells.append(f"{fmt_ms(x)} ×{ratio:.2f}{flag}")
        hist = by_key.get((t.engine, t.form, "history"))
        big = by_key.get((t.engine, t.form, "big"))
        cells.append(big.access if big else "")
        cells.append(hist.access if hist else "")
        rows.append(cells)
    return table(
        ["engine", "form"]
        + [
            f"{labels.get(n, n)}"
            for n in ("small", "big", "kept", "history", "ranked_small", "ranked")
        ]
        + [f"reads ({labels.get('big')})", f"reads ({labels.get('history')})"],
        rows,
        left=2,
    )


def plans_text(timings: list[depth_mod.ClaimTiming]) -> str:
    out = []
    for t in timings:
        if t.case.name not in ("big", "history", "ranked"):
            continue
        out.append(f"{t.engine} {t.form} claim, {t.case.label}:")
        out += [f"    {ln}" for ln in t.plan]
    return "\n".join(out)


# --------------------------------------------------------------------- machine


def machine_lines(
    engines: list[Engine], loads: list[float], speed: tuple[float, float] | None = None
) -> list[str]:
    mem = "?"
    try:
        for ln in Path("/proc/meminfo").read_text().splitlines():
            if ln.startswith("MemTotal:"):
                mem = f"{int(ln.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    versions = []
    for dist in ("psycopg", "PyMySQL", "aiosqlite"):
        try:  # the installed distribution's version (pymysql.__version__ is a MySQLdb shim's)
            versions.append(f"{dist} {importlib.metadata.version(dist)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{dist} not installed")
    _, why = pgq.available()
    return [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs (nproc), {mem} RAM, "
        f"{platform.system()} {platform.release()}, Python {platform.python_version()}",
        "engines: " + "; ".join(f"{e.name} {e.version}" for e in engines),
        "drivers: " + ", ".join(versions) + f"; {why}",
        f"load: 1-minute load average during the run {fmt_load(loads)} on {os.cpu_count()} "
        "CPUs (the client, the servers and anything else running share them)",
        *([] if speed is None else [fmt_speed(*speed)]),
    ]


def fmt_speed(before: float, after: float) -> str:
    """The speed probe's line (``bench.results.speed_probe``)."""
    return (
        f"speed: a Python loop of {SPEED_PROBE_ADDS / 1e6:g}M additions took {before:.2f} s "
        f"before the run and {after:.2f} s after it (lower is faster; compare two runs' rates "
        "only at alike speeds)"
    )


def fmt_load(loads: list[float]) -> str:
    if not loads:
        return "?"
    return f"{statistics.median(loads):.1f} ({min(loads):.1f}–{max(loads):.1f})"


def print_report(
    s: Settings,
    engines: list[Engine],
    results: list[FormResult],
    timings: list[depth_mod.ClaimTiming],
    depth_problems: list[str],
    elapsed: float,
    loads: list[float],
    speed: tuple[float, float] | None = None,
) -> None:
    mode = "--quick" if s.quick else "full"
    print(f"qgen bench ({mode} run, {elapsed:.0f} s)")
    for ln in machine_lines(engines, loads, speed):
        print(ln)
    print(
        f"each drain: {s.messages} messages ({s.messages_for('sqlite')} on SQLite), "
        f"concurrency {s.concurrency}, batch {' and '.join(map(str, s.batches or (s.batch,)))}; "
        f"median (min–max) of {s.repeats} repeats after one warm-up; no-op handler; "
        "payload ~100 bytes of JSON"
    )
    print()
    print(
        "Drain throughput, messages/s (connections opened inside the timing). raw: the same "
        "rendered SQL in a plain loop on the bare driver, asyncio like the runtime; sync: "
        "PyMySQL / sqlite3 on one thread per worker, no event loop; runtime/raw: median of "
        "the per-repeat ratios (! below the engine's target: "
        + ", ".join(f"{engine} {t}" for engine, t in RATIO_TARGETS.items())
        + "):"
    )
    print(throughput_table(results))
    for r in results:
        if r.form.startswith("pgqueuer") and r.rt_ack.wall_rates:
            print(
                f"  {r.form} batch {r.batch}: from its start to its last settlement (newest log row); by wall "
                f"time, with its drain-mode shutdown (about 1 s per manager): ack "
                f"{fmt_rate(r.rt_ack.wall_rates)}, retry-once {fmt_rate(r.rt_retry.wall_rates)}"
            )
    print()
    print(
        "Enqueue (enqueue_many of N in one transaction) and cost per message "
        "(runtime / raw; retry = every message fails once, then acks):"
    )
    print(cost_table(results))
    problems = [f"{r.engine} {r.form}: {p}" for r in results for p in r.problems]
    if problems:
        print()
        print("problems:")
        for p in problems:
            print(f"  {p}")
    if timings or depth_problems:
        print()
        print(
            f"Claim latency against depth, ms (one claim of {s.batch} rows as the runtime sends "
            f"it, rolled back; median (min–max) of up to {s.claim_repeats}, cases claimed "
            f"round-robin; ×: the big table against its 10k twin of the same schema):"
        )
        if s.quick:
            print(f"  (--quick: the big tables hold {s.depth_big:,} rows, not 1,000,000)")
        print(depth_table(timings))
        for p in depth_problems:
            print(f"  {p}")
        print()
        print("Claim plans (EXPLAIN of every statement of the claim, on the big tables):")
        print(plans_text(timings))
    print()
    print_targets(results, timings)


def print_targets(results: list[FormResult], timings: list[depth_mod.ClaimTiming]) -> None:
    print("Targets:")
    ratios = []
    for r in results:
        if r.skipped or not r.has_raw:
            continue
        for retry in (False, True):
            rs = r.ratios(retry)
            if rs:
                ratios.append(
                    (
                        statistics.median(rs),
                        RATIO_TARGETS.get(r.engine, 0.0),
                        f"{r.engine} {r.form} batch {r.batch} {'retry-once' if retry else 'ack'}",
                    )
                )
    below = [f"{name} {v:.2f}" for v, t, name in ratios if v < t]
    print(
        "  runtime/raw ≥ "
        + ", ".join(f"{t} ({engine})" for engine, t in RATIO_TARGETS.items())
        + " in every row: "
        + (
            "met"
            if ratios and not below
            else "NOT met: " + ", ".join(below)
            if below
            else "no data"
        )
    )
    pgq_rows = [r for r in results if r.form.startswith("pgqueuer")]
    if not pgq_rows:
        print("  PostgreSQL drain faster than PgQueuer: not measured (PostgreSQL not run)")
    for pgq_row in pgq_rows:
        name = f"{pgq_row.form}, batch {pgq_row.batch}"
        if pgq_row.skipped or not pgq_row.rt_ack.rates:
            why = pgq_row.skipped or "no data"
            print(f"  PostgreSQL drain faster than {name}: not measured ({why})")
            continue
        theirs = statistics.median(pgq_row.rt_ack.rates)
        theirs_retry = statistics.median(pgq_row.rt_retry.rates) if pgq_row.rt_retry.rates else 0
        parts = []
        for r in results:
            if r.engine == "postgres" and r.has_raw and r.batch == pgq_row.batch and r.rt_ack.rates:
                ours = statistics.median(r.rt_ack.rates)
                ours_retry = statistics.median(r.rt_retry.rates) if r.rt_retry.rates else 0
                times = ours / theirs
                times_retry = (ours_retry / theirs_retry) if theirs_retry else 0
                want = PGQ_TARGETS.get((r.form, r.batch))
                met = (want is None or times >= want) and times_retry >= PGQ_RETRY_TARGET
                parts.append(
                    f"{r.form} {'met' if met else 'NOT met'} (ack {times:.2f}×"
                    + (f" of {want:g}×" if want is not None else "")
                    + f", retry-once {times_retry:.2f}× of {PGQ_RETRY_TARGET:g}×)"
                )
        print(f"  PostgreSQL drain × {name} ({theirs:,.0f} msg/s ack): " + "; ".join(parts))
    by_key = {(t.engine, t.form, t.case.name): t for t in timings}
    worse = []
    checked = 0
    for (engine, form, case), t in by_key.items():
        base = by_key.get((engine, form, depth_mod.BASE.get(case, "")))
        if base is None:
            continue
        checked += 1
        ratio = t.median_ms / base.median_ms
        if ratio > DEPTH_TARGET:
            worse.append(f"{engine} {form} {t.case.label} ×{ratio:.2f}")
    if checked:
        print(
            f"  claim at the big depth ≤ {DEPTH_TARGET}× its 10k claim ({checked} cases): "
            + ("met in every case" if not worse else "NOT met: " + ", ".join(worse))
        )
    else:
        print("  claim latency at depth: not measured")
    if ratios:
        low, _, name = min(ratios)
        print(f"overall: runtime/raw drain ratio {low:.2f} ({name})")
    else:
        print("overall: runtime/raw drain ratio n/a (nothing ran)")


async def engine_version(db: Connection) -> str:
    """The server's version and the durability settings the numbers depend on."""
    if db.dialect.name == "postgres":
        row = await db.fetchone(
            "SELECT current_setting('server_version') AS v, "
            "current_setting('synchronous_commit') AS sc, current_setting('fsync') AS f"
        )
        if not row:
            return "?"
        return (
            f"PostgreSQL {row['v'].split()[0]} (synchronous_commit={row['sc']}, fsync={row['f']})"
        )
    if db.dialect.name in ("mysql", "mariadb"):
        row = await db.fetchone("SELECT VERSION() AS v, @@innodb_flush_log_at_trx_commit AS f")
        if not row:
            return "?"
        return f"{row['v']} (innodb_flush_log_at_trx_commit={row['f']}; sessions READ COMMITTED)"
    version = await db.server_version_text()
    return f"SQLite {version} (WAL, synchronous=NORMAL: the runtime's pragmas)"
