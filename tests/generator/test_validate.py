"""Validation in layers, each driven through a declaration (an override or a custom event) so
the error names the queue and the key: sqlglot's parse, our per-dialect rules for what sqlglot
accepts but the engine rejects, the column check, the parameter check, and the conversion of
:name placeholders to each driver's style."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

import qgen.render
from qgen.build import render_declaration
from qgen.cli import main
from qgen.declaration import DeclarationError, GeneratorBug, parse_declaration
from qgen.render import render_unit
from qgen.validate import parse
from runtime.contract.dialects import DIALECTS
from runtime.contract.sqltext import driver_params, named_params, to_driver, to_named

COLUMNS = {
    "id": "id",
    "payload": "payload",
    "group": "grp",
    "attempt": "attempt",
    "retry_after": "retry_after",
    "processed_at": "processed_at",
}


def declaration(dialect: str, sql: Any, *, key: str = "custom", form: str = "row_lock") -> dict:
    """One row-lock queue 'jobs' on table jobs_q whose ``key`` (custom.x or statements.ack)
    holds ``sql``; rendered for ``dialect`` only."""
    queue: dict[str, Any] = {"table": "jobs_q", "form": form, "columns": dict(COLUMNS)}
    if form == "lease":
        queue["columns"]["locked_until"] = "locked_until"
    if key == "custom":
        queue["custom"] = {"x": sql}
    else:
        queue["statements"] = {key: sql}
    return {"dialects": [dialect], "queues": {"jobs": queue}}


def check(dialect: str, sql: Any, **kw: Any) -> dict:
    """Render and validate; return the files (raises DeclarationError)."""
    return render_declaration(parse_declaration(declaration(dialect, sql, **kw), "svc/qgen.toml"))


def rejected(dialect: str, sql: Any, **kw: Any) -> DeclarationError:
    with pytest.raises(DeclarationError) as info:
        check(dialect, sql, **kw)
    exc = info.value
    assert exc.file == "svc/qgen.toml"
    assert exc.where == "queue 'jobs'"
    assert exc.problem.endswith(f"[{dialect}]"), exc.problem  # which dialect's SQL failed
    return exc


# ------------------------------------------------------------------ layer 1: sqlglot parses


@pytest.mark.parametrize(
    "sql",
    [
        "UPDAT jobs_q SET attempt = 1 WHERE id = :id",
        "UPDATE jobs_q SET attempt = 1 WHERE (id = :id",
        "UPDATE jobs_q SET attempt = 1 WHERE id = :id AND",
        "UPDATE jobs_q SET WHERE id = :id",  # sqlglot reads this; the engines do not
        "DELETE FROM jobs_q WHERE id = :id; DELETE FROM jobs_q WHERE id = :id",
    ],
)
@pytest.mark.parametrize("dialect", ["postgres", "mysql", "sqlite"])
def test_sql_that_does_not_parse(dialect: str, sql: str) -> None:
    exc = rejected(dialect, sql)
    assert exc.key == "custom.x"
    assert exc.problem.startswith("SQL does not parse (")
    assert exc.fix == f"write SQL that {DIALECTS[dialect].floor_text} accepts"


def test_parse_error_in_one_dialects_sql_names_that_dialect() -> None:
    sql = {
        "default": "UPDATE jobs_q SET attempt = 1 WHERE id = :id",
        "sqlite": "UPDATE jobs_q SET attempt = WHERE id = :id",
    }
    for dialect in ("postgres", "mysql", "mariadb"):
        check(dialect, sql)
    exc = rejected("sqlite", sql)
    assert exc.problem.startswith("SQL does not parse")


# ------------------------------------------------------------------ layer 2: dialect rules

RULES: list[tuple[str, str, list[str], list[str], str]] = [
    # (id, sql, dialects rejecting it, dialects accepting it, words of the problem)
    (
        "update-returning",
        "UPDATE jobs_q SET attempt = 1 WHERE id = :id RETURNING id",
        ["mysql", "mariadb"],
        ["postgres", "sqlite"],
        "UPDATE … RETURNING is not accepted by",
    ),
    (
        "delete-returning",
        "DELETE FROM jobs_q WHERE id = :id RETURNING id, payload",
        ["mysql"],
        ["mariadb", "postgres", "sqlite"],
        "DELETE … RETURNING is not accepted by MySQL 8.0.4",
    ),
    (
        "insert-returning",
        "INSERT INTO jobs_q (payload, grp) VALUES (:payload, :group) RETURNING id",
        ["mysql"],
        ["mariadb", "postgres", "sqlite"],
        "INSERT … RETURNING is not accepted by MySQL 8.0.4",
    ),
    (
        "skip-locked",
        "SELECT id FROM jobs_q WHERE id = :id FOR UPDATE SKIP LOCKED",
        ["sqlite"],
        ["postgres", "mysql", "mariadb"],
        "locking clauses (FOR UPDATE/SKIP LOCKED) are not accepted by SQLite 3.35",
    ),
    (
        "for-share",
        "SELECT id FROM jobs_q WHERE id = :id FOR SHARE",
        ["mysql", "mariadb"],
        ["postgres"],
        "FOR SHARE is not accepted by MariaDB",
    ),
    (
        "data-modifying-cte",
        "WITH moved AS (DELETE FROM jobs_q WHERE id = :id RETURNING id, payload, grp) "
        "INSERT INTO jobs_q (payload, grp) SELECT payload, grp FROM moved",
        ["mysql", "mariadb", "sqlite"],
        ["postgres"],
        "a data-modifying WITH (… DELETE/UPDATE/INSERT …) is not accepted by",
    ),
    (
        "pg-advisory-lock",
        "SELECT pg_try_advisory_lock(:id) AS locked",
        ["mysql", "mariadb", "sqlite"],
        ["postgres"],
        "pg_try_advisory_lock() exists only on PostgreSQL",
    ),
    (
        "pg-advisory-unlock",
        "SELECT pg_advisory_unlock(:id) AS unlocked",
        ["mysql", "sqlite"],
        ["postgres"],
        "pg_advisory_unlock() exists only on PostgreSQL",
    ),
    (
        "get-lock",
        "SELECT GET_LOCK('jobs', 0) AS locked",
        ["postgres", "sqlite"],
        ["mysql", "mariadb"],
        "get_lock() exists only on MySQL and MariaDB",
    ),
    (
        "release-lock",
        "SELECT RELEASE_LOCK('jobs') AS unlocked",
        ["postgres", "sqlite"],
        ["mysql", "mariadb"],
        "release_lock() exists only on MySQL and MariaDB",
    ),
    (
        "update-limit",
        "UPDATE jobs_q SET attempt = attempt + 1 WHERE grp = :group LIMIT 5",
        ["postgres", "sqlite"],
        ["mysql", "mariadb"],
        "UPDATE … LIMIT is not accepted by",
    ),
    (
        "delete-limit",
        "DELETE FROM jobs_q WHERE grp = :group LIMIT 5",
        ["postgres", "sqlite"],
        ["mysql", "mariadb"],
        "DELETE … LIMIT is not accepted by",
    ),
    (
        "mysql-limit-subquery-on-own-table",
        "UPDATE jobs_q SET attempt = attempt + 1 WHERE id IN "
        "(SELECT id FROM jobs_q WHERE grp = :group ORDER BY id LIMIT 5)",
        ["mysql", "mariadb"],
        ["postgres", "sqlite"],
        "MySQL rejects a LIMIT subquery on the table being changed",
    ),
]


@pytest.mark.parametrize(
    ("sql", "bad", "good", "words"), [r[1:] for r in RULES], ids=[r[0] for r in RULES]
)
def test_dialect_rules(sql: str, bad: list[str], good: list[str], words: str) -> None:
    # sqlglot alone accepts every one of these in every dialect: the rule is what refuses it
    for dialect in bad + good:
        parse(sql, DIALECTS[dialect])
    for dialect in good:
        check(dialect, sql)
    for dialect in bad:
        exc = rejected(dialect, sql)
        assert exc.key == "custom.x"
        assert words in exc.problem, exc.problem
        if "MySQL 8.0.4" in words or "SQLite" in words or "is not accepted by" in words:
            assert DIALECTS[dialect].floor_text in exc.problem or "MariaDB" in exc.problem
        assert exc.fix == f'give {dialect} its own SQL (custom.x.{dialect} = "…")'


def test_dialect_rule_in_an_override_names_the_override_key() -> None:
    exc = rejected(
        "mysql",
        "DELETE FROM jobs_q WHERE id = :id RETURNING id",
        key="ack",
    )
    assert exc.key == "statements.ack"
    assert exc.fix == 'give mysql its own SQL (statements.ack.mysql = "…")'


def test_per_dialect_table_satisfies_the_rule() -> None:
    sql = {
        "default": "DELETE FROM jobs_q WHERE id = :id RETURNING id",
        "mysql": "DELETE FROM jobs_q WHERE id = :id",
    }
    for dialect in DIALECTS:
        check(dialect, sql)


def test_limit_subquery_on_another_table_is_fine_on_mysql() -> None:
    # the rule is about the table being changed, not any LIMIT subquery
    check(
        "mysql",
        "UPDATE jobs_q SET attempt = 1 WHERE id IN "
        "(SELECT job_id FROM other_t ORDER BY job_id LIMIT 5)",
    )


# ------------------------------------------------------------------ layer 3: columns


@pytest.mark.parametrize(
    ("place", "sql"),
    [
        ("SET target", "UPDATE jobs_q SET done = 1 WHERE id = :id"),
        ("UPDATE WHERE", "UPDATE jobs_q SET attempt = 1 WHERE job_id = :id"),
        ("DELETE WHERE", "DELETE FROM jobs_q WHERE done IS NULL AND id = :id"),
        ("INSERT column list", "INSERT INTO jobs_q (payload, done) VALUES (:payload, 1)"),
        ("RETURNING", "DELETE FROM jobs_q WHERE id = :id RETURNING done"),
        ("SELECT list", "SELECT done FROM jobs_q WHERE id = :id"),
        ("SET value", "UPDATE jobs_q SET attempt = done WHERE id = :id"),
    ],
)
@pytest.mark.parametrize("dialect", ["postgres", "sqlite", "mariadb"])
def test_unknown_column(dialect: str, place: str, sql: str) -> None:
    exc = rejected(dialect, sql)
    assert exc.problem.startswith("column 'done' is not declared for this table") or (
        "'job_id'" in exc.problem
    ), (place, exc.problem)
    assert exc.fix == (
        "use one of attempt, grp, id, payload, processed_at, retry_after, "
        "or declare it under columns"
    )


def test_the_logical_name_is_not_the_column() -> None:
    # columns.group = "grp": SQL must use the table's real name
    exc = rejected("postgres", "UPDATE jobs_q SET \"group\" = 'later' WHERE id = :id")
    assert "column 'group' is not declared" in exc.problem
    check("postgres", "UPDATE jobs_q SET grp = 'later' WHERE id = :id")


def test_other_tables_columns_are_not_checked() -> None:
    check("postgres", "INSERT INTO audit_log (job_id, note) VALUES (:id, 'parked')")


def test_aliases_of_the_queue_table_are_checked() -> None:
    exc = rejected("postgres", "UPDATE jobs_q AS j SET attempt = 1 WHERE j.job_id = :id")
    assert "'job_id'" in exc.problem


def test_dead_letter_table_columns_are_checked() -> None:
    raw = {
        "dialects": ["postgres"],
        "queues": {
            "jobs": {
                "table": "jobs_q",
                "form": "row_lock",
                "max_attempts": 3,
                "dead_letter": {"table": "jobs_dead"},
                "columns": {
                    "id": "id",
                    "payload": "payload",
                    "attempt": "attempt",
                    "retry_after": "retry_after",
                },
                "custom": {
                    "bury": "INSERT INTO jobs_dead (id, payload, reason) "
                    "VALUES (:id, :payload, 'x')"
                },
            }
        },
    }
    with pytest.raises(DeclarationError) as info:
        render_declaration(parse_declaration(raw))
    assert "column 'reason' is not declared" in info.value.problem
    assert info.value.key == "custom.bury"


# ------------------------------------------------------------------ layer 4: parameters


@pytest.mark.parametrize("dialect", list(DIALECTS))
def test_unknown_parameter(dialect: str) -> None:
    exc = rejected(dialect, "UPDATE jobs_q SET attempt = 1 WHERE id = :bogus")
    assert exc.problem == f"unknown parameter :bogus [{dialect}]"
    assert exc.fix == (
        "the runtime binds only :attempt, :dead_group, :delay_s, :error, :group, :id, "
        ":lease_s, :payload, :token"
    )


def test_every_bound_parameter_is_accepted() -> None:
    sql = (
        "UPDATE jobs_q SET attempt = :attempt, grp = :dead_group, payload = :payload "
        "WHERE id = :id AND grp = :group AND CAST(:delay_s AS TEXT) <> '' "
        "AND CAST(:lease_s AS TEXT) <> '' AND CAST(:token AS TEXT) <> '' "
        "AND CAST(:error AS TEXT) <> ''"
    )
    check("postgres", sql)
    check("sqlite", sql)


def test_lease_statement_needs_the_token_in_its_first_statement() -> None:
    guarded = "UPDATE jobs_q SET locked_until = NULL WHERE id = :id AND locked_until = :token"
    check("postgres", guarded, form="lease")
    check("postgres", [guarded, "UPDATE jobs_q SET attempt = 1 WHERE id = :id"], form="lease")
    exc = rejected(
        "postgres", ["UPDATE jobs_q SET attempt = 1 WHERE id = :id", guarded], form="lease"
    )
    assert exc.problem == "a lease-form statement without the token guard [postgres]"
    assert exc.fix == "add AND locked_until = :token to its first statement's WHERE"
    # an override is held to the same guard
    exc = rejected("sqlite", "DELETE FROM jobs_q WHERE id = :id", key="ack", form="lease")
    assert exc.key == "statements.ack"
    # ':token' inside a string literal is not the guard
    exc = rejected(
        "postgres",
        "UPDATE jobs_q SET locked_until = NULL WHERE id = :id AND payload <> ':token'",
        form="lease",
    )
    assert "without the token guard" in exc.problem


@pytest.mark.parametrize("key", ["statements.ack", "statements.drop", "custom.x"])
def test_own_sql_may_not_update_the_partition_key_of_a_partitioned_table(key: str) -> None:
    """An UPDATE of processed_at moves the row between partitions, which fails a consumer
    waiting to lock it; the service's SQL must move the row as the rendered ack does."""
    section, _, name = key.partition(".")

    def partitioned(sql: str) -> dict:
        decl = declaration("postgres", sql, key=name if section == "statements" else "custom")
        decl["queues"]["jobs"]["layout"] = "partitioned"
        return render_declaration(parse_declaration(decl, "svc/qgen.toml"))

    with pytest.raises(DeclarationError) as info:
        partitioned("UPDATE jobs_q SET attempt = 0, processed_at = now() WHERE id = :id")
    exc = info.value
    assert exc.key == key
    assert exc.problem.startswith("an UPDATE of processed_at moves the row to another partition")
    assert "WITH moved AS (DELETE" in exc.fix
    # the rendered ack's shape is accepted, and so is an UPDATE that leaves the key alone
    partitioned(
        "WITH moved AS (DELETE FROM jobs_q WHERE id = :id AND processed_at IS NULL "
        "RETURNING id, payload, grp, attempt, retry_after) "
        "INSERT INTO jobs_q (id, payload, grp, attempt, retry_after, processed_at) "
        "SELECT id, payload, grp, attempt, retry_after, now() FROM moved"
    )
    partitioned("UPDATE jobs_q SET attempt = 0 WHERE id = :id")
    # a plain table takes the UPDATE as it is
    check("postgres", "UPDATE jobs_q SET processed_at = now() WHERE id = :id")


