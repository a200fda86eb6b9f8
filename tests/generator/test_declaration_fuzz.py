"""Random and mutated declarations: `qgen render` exits 0 or 2 (one line, never a traceback,
never exit 3), and every file of an accepted declaration loads in the runtime and every
statement in it is accepted by the engine (SQLite here for every example; PostgreSQL and
MariaDB in the engine test, on fewer examples).

The counts (declarations tried, accepted, statements run) are printed at the end of the run.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engines import Engine, engine_params, run
from support.statements import namespace, params_for

import runtime
from qgen.cli import main
from runtime.contract.rendered import RenderedFile

#: what the property tests saw; each test records its own line for the terminal summary
COUNTS: dict[str, int] = {"tried": 0, "accepted": 0, "refused": 0, "statements": 0}


@pytest.fixture(autouse=True)
def _report(request: pytest.FixtureRequest) -> Iterator[None]:
    """Count this test's declarations alone, and put the line in the summary."""
    COUNTS.update(tried=0, accepted=0, refused=0, statements=0)
    yield
    if COUNTS["tried"]:
        line = (
            "{name}: {tried} declarations tried, {accepted} accepted, {refused} refused with "
            "one line, {statements} statements run on engines".format(
                name=request.node.name, **COUNTS
            )
        )
        request.node.user_properties.append(("summary:declaration property tests", line))


# ------------------------------------------------------------------------ strategies

ODD_TEXT = st.sampled_from(
    [
        "",
        " ",
        "a\n",
        "A",
        "select",
        "returning",
        "名前",
        "x" * 70,
        "g\u2028-- max_attempts: 99",
        "a b",
        "a;b",
        "-- name: ack",
        "\x00",
        "é",
        "ID",
        "orders",
        "orders_dead",
        "Orders",
    ]
)
JUNK = st.one_of(
    ODD_TEXT,
    st.text(max_size=8),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.lists(st.integers(0, 3), max_size=2),
    # fresh tables each time: a shared one could end up inside itself
    st.builds(dict),
    st.builds(lambda: {"x": 1}),
)
IDENT = st.one_of(st.sampled_from(["id", "payload", "grp", "body", "t_q", "q1"]), ODD_TEXT)

#: the service's own SQL: valid, subtly broken, hostile; {t} is the table, {c} a column,
#: {id} the id column and {lu} locked_until's, all written unquoted as declared (a name that
#: needs quotes makes the statement one qgen must refuse with one line)
SQL = st.sampled_from(
    [
        "UPDATE {t} SET {c} = NULL WHERE {id} = :id",
        "UPDATE {t} SET {c} = NULL WHERE {id} = :id AND {lu} = :token",
        "DELETE FROM {t} WHERE {id} = :id",
        "DELETE FROM {t} WHERE {id} = :id AND {lu} = :token",
        "UPDATE {t} SET {c} = 'x' /* note; */ WHERE {id} = :id -- trailing",
        "UPDATE {t} SET {c} = 'a\n-- b' WHERE {id} = :id",
        "UPDATE {t} SET {c} = 1 -- note;\nWHERE {id} = :id",
        "UPDATE {t} SET payload = '{{}}' WHERE {id} = :id /*;\n-- name: ack\nDELETE FROM {t};\n-- */",
        "DROP TABLE {t}",
        "TRUNCATE {t}",
        "GRANT ALL ON {t} TO public",
        "CREATE TABLE evil (a INT)",
        "SELECT {id} FROM {t} WHERE {id} = :id",
        "SELECT id FROM (SELECT {id} AS id FROM {t}) AS r WHERE id = :id",
        "UPDATE {t} SET nope = 1 WHERE {id} = :id",
        "UPDATE {t} SET {c} = :unknown WHERE {id} = :id",
        "UPDATE {t} SET {c} = 1 WHERE {id} = :id; DELETE FROM {t}",
        "UPDATE {t} SET WHERE",
        "UPDATE {t} SET {c} = 'a\rb' WHERE {id} = :id",
    ]
)

