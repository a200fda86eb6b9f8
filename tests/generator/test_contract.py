"""The rendered file as a sealed contract: what the generator validated is byte for byte what the
runtime runs, nothing can be smuggled past the reader, and every unreadable file gets one clear
error. Each test here is a case that once slipped through."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.engines import Engine, run
from support.statements import namespace

import runtime
from qgen.build import build_unit, render_declaration
from qgen.cli import main
from qgen.declaration import DeclarationError, parse_declaration
from runtime.contract.errors import RenderedFileError
from runtime.contract.rendered import Header, Kind, parse_rendered, read_rendered, write_file

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "generated_examples" / "sql" / "postgres" / "orders.sql"


def render(tmp_path: Path, toml: str, *args: str) -> tuple[int, str]:
    """Run `qgen render` on a declaration; (exit code, what it printed on stderr)."""
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(textwrap.dedent(toml), encoding="utf-8")
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["render", "--config", str(cfg), *args])
    return code, err.getvalue()


def refused(tmp_path: Path, toml: str, *words: str) -> str:
    """The declaration is refused with exit 2 and one line naming each of ``words``."""
    code, err = render(tmp_path, toml)
    assert code == 2, err
    assert err.count("\n") == 1 and err.startswith("qgen: "), err
    for w in words:
        assert w in err, err
    return err


def queue_toml(form: str = "row_lock", extra: str = "") -> str:
    """A queue `jobs` on every dialect; ``extra`` adds keys of the queue, or tables after it
    when it starts with `[`."""
    cols = 'id = "id"\npayload = "payload"\ngroup = "grp"\n'
    if form == "lease":
        cols += 'locked_until = "locked_until"\n'
    keys, tables = ("", extra) if extra.startswith("[") else (extra, "")
    return (
        'dialects = ["postgres", "mysql", "mariadb", "sqlite"]\n'
        f'[queues.jobs]\ntable = "jobs_q"\nform = "{form}"\n{keys}'
        f"[queues.jobs.columns]\n{cols}{tables}"
    )


# ------------------------------------------------------------- what the reader could split


def test_a_comment_cannot_smuggle_a_block_into_the_file(tmp_path: Path) -> None:
    """`/*;` + a `-- name: ack` line inside a comment once made ack `DELETE FROM t`."""
    sql = "UPDATE jobs_q SET payload = '{}' WHERE id = :id /*;\n-- name: ack\nDELETE FROM jobs_q;\n-- */"
    err = refused(
        tmp_path,
        queue_toml(extra=f"[queues.jobs.custom]\nx = {json.dumps(sql)}\n"),
        "custom.x",
        "would not read back",
    )
    assert "fix:" in err
    assert not (tmp_path / "sql").exists(), "nothing is written for a refused declaration"


def test_a_semicolon_in_a_line_comment_cannot_cut_a_statement(tmp_path: Path) -> None:
    """`-- note;` at a line's end once made the override an UPDATE without its WHERE."""
    sql = "UPDATE jobs_q SET grp = 'x' -- note;\nWHERE id = :id"
    refused(
        tmp_path,
        queue_toml(extra=f"[queues.jobs.statements]\ndrop = {json.dumps(sql)}\n"),
        "statements.drop",
        "would not read back",
    )


def test_a_comment_that_cannot_mislead_the_reader_is_carried_intact(tmp_path: Path) -> None:
    sql = "UPDATE jobs_q SET grp = 'x' /* parked; by hand */\nWHERE id = :id -- why"
    code, err = render(
        tmp_path, queue_toml(extra=f"[queues.jobs.custom]\npark = {json.dumps(sql)}\n")
    )
    assert code == 0, err
    (step,) = [read_rendered(tmp_path / "sql/sqlite/jobs.sql").require("custom.park")]
    assert step == (sql,) and step[0].kind is Kind.WRITES