# ------------------------------------------------------------------ placeholders per driver

SERVICE_SQL = (
    "UPDATE jobs_q SET payload = '50% :id done', grp = 'a''b:id' "
    "WHERE id = :id AND CAST(:id AS TEXT)::text LIKE '1%' AND grp <> :group"
)
PYFORMAT = (
    "UPDATE jobs_q SET payload = '50%% :id done', grp = 'a''b:id' "
    "WHERE id = %(id)s AND CAST(%(id)s AS TEXT)::text LIKE '1%%' AND grp <> %(group)s"
)


def test_placeholders_become_pyformat_on_postgres() -> None:
    q = parse_declaration(declaration("postgres", SERVICE_SQL)).queues["jobs"]
    st = next(s for s in render_unit(q, "postgres").blocks if s.name == "custom.x")
    assert st.sql == [PYFORMAT]
    check("postgres", SERVICE_SQL)  # and the converted text validates


@pytest.mark.parametrize("dialect", ["mysql", "mariadb"])
def test_placeholders_become_pyformat_on_mysql(dialect: str) -> None:
    sql = "UPDATE jobs_q SET payload = '100%', grp = ':group' WHERE id = :id AND grp = :group"
    q = parse_declaration(declaration(dialect, sql)).queues["jobs"]
    st = next(s for s in render_unit(q, dialect).blocks if s.name == "custom.x")
    assert st.sql == [
        "UPDATE jobs_q SET payload = '100%%', grp = ':group' WHERE id = %(id)s AND grp = %(group)s"
    ]