#: each role's column: as the examples name it, in mixed case (PostgreSQL keeps it only
#: quoted), an SQL keyword, or a name the rendered statements also give their own aliases and
#: WITHs in another case (AS id, AS token, ins, locked, nth, held, d, …); no two roles share one
NAMES = {
    "id": ["id", "Id", "ID", "select"],
    "payload": ["payload", "body", "Body", "from", "Payload"],
    "group": ["grp", "Grp", "group", "Token"],
    "attempt": ["attempt", "Attempt", "order", "Locked"],
    "retry_after": ["retry_after", "RetryAfter", "where", "Nth"],
    "locked_until": ["locked_until", "LockedUntil", "check", "New_Token"],
    "processed_at": ["processed_at", "ProcessedAt", "table", "Held"],
    "enqueued_at": ["enqueued_at", "EnqueuedAt", "user", "Woken"],
    "priority": ["priority", "Priority", "limit", "Unlocked"],
    "fifo_key": ["fifo_key", "FifoKey", "key", "D"],
    "dedupe_key": ["dedupe_key", "DedupeKey", "returning", "Ins"],
}
TABLES = ["jobs_q", "returning", "Jobs_Q", "t", "Orders", "order", "Ins", "J"]
#: the outbox's columns, in the same styles (its put reads RETURNING "Id" AS id back as id)
OUTBOX_NAMES = {
    "id": ["id", "Id", "ID", "select"],
    "payload": ["payload", "Body", "from", "Payload"],
    "topic": ["topic", "Topic", "Select", "Name"],
    "key": ["key", "Key", "group", "Type"],
    "created_at": ["created_at", "CreatedAt", "user", "Nullable"],
    "processed_at": ["processed_at", "ProcessedAt", "where", "Generated"],
}
OUTBOX_TABLES = ["outbox", "Outbox_Q", "order", "Ob"]
OTHER_COLUMNS = [[], ["Note"], ["desc"], ["Name", "kind"]]


@st.composite
def declarations(draw: st.DrawFn) -> dict[str, Any]:
    """A declaration close to a valid one, then up to three mutations anywhere in it."""
    form = draw(st.sampled_from(["row_lock", "lease", "advisory"]))
    table = draw(st.sampled_from(TABLES))
    # one naming style for the whole table half of the time, each column's own otherwise
    style = draw(st.one_of(st.none(), st.integers(0, 3)))

    def name(role: str) -> str:
        pool = NAMES[role]
        return pool[min(style, len(pool) - 1)] if style is not None else draw(st.sampled_from(pool))

    cols: dict[str, Any] = {"id": name("id"), "payload": name("payload")}
    for role in (
        "group",
        "attempt",
        "retry_after",
        "processed_at",
        "enqueued_at",
        "priority",
        "fifo_key",
        "dedupe_key",
    ):
        if draw(st.booleans()):
            cols[role] = name(role)
    if form == "lease":
        cols["locked_until"] = name("locked_until")
    queue: dict[str, Any] = {"table": table, "form": form, "columns": cols}
    others = draw(st.sampled_from(OTHER_COLUMNS))
    if others:
        queue["other_columns"] = others
    if form == "lease" and draw(st.booleans()):
        queue["lease_s"] = draw(st.sampled_from([30, 0.5, 86400]))
    if "attempt" in cols and draw(st.booleans()):
        queue["max_attempts"] = draw(st.integers(1, 5))
        if "group" in cols and draw(st.booleans()):
            queue["dead_letter"] = {"group": draw(st.sampled_from(["dead", "jobs_dead"]))}
        else:
            queue["dead_letter"] = {"table": draw(st.sampled_from([f"{table}_dead", "Dead_Q"]))}
    if "group" in cols and draw(st.booleans()):
        queue["default_group"] = draw(st.sampled_from(["jobs", "lane 1", "ünï"]))
    col = draw(
        st.sampled_from([c for r, c in cols.items() if r not in ("id", "payload")] or ["id"])
    )
    names = {"t": table, "c": col, "id": cols["id"], "lu": cols.get("locked_until", "locked_until")}
    if draw(st.booleans()):
        outcome = draw(st.sampled_from(["ack", "drop", "retry", "retry_after"]))
        queue["statements"] = {outcome: draw(SQL).format(**names)}
    if draw(st.booleans()):
        queue["custom"] = {"park": draw(SQL).format(**names)}
    decl: dict[str, Any] = {
        "dialects": draw(st.sampled_from([["sqlite"], ["sqlite", "postgres", "mariadb", "mysql"]])),
        "queues": {draw(st.sampled_from(["jobs", "q", "J"])): queue},
    }
    if draw(st.integers(0, 3)) == 0:  # an outbox beside the queue, a quarter of the time
        decl["outbox"] = {
            "table": draw(st.sampled_from(OUTBOX_TABLES)),
            "columns": {
                role: pool[min(style, len(pool) - 1)]
                if style is not None
                else draw(st.sampled_from(pool))
                for role, pool in OUTBOX_NAMES.items()
            },
        }
    for _ in range(draw(st.integers(0, 3))):
        _mutate(draw, decl)
    return decl


