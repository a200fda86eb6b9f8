"""Shared pytest wiring: the ``engine`` fixture and the per-engine count at the end of a run.

The ``engine`` fixture is parametrized over engines.ENGINES, each param marked
``engine(name)``; the terminal summary counts results by that marker, so CI shows how many
tests passed, failed and were skipped on each engine (a green run that skipped a whole engine
shows up there at once).
"""

from __future__ import annotations

import os
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest
from support.engines import ENGINES, Engine, engine_for, engine_params

#: the harness a service tests its handlers with (the example services' tests use it)
pytest_plugins = ["runtime.testing"]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--chaos-scale",
        type=int,
        default=int(os.environ.get("QGEN_CHAOS_SCALE", "1")),
        help="size of the chaos suite (tests/system/test_chaos.py): messages, kills and outages "
        "per scenario grow with it (default 1, or $QGEN_CHAOS_SCALE)",
    )


@pytest.fixture(params=engine_params())
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """One engine per param: skipped (failed under CI=true) when its server is unreachable."""
    yield engine_for(request.param, tmp_path)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    # Carry the engine on the report itself, so the summary (and xdist, which ships reports
    # between processes) does not need the item.
    outcome = yield
    marker = item.get_closest_marker("engine")
    if marker is not None and marker.args:
        report = outcome.get_result()
        report.user_properties.append(("engine", str(marker.args[0])))


def _engine_of(report: pytest.TestReport) -> str | None:
    for key, value in getattr(report, "user_properties", ()):
        if key == "engine":
            return str(value)
    return None


def _write_sections(terminalreporter: pytest.TerminalReporter) -> None:
    """The lines tests recorded for the summary, under their section's title."""
    sections: dict[str, dict[tuple[str, str], None]] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if not isinstance(report, pytest.TestReport):
                continue
            # a line recorded during the call is on the teardown's report too: keep it once
            for key, value in report.user_properties:
                if key.startswith("summary:"):
                    lines = sections.setdefault(key.removeprefix("summary:"), {})
                    lines[(report.nodeid, str(value))] = None
    for title, lines in sections.items():
        terminalreporter.write_sep("-", title)
        for _, line in lines:
            terminalreporter.write_line(line)


def _outcomes(terminalreporter: pytest.TerminalReporter) -> dict[str, tuple[str, str]]:
    """Each engine test's node id → (engine, outcome)."""
    # One outcome per test: a failure in any phase wins over a skip, a skip over a pass.
    rank = {"passed": 0, "skipped": 1, "failed": 2}
    outcome_of: dict[str, tuple[str, str]] = {}
    for key, reports in terminalreporter.stats.items():
        kind = {
            "passed": "passed",
            "xpassed": "passed",
            "failed": "failed",
            "error": "failed",
            "skipped": "skipped",
            "xfailed": "skipped",
        }.get(key)
        if kind is None:
            continue
        for report in reports:
            engine = _engine_of(report) if isinstance(report, pytest.TestReport) else None
            if engine is None:
                continue
            nodeid = report.nodeid
            previous = outcome_of.get(nodeid)
            if previous is None or rank[kind] > rank[previous[1]]:
                outcome_of[nodeid] = (engine, kind)
    return outcome_of


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the lines tests recorded for the summary (a user property ``summary:<section>``,
    e.g. the chaos suite's line per scenario), then ``engine tests: <engine> passed=N
    failed=N skipped=N`` for every engine."""
    _write_sections(terminalreporter)
    outcome_of = _outcomes(terminalreporter)
    if not outcome_of:
        return
    counts: dict[str, dict[str, int]] = {}
    for engine, kind in outcome_of.values():
        counts.setdefault(engine, {"passed": 0, "failed": 0, "skipped": 0})[kind] += 1
    names = [n for n in ENGINES if n in counts] + sorted(set(counts) - set(ENGINES))
    terminalreporter.write_sep("-", "tests per engine")
    for name in names:
        c = counts[name]
        terminalreporter.write_line(
            f"engine tests: {name} passed={c['passed']} failed={c['failed']} skipped={c['skipped']}"
        )