def test_placeholders_stay_named_on_sqlite() -> None:
    sql = "UPDATE jobs_q SET payload = strftime('%Y', 'now') || ':id' WHERE id = :id"
    q = parse_declaration(declaration("sqlite", sql)).queues["jobs"]
    st = next(s for s in render_unit(q, "sqlite").blocks if s.name == "custom.x")
    assert st.sql == [sql]


def test_sqltext_round_trip() -> None:
    pg = DIALECTS["postgres"]
    assert to_driver(SERVICE_SQL, pg) == PYFORMAT
    assert to_named(PYFORMAT) == SERVICE_SQL
    assert named_params(SERVICE_SQL) == ["id", "group"]
    assert driver_params(PYFORMAT) == ["id", "group"]
    assert driver_params(to_driver(SERVICE_SQL, DIALECTS["sqlite"])) == ["id", "group"]
    # a PostgreSQL cast is not a parameter, a quoted identifier keeps its colon
    assert named_params('SELECT x::int, "a:b", `c:d`, :e') == ["e"]


# ------------------------------------------ names PostgreSQL folds, and the generator's own SQL

#: a queue whose table and columns PostgreSQL keeps only quoted
MIXED = {"table": "Orders", "form": "row_lock", "columns": {"id": "Id", "payload": "Body"}}