def _mutate(draw: st.DrawFn, node: dict[str, Any]) -> None:
    """Replace, delete or add one key somewhere in the nested tables."""
    while True:
        key = draw(st.sampled_from([*node.keys(), "<new>"]))
        if key != "<new>" and isinstance(node[key], dict) and node[key] and draw(st.booleans()):
            node = node[key]
            continue
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if key == "<new>" or action == "add":
            node[draw(st.one_of(ODD_TEXT, st.sampled_from(["form", "lease_s", "custom"])))] = draw(
                JUNK
            )
        elif action == "delete":
            del node[key]
        else:
            node[key] = draw(JUNK)
        return


def toml(value: Any) -> str:
    """A TOML document for a dict (inline tables; every string a JSON-escaped basic string)."""
    return "".join(f"{_key(k)} = {_value(v)}\n" for k, v in value.items())


def _key(k: Any) -> str:
    return json.dumps(str(k))


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + "}"


# --------------------------------------------------------------------------- running


def render_files(text: str | bytes, folder: Path) -> list[Path] | None:
    """Render in-process; the files it wrote, or None when it refused (exit 2, one line)."""
    cfg = folder / "qgen.toml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass"))
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["render", "--config", str(cfg)])
    COUNTS["tried"] += 1
    message = err.getvalue()
    # exit 3: a bug of qgen's own, never an answer to a declaration; a GeneratorBug (qgen
    # refused SQL a template wrote for this declaration) is one of them
    assert code != 3, f"qgen's own bug, not a refusal of the declaration: {message}"
    assert code in (0, 2), f"exit {code}: {message}"
    assert "Traceback" not in message
    if code == 2:
        assert message.startswith("qgen: ") and message.count("\n") == 1, message
        COUNTS["refused"] += 1
        return None
    COUNTS["accepted"] += 1
    return sorted(folder.glob("sql/*/*.sql"))


def sqlite_accepts(files: list[Path]) -> None:
    """Every statement of every SQLite file runs on a fresh database (each step rolled back)."""
    for path in files:
        if path.parent.name != "sqlite":
            continue
        rendered = runtime.load(path).rendered
        db = sqlite3.connect(":memory:", isolation_level=None)
        try:
            _run_all(db, rendered)
        finally:
            db.close()


def values_for(rendered: RenderedFile) -> dict[str, Any]:
    """The enqueue's value for each of the table's other columns (NULL)."""
    return {f"value_{o}": None for o in rendered.header.other_columns}


def first_step(rendered: RenderedFile) -> str:
    """The step that writes the one committed row the others find: enqueue, or the outbox's put."""
    return "put" if rendered.header.kind == "outbox" else "enqueue"