def test_a_literal_with_a_line_that_looks_like_a_comment_loads_and_runs_intact(
    engine: Engine,
) -> None:
    """A literal holding a newline and `-- ` once rendered with exit 0 and failed to load."""
    value = "parked\n-- by: ops; see ticket\n-- name: ack"
    sql = f"UPDATE lit_q SET grp = '{value}' WHERE id = :id"
    raw = {
        "dialects": [engine.dialect_name],
        "queues": {
            "lit": {
                "table": "lit_q",
                "form": "row_lock",
                "columns": {"id": "id", "payload": "payload", "group": "grp"},
                "custom": {"park": sql},
            }
        },
    }
    with pytest.raises(DeclarationError, match="would not read back"):
        # the last line of the literal starts with `-- name:`: that one is refused...
        build_unit(parse_declaration(raw).queues["lit"], engine.dialect_name)
    value = value.rsplit("\n", 1)[0]  # ...without it, the literal is carried as it is
    raw["queues"]["lit"]["custom"]["park"] = sql = sql.replace("\n-- name: ack", "")
    text = build_unit(parse_declaration(raw).queues["lit"], engine.dialect_name)
    queue = runtime.Queue(parse_rendered(text, "lit.sql"))
    (park,) = queue.rendered.require("custom.park")
    assert "\n-- by: ops; see ticket'" in park

    assert run(group_after_park(engine, queue, "lit_q")) == value


async def group_after_park(engine: Engine, queue: runtime.Queue, table: str) -> Any:
    """Create the queue in a namespace of its own, enqueue one message, run its custom.park
    statement as the runtime would, and read the row's group back."""
    (park,) = queue.rendered.require("custom.park")
    async with namespace(engine) as conn:
        for s in queue.rendered.require("schema"):
            await conn.execute(s, {})
        await queue.enqueue(conn, {"n": 1})
        await conn.execute(park, {"id": 1})
        return (await conn.fetchall(f"SELECT grp FROM {table}", {}))[0]["grp"]


@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
def test_a_column_named_returning_is_not_taken_for_a_returning_clause(
    engine: Engine, form: str
) -> None:
    """A column named `returning` once made plain UPDATEs look row-returning: MariaDB leased
    rows and handed nothing, PostgreSQL and SQLite counted acks as lost leases."""
    cols = {"id": "id", "payload": "payload", "attempt": "attempt", "processed_at": "returning"}
    if form == "lease":
        cols["locked_until"] = "select"
    queue_decl: dict[str, Any] = {"table": "returning", "form": form, "columns": cols}
    if form == "lease":
        queue_decl["lease_s"] = 30
    raw = {"dialects": [engine.dialect_name], "queues": {"r": queue_decl}}
    text = build_unit(parse_declaration(raw).queues["r"], engine.dialect_name)
    queue = runtime.Queue(parse_rendered(text, "returning.sql"))
    assert all(s.kind is Kind.WRITES for s in queue.rendered.require("ack"))

    async def go() -> tuple[dict[str, int], int]:
        async with namespace(engine) as conn:
            for s in queue.rendered.require("schema"):
                await conn.execute(s, {})
            for n in range(5):
                await queue.enqueue(conn, {"n": n})
            consumer = runtime.Consumer(conn.test_url, queue, _ack, concurrency=1)
            counts = await consumer.drain()
            q = conn.dialect.quote_ident
            left = await conn.fetchall(
                f"SELECT COUNT(*) AS n FROM {q('returning')} WHERE {q('returning')} IS NULL", {}
            )
            return counts, int(left[0]["n"])

    counts, unfinished = run(go())
    assert counts.get("ack") == 5 and not counts.get("lease_lost"), counts
    assert unfinished == 0


