"""Validation in layers: sqlglot parses each statement as the runtime will read it, our per-dialect rules catch what it accepts wrongly, then the column, parameter and data-statement checks; each statement's kind comes from its parse tree."""

from __future__ import annotations

import re
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from qgen.declaration import DeclarationError, QueueDeclaration, Unit
from runtime.dialects import PENDING_KEY, Dialect
from runtime.rendered import Kind
from runtime.sqltext import driver_params, to_named

# what the runtime binds for each kind of step; a service's SQL may use any of these
PARAMS = {
    "queue": {
        "id",
        "token",
        "group",
        "attempt",
        "dead_group",
        "payload",
        "delay_s",
        "lease_s",
        # why the delivery failed (retry, retry_after, dead letter, custom(reason=…))
        "error",
    },
    # the outbox binds a record's own fields; its key is :record_key (sqlglot's MySQL reader
    # takes :key for the keyword)
    "outbox": {"id", "payload", "topic", "record_key"},
}
PG_LOCK_FUNCS = {
    "pg_try_advisory_lock",
    "pg_advisory_lock",
    "pg_advisory_unlock",
    "pg_try_advisory_xact_lock",
    "pg_advisory_xact_lock",
    "pg_advisory_unlock_all",
    "hashtextextended",
}
MYSQL_LOCK_FUNCS = {"get_lock", "release_lock", "is_free_lock", "is_used_lock", "release_all_locks"}


#: LISTEN, which sqlglot does not read: the one spelling qgen renders (a quoted channel)
_LISTEN = re.compile(r'LISTEN "[A-Za-z_][A-Za-z0-9_.]{0,62}"')

#: what a service's own SQL may be: statements on rows, never on the schema or on rights
DATA_STATEMENTS = (exp.Select, exp.SetOperation, exp.Insert, exp.Update, exp.Delete)


def _fail(
    path: Path | str, unit: Unit, d: Dialect, name: str, origin: str, problem: str, fix: str
) -> DeclarationError:
    where = f"queue '{unit.name}'" if isinstance(unit, QueueDeclaration) else "outbox"
    key = origin if origin != "template" else f"(rendered {name})"
    return DeclarationError(path, where, key, f"{problem} [{d.name}]", fix)


def kind_of(tree: exp.Expression) -> Kind:
    """What a statement does with rows, from its parse tree: a query reads; a change
    returns rows when the statement itself (not a WITH inside it) has RETURNING, or when it
    is a query over a WITH that changes rows."""
    if isinstance(tree, exp.Select | exp.SetOperation):
        # a query over a data-modifying WITH (PostgreSQL's INSERT … RETURNING in a CTE)
        # writes, and its rows are the written ones
        changes = (exp.Insert, exp.Update, exp.Delete)
        if any(isinstance(cte.this, changes) for cte in tree.ctes):
            return Kind.WRITES_RETURNING
        return Kind.READS
    if isinstance(tree, exp.Insert | exp.Update | exp.Delete) and tree.args.get("returning"):
        return Kind.WRITES_RETURNING
    return Kind.WRITES


_NAMED_PARAM = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")


def parse(sql: str, dialect: Dialect) -> exp.Expression:
    """Parse one driver-style statement in the dialect (placeholders read as :name)."""
    # a parameter named like a keyword (:key) trips sqlglot's MySQL reader: read a prefixed name
    named = _NAMED_PARAM.sub(r":qp_\1", to_named(sql))
    trees = [t for t in sqlglot.parse(named, read=dialect.sqlglot) if t is not None]
    if len(trees) != 1:
        raise ParseError(f"expected one statement, found {len(trees)}")
    if isinstance(trees[0], exp.Update) and not trees[0].expressions:
        raise ParseError("UPDATE without SET assignments")  # sqlglot reads `UPDATE t SET WHERE …`
    return trees[0]