def mixed_case(sql: str) -> dict:
    return render_declaration(
        parse_declaration(
            {"dialects": ["postgres"], "queues": {"orders": {**MIXED, "custom": {"x": sql}}}},
            "svc/qgen.toml",
        )
    )


@pytest.mark.parametrize(
    "sql",
    [
        'UPDATE Orders SET "Body" = NULL WHERE "Id" = :id',
        'UPDATE "Orders" SET "Body" = NULL WHERE id = :id',
        'SELECT "Id" AS id FROM "Orders" WHERE id = :id',  # WHERE reads the table, not AS id
        'SELECT o.id FROM "Orders" AS o WHERE o."Id" = :id',
        'SELECT orders."Id" FROM "Orders" WHERE "Id" = :id',
        'INSERT INTO "Orders" (body) VALUES (:payload)',
        'UPDATE "Orders" SET "Body" = NULL WHERE "Id" = :id RETURNING id',
        'DELETE FROM "Orders" WHERE "Id" IN (SELECT "Id" FROM "Orders" WHERE body IS NULL)',
    ],
)
def test_an_unquoted_name_reaching_a_mixed_case_table_is_refused(sql: str) -> None:
    with pytest.raises(DeclarationError, match="reads the unquoted") as info:
        mixed_case(sql)
    assert info.value.key == "custom.x" and not isinstance(info.value, GeneratorBug)