async def _ack(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
    return runtime.ack()


# ------------------------------------------------------------------------ the seal


def test_load_refuses_a_hand_edited_statement(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    path = tmp_path / "orders.sql"
    path.write_text(text.replace('WHERE "id" = %(id)s AND', 'WHERE "id" >= %(id)s AND', 1))
    with pytest.raises(
        RenderedFileError, match=r"orders\.sql: does not match its seal.*qgen render"
    ):
        runtime.load(path)


@pytest.mark.parametrize(
    ("line", "edited"),
    [
        ('-- form: "lease"', '-- form: "row_lock"'),
        ('-- dialect: "postgres"', '-- dialect: "sqlite"'),
        ("-- max_attempts: 5", "-- max_attempts: 99"),
        ("-- kinds: writes-returning", "-- kinds: writes"),
    ],
)
def test_load_refuses_an_edited_header_or_kind(tmp_path: Path, line: str, edited: str) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    assert line in text
    path = tmp_path / "orders.sql"
    path.write_text(text.replace(line, edited, 1), encoding="utf-8")
    with pytest.raises(RenderedFileError, match="does not match its seal"):
        runtime.load(path)


def test_load_refuses_crlf_truncation_and_other_encodings(tmp_path: Path) -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    path = tmp_path / "orders.sql"
    path.write_bytes(text.replace("\n", "\r\n").encode())
    with pytest.raises(RenderedFileError, match="CRLF"):
        runtime.load(path)
    path.write_bytes(text[: len(text) // 2].encode())
    with pytest.raises(RenderedFileError, match=r"orders\.sql: .*(seal|truncated)"):
        runtime.load(path)
    path.write_bytes(text.encode("utf-16"))
    with pytest.raises(RenderedFileError, match="not UTF-8"):
        runtime.load(path)
    path.write_bytes(text.encode() + b"\xff\n")
    with pytest.raises(RenderedFileError, match=r"not UTF-8.*qgen render"):
        runtime.load(path)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_changed_byte_is_refused(data: st.DataObject) -> None:
    raw = EXAMPLE.read_bytes()
    at = data.draw(st.integers(0, len(raw) - 1))
    new = data.draw(st.integers(0, 255).filter(lambda b: b != raw[at]))
    with pytest.raises(RenderedFileError):
        parse_rendered(raw[:at] + bytes([new]) + raw[at + 1 :], "orders.sql")


def test_a_file_without_a_seal_is_refused() -> None:
    text = EXAMPLE.read_text(encoding="utf-8")
    unsealed = "\n".join(ln for ln in text.split("\n") if not ln.startswith("-- seal:"))
    with pytest.raises(RenderedFileError, match="has no seal"):
        parse_rendered(unsealed, "old.sql")


@pytest.mark.parametrize(
    ("line", "forged"),
    [
        ('-- form: "lease"', '-- form: "queue_lock"'),
        ("-- lease_s: 30", "-- lease_s: 1e999"),
        ("-- max_attempts: 5", "-- max_attempts: 0"),
        ('-- table: "orders_queue"', '-- table: "orders queue"'),
        ('-- default_group: "orders"', '-- default_group: ""'),
    ],
)
def test_header_values_are_checked_at_load_not_at_first_use(line: str, forged: str) -> None:
    """A file whose seal matches but whose header holds values this runtime cannot use (a
    forger's edit, or another format) fails when it is loaded, not at first use."""
    text = EXAMPLE.read_text(encoding="utf-8")
    assert line in text
    with pytest.raises(RenderedFileError, match="header value"):
        parse_rendered(_reseal(text.replace(line, forged, 1)), "forged.sql")


def _reseal(text: str) -> str:
    """The same text with a seal that matches it (a forger's move, used to test the header)."""
    import hashlib

    lines = text.split("\n")
    n = next(i for i, ln in enumerate(lines) if ln.startswith("-- seal:"))
    rest = "\n".join(lines[:n] + lines[n + 1 :])
    lines[n] = "-- seal: sha256:" + hashlib.sha256(rest.encode()).hexdigest()
    return "\n".join(lines)


def test_a_header_value_cannot_write_another_header_line() -> None:
    """JSON with every non-ASCII character escaped: no value spans lines or adds one."""
    good = read_rendered(EXAMPLE)
    hostile = "g\u2028-- max_attempts: 99\n-- form: row_lock\r\x85"
    fields = {**good.header.__dict__, "default_group": hostile, "dead_group": hostile}
    text = write_file(Header(**fields), [])
    header_lines = text.rstrip("\n").split("\n")
    assert len(header_lines) == 1 + len(good.header.lines()) + 1  # the title, …, the seal
    assert all(ln.isascii() for ln in header_lines)
    back = parse_rendered(text, "x.sql").header
    assert back.default_group == back.dead_group == hostile
    assert back.max_attempts == 5 and back.form == "lease"


# --------------------------------------------------------------- refused declarations

BAD_DECLARATIONS = [
    # (id, toml, words the one line must hold)
    *[
        (
            f"ddl-{word.split()[0].lower()}-in-{form}-{key}",
            queue_toml(
                form, f'[queues.jobs.{key}]\n{"drop" if key == "statements" else "x"} = "{word}"\n'
            ),
            [f"{key}.{'drop' if key == 'statements' else 'x'}", "not a statement on rows"],
        )
        for form in ("row_lock", "advisory")
        for key in ("statements", "custom")
        for word in (
            "DROP TABLE users",
            "TRUNCATE jobs_q",
            "GRANT ALL ON jobs_q TO public",
            "CREATE TABLE evil (a INT)",
        )
    ],
    (
        "group-with-trailing-space",
        queue_toml("row_lock", 'default_group = "g "\n'),
        ["default_group", "not a group name", "without spaces at either end"],
    ),
    (
        "dead-group-equal-as-mariadb-compares",
        queue_toml(
            "row_lock",
            'default_group = "Orders"\nmax_attempts = 2\ndead_letter = { group = "ORDÉRS" }\n',
        ).replace('group = "grp"\n', 'group = "grp"\nattempt = "attempt"\nretry_after = "ra"\n'),
        ["dead_letter.group", "as MySQL/MariaDB compare text"],
    ),
    (
        "dead-group-is-another-queues-live-group",
        'dialects = ["sqlite"]\n'
        '[queues.a]\ntable = "t"\nform = "row_lock"\nmax_attempts = 2\ndead_letter = { group = "b" }\n'
        '[queues.a.columns]\nid = "id"\npayload = "payload"\ngroup = "grp"\nattempt = "attempt"\n'
        'retry_after = "ra"\n'
        '[queues.b]\ntable = "t"\nform = "row_lock"\nmax_attempts = 2\ndead_letter = { group = "a_dead" }\n'
        '[queues.b.columns]\nid = "id"\npayload = "payload"\ngroup = "grp"\nattempt = "attempt"\n'
        'retry_after = "ra"\n',
        ["queue 'a'", "dead_letter.group", "the group of queue 'b'"],
    ),
    (
        "group-rewriting-header-lines",
        queue_toml("row_lock", 'default_group = "g\\u2028-- max_attempts: 99"\n'),
        ["default_group", "not a group name", "\\u2028"],
    ),
    (
        "group-with-newline",
        queue_toml("row_lock", 'default_group = "g\\n-- form: lease"\n'),
        ["default_group", "not a group name", "\\n"],
    ),
    (
        "queue-name-with-newline",
        '[queues."a\\n"]\ntable = "a_q"\nform = "row_lock"\n',
        ["queue 'a\\n'", "not an identifier"],
    ),
    (
        "column-with-newline",
        queue_toml().replace('payload = "payload"', 'payload = "payload\\n"'),
        ["columns.payload", "not an identifier"],
    ),
    (
        "columns-differing-in-case",
        queue_toml().replace('payload = "payload"', 'payload = "ID"'),
        ["mapped twice", "without case"],
    ),
    (
        "tables-differing-in-case",
        queue_toml() + '[queues.other]\ntable = "JOBS_Q"\nform = "row_lock"\n',
        ["queue 'other'", "already used by queue 'jobs'", "case is ignored"],
    ),
    (
        "queue-names-differing-in-case",
        queue_toml() + '[queues.JOBS]\ntable = "jobs2_q"\nform = "row_lock"\n',
        ["queue 'JOBS'", "only in case"],
    ),
    *[
        (f"lease-{v}", queue_toml("lease", f"lease_s = {v}\n"), ["lease_s", "from 0.1 to 86400"])
        for v in ("nan", "inf", "1e300", "-inf", "0.01", "0")
    ],
    ("max-attempts-huge", queue_toml("row_lock", "max_attempts = 100000000\n"), ["max_attempts"]),
    (
        "sql-with-cr",
        queue_toml(
            extra="[queues.jobs.custom]\nx = \"UPDATE jobs_q SET grp = 'a'\\rWHERE id = :id\"\n"
        ),
        ["custom.x", "control or line-break character", "\\r"],
    ),
    (
        "non-string-dialect",
        'dialects = ["sqlite", ["postgres"]]\n' + queue_toml().split("\n", 1)[1],
        ["dialects", "unknown dialect ['postgres']"],
    ),
    ("nul-in-out", 'out = "sq\\u0000l"\n' + queue_toml(), ["out", "\\x00", "not a folder name"]),
    ("nested-arrays", "x = " + "[" * 5000 + "]" * 5000 + "\n", ["nested too deeply"]),
]


@pytest.mark.parametrize(
    ("toml", "words"), [b[1:] for b in BAD_DECLARATIONS], ids=[b[0] for b in BAD_DECLARATIONS]
)
def test_a_dangerous_declaration_is_refused_with_one_line(
    tmp_path: Path, toml: str, words: list[str]
) -> None:
    refused(tmp_path, toml, *words)


def test_a_toml_file_that_is_not_utf8_is_refused_with_one_line(tmp_path: Path) -> None:
    cfg = tmp_path / "qgen.toml"
    cfg.write_bytes(queue_toml().encode("utf-16"))
    code = main(["render", "--config", str(cfg)])
    assert code == 2


# --------------------------------------------------------------------- qgen check


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "qgen.toml").write_text(queue_toml() + QUEUE_TWO, encoding="utf-8")
    assert main(["render", "--config", str(tmp_path / "qgen.toml")]) == 0
    return tmp_path


QUEUE_TWO = '[queues.mail]\ntable = "mail_q"\nform = "lease"\n'


def check(project: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["check", "--config", str(project / "qgen.toml")])
    return code, capsys.readouterr().err


def test_check_refuses_a_crlf_converted_file(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = project / "sql/sqlite/jobs.sql"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    code, err = check(project, capsys)
    assert code == 1 and f"{path}: CRLF line ends" in err


def test_check_refuses_a_non_utf8_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / "sql/mysql/mail.sql"
    path.write_bytes(path.read_text().encode("utf-16"))
    code, err = check(project, capsys)
    assert code == 1 and f"{path}: not UTF-8" in err


def test_check_refuses_a_hand_edit(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = project / "sql/postgres/jobs.sql"
    path.write_text(path.read_text().replace("DELETE FROM", "DELETE  FROM", 1))
    code, err = check(project, capsys)
    assert code == 1 and f"{path}: differs" in err


def test_check_finds_orphans_and_render_removes_only_its_own(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = project / "qgen.toml"
    cfg.write_text(queue_toml(), encoding="utf-8")  # the mail queue is gone
    mine = project / "sql/sqlite/notes.sql"
    mine.write_text("-- the service's own SQL, not qgen's\nSELECT 1;\n")
    code, err = check(project, capsys)
    assert code == 1
    orphans = sorted(project.glob("sql/*/mail.sql"))
    assert len(orphans) == 4
    for path in orphans:
        assert f"{path}: orphaned" in err
    assert "notes.sql" not in err
    assert main(["render", "--config", str(cfg)]) == 0
    assert not list(project.glob("sql/*/mail.sql")) and mine.exists()
    assert check(project, capsys)[0] == 0


def test_check_finds_the_files_of_a_dialect_dropped_from_the_declaration(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = project / "qgen.toml"
    cfg.write_text(
        queue_toml().replace('"postgres", "mysql", "mariadb", "sqlite"', '"sqlite"') + QUEUE_TWO
    )
    code, err = check(project, capsys)
    assert code == 1 and "sql/postgres/jobs.sql: orphaned" in err


def test_out_with_subfolders_and_the_out_option(tmp_path: Path) -> None:
    """`-o D` once wrote `out = "x/y"` to D/y/…: it replaces the whole out folder."""
    cfg = tmp_path / "qgen.toml"
    cfg.write_text('out = "x/y"\n' + queue_toml(), encoding="utf-8")
    assert main(["render", "--config", str(cfg)]) == 0
    assert (tmp_path / "x/y/sqlite/jobs.sql").is_file()
    assert main(["render", "--config", str(cfg), "-o", str(tmp_path / "D")]) == 0
    assert (tmp_path / "D/sqlite/jobs.sql").is_file()
    assert not (tmp_path / "D/y").exists()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out.startswith("qgen ")


def test_what_runs_is_what_was_validated() -> None:
    """The generator reads each file back with the runtime's reader: every statement the
    runtime holds for generated_examples is one the validator saw, with the kind it wrote."""
    decl = __import__("qgen.declaration", fromlist=["load_declaration"]).load_declaration(
        REPO / "generated_examples" / "qgen.toml"
    )
    for path, text in render_declaration(decl).items():
        on_disk = read_rendered(REPO / "generated_examples" / path)
        assert (REPO / "generated_examples" / path).read_text(encoding="utf-8") == text
        for name, step in on_disk.statements.items():
            assert step, name
            assert all(isinstance(s.kind, Kind) for s in step)


def test_a_quote_or_placeholder_inside_a_comment_is_not_sql(engine: Engine) -> None:
    """An apostrophe in a comment once hid the placeholders after it from the driver-style
    rewrite: validation saw :id bound, the driver received `:id` as text."""
    sql = "UPDATE cm_q SET grp = 'parked' -- don't touch :group here\nWHERE id = :id"
    raw = {
        "dialects": [engine.dialect_name],
        "queues": {
            "cm": {
                "table": "cm_q",
                "form": "row_lock",
                "columns": {"id": "id", "payload": "payload", "group": "grp"},
                "custom": {"park": sql},
            }
        },
    }
    text = build_unit(parse_declaration(raw).queues["cm"], engine.dialect_name)
    queue = runtime.Queue(parse_rendered(text, "cm.sql"))
    (park,) = queue.rendered.require("custom.park")
    assert park.endswith("WHERE id = " + queue.dialect.placeholder("id"))
    assert "-- don't touch :group here" in park

    assert run(group_after_park(engine, queue, "cm_q")) == "parked"


def test_a_token_guard_inside_a_comment_does_not_count(tmp_path: Path) -> None:
    sql = "UPDATE jobs_q SET grp = 'x' WHERE id = :id -- AND locked_until = :token"
    refused(
        tmp_path,
        queue_toml("lease", f"[queues.jobs.custom]\npark = {json.dumps(sql)}\n"),
        "custom.park",
        "without the token guard",
    )


def test_an_unquoted_name_that_postgresql_folds_is_refused(tmp_path: Path) -> None:
    """Found by the declaration property test: a table declared Jobs_Q is created quoted, so
    the service's unquoted Jobs_Q (jobs_q to PostgreSQL) once validated and then failed."""
    toml = queue_toml(
        extra="[queues.jobs.custom]\npark = \"UPDATE Jobs_Q SET grp = 'x' WHERE id = :id\"\n"
    )
    err = refused(tmp_path, toml.replace('table = "jobs_q"', 'table = "Jobs_Q"'), "custom.park")
    assert (
        "reads the unquoted Jobs_Q as jobs_q, not the declared 'Jobs_Q' (\"Jobs_Q\" quoted)" in err
    )
    quoted = toml.replace('table = "jobs_q"', 'table = "Jobs_Q"').replace(
        "UPDATE Jobs_Q", 'UPDATE \\"Jobs_Q\\"'
    )
    code, err = render(tmp_path, quoted)
    assert code == 2 and "custom.park" in err and 'read "Jobs_Q" as text' in err, err
    per_dialect = quoted.replace(
        "park = ",
        "[queues.jobs.custom.park]\nmysql = \"UPDATE `Jobs_Q` SET grp = 'x' WHERE id = :id\"\n"
        "mariadb = \"UPDATE `Jobs_Q` SET grp = 'x' WHERE id = :id\"\ndefault = ",
    ).replace("[queues.jobs.custom]\n", "")
    assert render(tmp_path, per_dialect)[0] == 0, render(tmp_path, per_dialect)[1]