def dialect_rules(tree: exp.Expression, d: Dialect) -> str | None:
    """Constructs sqlglot reads in every dialect but the engine rejects; the first problem, or None."""
    for node in tree.walk():
        if isinstance(node, exp.Returning) or (
            isinstance(node, exp.Expression) and node.args.get("returning")
        ):
            parent = node.parent if isinstance(node, exp.Returning) else node
            kinds = {
                exp.Update: d.update_returning,
                exp.Delete: d.delete_returning,
                exp.Insert: d.insert_returning,
            }
            for kind, ok in kinds.items():
                if isinstance(parent, kind) and not ok:
                    return f"{kind.__name__.upper()} … RETURNING is not accepted by {d.floor_text}"
        if isinstance(node, exp.Lock):
            if not d.skip_locked:
                return (
                    f"locking clauses (FOR UPDATE/SKIP LOCKED) are not accepted by {d.floor_text}"
                )
            if not node.args.get("update") and d.sqlglot == "mysql":
                return "FOR SHARE is not accepted by MariaDB; use LOCK IN SHARE MODE or FOR UPDATE"
        modifying = isinstance(node, exp.CTE) and isinstance(
            node.this, exp.Insert | exp.Update | exp.Delete
        )
        if modifying and not d.data_modifying_cte:
            return f"a data-modifying WITH (… DELETE/UPDATE/INSERT …) is not accepted by {d.floor_text}"
        if isinstance(node, exp.Func):
            name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
            if name in PG_LOCK_FUNCS and d.name != "postgres":
                return f"{name}() exists only on PostgreSQL"
            if name in MYSQL_LOCK_FUNCS and d.sqlglot != "mysql":
                return f"{name}() exists only on MySQL and MariaDB"
        if (
            isinstance(node, exp.Update | exp.Delete)
            and node.args.get("limit")
            and d.name in ("postgres", "sqlite")
        ):
            return f"{type(node).__name__.upper()} … LIMIT is not accepted by {d.floor_text}; use WHERE id IN (SELECT … LIMIT n)"
        if isinstance(node, exp.Update | exp.Delete) and d.sqlglot == "mysql":
            target = node.this.name if isinstance(node.this, exp.Table) else None
            for sub in node.find_all(exp.Select):
                if (
                    sub.args.get("limit")
                    and target
                    and any(t.name == target for t in sub.find_all(exp.Table))
                ):
                    return (
                        "MySQL rejects a LIMIT subquery on the table being changed; "
                        "select the ids first (FOR UPDATE SKIP LOCKED), then change them"
                    )
    return None


def _targets(tree: exp.Expression) -> set[str]:
    """The tables a statement reads or writes by name."""
    return {t.name for t in tree.find_all(exp.Table) if t.name}


def column_problem(tree: exp.Expression, allowed: set[str], tables: set[str]) -> str | None:
    """A column of the queue's own table(s) that the declaration does not name, or None."""
    if not (_targets(tree) & tables):
        return None  # another table of the service's: its columns are not ours to know
    aliases = {a.alias for a in tree.find_all(exp.Alias)}
    aliases |= {c.alias_or_name for c in tree.find_all(exp.CTE)}
    other_aliases = {
        t.alias for t in tree.find_all(exp.Table) if t.alias and t.name not in tables
    } | {t.alias for t in tree.find_all(exp.TableAlias) if not isinstance(t.parent, exp.Table)}
    ours = tables | {t.alias for t in tree.find_all(exp.Table) if t.alias and t.name in tables}
    names: list[str] = []
    for col in tree.find_all(exp.Column):
        if col.table and col.table not in ours:
            continue  # qualified by another table or its alias: not ours to know
        if isinstance(col.parent, exp.CollateColumnConstraint):
            continue  # COLLATE utf8mb4_bin names a collation, read as a column
        scope = col.find_ancestor(exp.Select)
        if scope is not None and not ({t.name for t in scope.find_all(exp.Table)} & tables):
            continue  # a subquery that reads only other tables
        names.append(col.name)
    for schema in tree.find_all(exp.Schema):  # INSERT INTO t (a, b)
        if isinstance(schema.this, exp.Table) and schema.this.name in tables:
            names += [i.name for i in schema.expressions if isinstance(i, exp.Identifier)]
    for name in names:
        if name not in allowed and name not in aliases and name not in other_aliases:
            return f"column {name!r} is not declared for this table"
    return None


def quote_problem(sql: str, d: Dialect) -> str | None:
    """sqlglot reads "…" as a name in MySQL SQL; MySQL and MariaDB (without ANSI_QUOTES) read
    it as text, so a double-quoted table or column is a syntax error or a string there."""
    if d.sqlglot != "mysql":
        return None
    text = to_named(sql)
    for token in sqlglot.Dialect.get_or_raise(d.sqlglot).tokenize(text):
        if token.token_type == TokenType.STRING and text[token.start] == '"':
            return (
                f'MySQL and MariaDB read "{token.text}" as text, not a name (no ANSI_QUOTES); '
                "quote names with backticks and text with single quotes"
            )
    return None