def _run_all(db: sqlite3.Connection, rendered: RenderedFile) -> None:
    params = params_for("sqlite") | values_for(rendered)
    for sql in rendered.require("schema"):
        db.execute(sql, params)
    for sql in rendered.require(first_step(rendered)):
        db.execute(sql, {**params, "delay_s": None})
    for name, step in rendered.statements.items():
        if name == "schema":
            continue
        db.execute("BEGIN")
        try:
            for sql in step:
                COUNTS["statements"] += 1
                try:
                    db.execute(sql, params).fetchall()
                except Exception as exc:
                    if not refused_by_the_data(exc):
                        raise
                    break
        finally:
            db.execute("ROLLBACK")


#: MySQL/MariaDB errors about a value, which PyMySQL raises as OperationalError: 1048 a NULL
#: in a NOT NULL column, 1264 out of range, 1292 an incorrect date or time, 1366 an incorrect
#: value, 1406 too long
_MYSQL_DATA_ERRORS = frozenset({1048, 1264, 1292, 1366, 1406})


def refused_by_the_data(exc: BaseException) -> bool:
    """The engine accepted the statement but the rows refused it (a NOT NULL column set to
    NULL by the service's own SQL, say): IntegrityError or DataError in every driver, or
    one of MySQL's value errors."""
    seen = [e for e in (exc, exc.__cause__) if e]  # a driver error may arrive wrapped
    if any(
        type(e).__module__.startswith("pymysql") and e.args and e.args[0] in _MYSQL_DATA_ERRORS
        for e in seen
    ):
        return True
    return any(c.__name__ in ("IntegrityError", "DataError") for e in seen for c in type(e).__mro__)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(declarations())
def test_random_declarations_render_or_are_refused_and_what_renders_runs(
    decl: dict[str, Any],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        files = render_files(toml(decl), Path(folder))
        if files is not None:
            for path in files:
                runtime.load(path)  # every accepted file loads, seal and header checked
            sqlite_accepts(files)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_mutated_bytes_of_a_declaration_never_crash_render(data: st.DataObject) -> None:
    base = (Path(__file__).resolve().parents[2] / "generated_examples" / "qgen.toml").read_bytes()
    raw = bytearray(base)
    for _ in range(data.draw(st.integers(1, 4))):
        at = data.draw(st.integers(0, len(raw) - 1))
        how = data.draw(st.sampled_from(["flip", "insert", "delete"]))
        if how == "flip":
            raw[at] = data.draw(st.integers(0, 255))
        elif how == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=4))
        else:
            del raw[at : at + data.draw(st.integers(1, 40))]
    with tempfile.TemporaryDirectory() as folder:
        files = render_files(bytes(raw), Path(folder))
        if files is not None:
            for path in files:
                runtime.load(path)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(decl=declarations())
@pytest.mark.parametrize("engine", engine_params("postgres", "mariadb", "mysql"), indirect=True)
def test_accepted_declarations_run_on_the_servers(engine: Engine, decl: dict[str, Any]) -> None:
    decl = {**decl, "dialects": [engine.dialect_name]}
    with tempfile.TemporaryDirectory() as folder:
        files = render_files(toml(decl), Path(folder))
        if files is None:
            return

        async def go(path: Path) -> None:
            rendered = runtime.load(path).rendered
            params = params_for(engine.dialect_name) | values_for(rendered)
            async with namespace(engine) as conn:
                for sql in rendered.require("schema"):
                    await conn.execute(sql, params)
                for sql in rendered.require(first_step(rendered)):
                    await conn.execute(sql, {**params, "delay_s": None})
                for name, step in rendered.statements.items():
                    if name == "schema":
                        continue
                    await conn.begin()
                    try:
                        for sql in step:
                            COUNTS["statements"] += 1
                            try:
                                await conn.fetchall(sql, params)
                            except Exception as exc:
                                if not refused_by_the_data(exc):
                                    raise
                                break
                    finally:
                        await conn.rollback()

        for path in files:  # the queue's file, and the outbox's when one is declared
            run(go(path))