@pytest.mark.parametrize(
    "sql",
    [
        'SELECT id FROM (SELECT "Id" AS id FROM "Orders") AS r WHERE id = :id',
        'SELECT "Id" AS id FROM "Orders" WHERE "Id" = :id ORDER BY id',
        'WITH x AS (SELECT "Id" AS id FROM "Orders" WHERE "Id" = :id) '
        'UPDATE "Orders" SET "Body" = NULL WHERE "Id" IN (SELECT id FROM x)',
        'WITH ins AS (INSERT INTO "Orders" ("Body") VALUES (:payload) RETURNING "Id" AS id) '
        "SELECT ins.id AS id FROM ins",
        'DELETE FROM "Orders" WHERE "Id" IN (SELECT id FROM other_table WHERE id = :id)',
    ],
)
def test_the_statements_own_names_are_not_the_declared_ones(sql: str) -> None:
    """AS id, a WITH, a derived table and another table's columns are the statement's own:
    PostgreSQL folds them alike where they are defined and where they are read."""
    assert mixed_case(sql)


def test_the_generators_own_sql_refused_is_a_bug_to_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A template block that fails validation is qgen's fault, never the declaration's: a
    GeneratorBug keyed by the block, and `qgen render` exits 3 asking for a report."""
    templates = tmp_path / "templates"
    shutil.copytree(qgen.render.TEMPLATES, templates)
    queue = templates / "base" / "queue.sql.j2"
    text = queue.read_text(encoding="utf-8")
    assert "SELECT ins.id AS id, " in text
    # a template that writes a declared name unquoted: PostgreSQL would read Id as id
    broken = 'SELECT ins.id AS id, (SELECT MAX(Id) FROM "Orders") AS m, '
    queue.write_text(text.replace("SELECT ins.id AS id, ", broken), "utf-8")
    monkeypatch.setattr(qgen.render, "TEMPLATES", templates)
    with pytest.raises(GeneratorBug) as info:
        mixed_case('UPDATE "Orders" SET "Body" = NULL WHERE "Id" = :id')
    assert info.value.key == "(rendered enqueue)" and "unquoted Id" in info.value.problem
    cfg = tmp_path / "qgen.toml"
    cfg.write_text(
        'dialects = ["postgres", "sqlite"]\n[queues.orders]\ntable = "Orders"\n'
        'form = "row_lock"\ncolumns = { id = "Id", payload = "Body" }\n',
        encoding="utf-8",
    )
    assert main(["render", "--config", str(cfg)]) == 3
    err = capsys.readouterr().err
    assert err.startswith("qgen: ") and err.count("\n") == 1, err
    assert "key '(rendered enqueue)': qgen refused SQL it wrote itself" in err
    assert "this is a bug in qgen, not in the declaration: please report it" in err


@pytest.mark.parametrize("dialect", ["sqlite", "postgres", "mariadb", "mysql"])
def test_a_declared_reserved_word_unquoted_is_refused(dialect: str) -> None:
    """Found by the declaration property test: sqlglot reads `SET order = NULL` as a name,
    SQLite (and every engine) refuses it; quoted, it runs."""
    q = DIALECTS[dialect].quote_ident
    queue = {"table": "jobs_q", "form": "row_lock", "columns": {**COLUMNS, "attempt": "order"}}
    sql = "UPDATE jobs_q SET {} = 0 WHERE id = :id"
    raw = {
        "dialects": [dialect],
        "queues": {"jobs": {**queue, "custom": {"x": sql.format("order")}}},
    }
    with pytest.raises(DeclarationError, match="order is a reserved word") as info:
        render_declaration(parse_declaration(raw))
    assert info.value.key == "custom.x" and not isinstance(info.value, GeneratorBug)
    raw["queues"]["jobs"]["custom"] = {"x": sql.format(q("order"))}
    assert render_declaration(parse_declaration(raw))