def case_problem(tree: exp.Expression, d: Dialect, declared: set[str]) -> str | None:
    """An unquoted name the engine folds to something other than the declared one: on
    PostgreSQL an unquoted Jobs_Q means jobs_q, not the table "Jobs_Q" qgen created."""
    if not d.folds_unquoted:
        return None
    by_fold = {n.lower(): n for n in declared if n != n.lower()}
    for ident in tree.find_all(exp.Identifier):
        name = ident.name
        if not ident.quoted and name.lower() in by_fold and name.lower() not in declared:
            wanted = by_fold[name.lower()]
            return (
                f"{d.floor_text.split()[0]} reads the unquoted {name} as {name.lower()}, not "
                f"the declared {wanted!r} ({d.quote_ident(wanted)} quoted)"
            )
    return None


def validate_statements(
    unit: Unit,
    d: Dialect,
    statements: dict[str, tuple[str, ...]],
    origins: dict[str, str],
    path: Path | str = "qgen.toml",
) -> dict[str, tuple[Kind, ...]]:
    """Check every statement as read back from the rendered file; return each one's kind.

    ``origins`` says where a block came from ("template", "statements.ack", "custom.park").
    Raises DeclarationError for the first problem.
    """
    kind = "queue" if isinstance(unit, QueueDeclaration) else "outbox"
    # sqlglot names a table by its last part (its schema apart)
    tables = {unit.table.rpartition(".")[2]}
    allowed_cols = set(unit.columns.values())
    if isinstance(unit, QueueDeclaration):
        if unit.dead_letter and unit.dead_letter.table:
            tables.add(unit.dead_letter.table.rpartition(".")[2])
        allowed_cols |= set(unit.other_columns)
        if unit.has("dedupe_key"):
            allowed_cols.add(PENDING_KEY)
    kinds: dict[str, tuple[Kind, ...]] = {}
    for name, sqls in statements.items():
        origin = origins.get(name, "template")
        own = origin != "template"

        def fail(problem: str, fix: str, name: str = name, origin: str = origin) -> Exception:
            return _fail(path, unit, d, name, origin, problem, fix)

        found: list[Kind] = []
        for sql in sqls:
            if not own and d.listen_notify and _LISTEN.fullmatch(sql):
                found.append(Kind.WRITES)  # changes no row; run for its effect
                continue
            try:
                tree = parse(sql, d)
            except (ParseError, TokenError) as exc:
                msg = str(exc).splitlines()[0][:200]
                raise fail(
                    f"SQL does not parse ({msg})", f"write SQL that {d.floor_text} accepts"
                ) from None
            if own and not isinstance(tree, DATA_STATEMENTS):
                raise fail(
                    f"{_statement_word(tree)} is not a statement on rows",
                    "a service's own SQL may only SELECT, INSERT, UPDATE or DELETE rows; "
                    "change the schema or rights outside qgen",
                )
            problem = quote_problem(sql, d) or dialect_rules(tree, d)
            if problem:
                raise fail(problem, f'give {d.name} its own SQL ({origin}.{d.name} = "…")')
            problem = case_problem(tree, d, tables | allowed_cols)
            if problem:
                raise fail(
                    problem, "quote the name as qgen creates it, or declare it in lower case"
                )
            problem = column_problem(tree, allowed_cols, tables)
            if problem:
                raise fail(
                    problem,
                    f"use one of {', '.join(sorted(allowed_cols))}, or declare it under columns",
                )
            if own:
                unknown = [n for n in driver_params(sql) if n not in PARAMS[kind]]
                if unknown:
                    raise fail(
                        f"unknown parameter :{unknown[0]}",
                        f"the runtime binds only :{', :'.join(sorted(PARAMS[kind]))}",
                    )
            found.append(kind_of(tree))
        lease = own and isinstance(unit, QueueDeclaration) and unit.form == "lease"
        if lease and sqls and "token" not in driver_params(sqls[0]):
            raise fail(
                "a lease-form statement without the token guard",
                f"add AND {unit.columns['locked_until']} = :token to its first statement's WHERE",
            )
        kinds[name] = tuple(found)
    return kinds


def _statement_word(tree: exp.Expression) -> str:
    """The statement's leading keyword(s) for a message: DROP, TRUNCATE, CREATE, GRANT, …"""
    if isinstance(tree, exp.Command):
        return str(tree.this).upper()
    return tree.key.upper().replace("TRUNCATETABLE", "TRUNCATE")
