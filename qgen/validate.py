"""Validation in layers: sqlglot parses each statement as the runtime will read it, our per-dialect rules catch what it accepts wrongly, then the column, parameter and data-statement checks; each statement's kind comes from its parse tree."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import TokenType

from qgen.declaration import DeclarationError, GeneratorBug, QueueDeclaration, Unit
from runtime.contract.dialects import PENDING_KEY, Dialect
from runtime.contract.rendered import Kind
from runtime.contract.sqltext import driver_params, to_named

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


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


#: words an engine refuses as an unquoted name: PostgreSQL's reserved keywords
#: (pg_get_keywords() category R), the words SQLite's parser will not take as a column in
#: SELECT, UPDATE or INSERT, and MySQL's reserved words (MariaDB reads MySQL's SQL)
RESERVED = {
    "postgres": _words(
        "all analyse analyze and any array as asc asymmetric both case cast check collate "
        "column constraint create current_catalog current_date current_role current_time "
        "current_timestamp current_user default deferrable desc distinct do else end except "
        "false fetch for foreign from grant group having in initially intersect into lateral "
        "leading limit localtime localtimestamp not null offset on only or order placing "
        "primary references returning select session_user some symmetric table then to "
        "trailing true union unique user using variadic when where window with"
    ),
    "sqlite": _words(
        "add all alter and as autoincrement between case cast check collate commit constraint "
        "create default deferrable delete distinct drop else escape except exists foreign "
        "from group having in index insert intersect into is isnull join limit not notnull "
        "null on or order primary references returning select set table then to union unique "
        "update using values when where"
    ),
    "mysql": frozenset(sqlglot.Dialect.get_or_raise("mysql").generator_class.RESERVED_KEYWORDS),
}

#: LISTEN, which sqlglot does not read: the one spelling qgen renders (a quoted channel)
_LISTEN = re.compile(r'LISTEN "[A-Za-z_][A-Za-z0-9_.]{0,62}"')

#: what a service's own SQL may be: statements on rows, never on the schema or on rights
DATA_STATEMENTS = (exp.Select, exp.SetOperation, exp.Insert, exp.Update, exp.Delete)


def _fail(
    path: Path | str, unit: Unit, d: Dialect, name: str, origin: str, problem: str, fix: str
) -> DeclarationError:
    """The error for one statement: the service's SQL names its key; a template's block is
    qgen's own SQL, so its failure is a GeneratorBug keyed "(rendered <block>)"."""
    where = f"queue '{unit.name}'" if isinstance(unit, QueueDeclaration) else "outbox"
    if origin == "template":
        return GeneratorBug(path, where, f"(rendered {name})", f"{problem} [{d.name}]", fix)
    return DeclarationError(path, where, origin, f"{problem} [{d.name}]", fix)


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
    trees = [t for t in sqlglot.parse(named, read=dialect.sqlglot) if isinstance(t, exp.Expression)]
    if len(trees) != 1:
        raise ParseError(f"expected one statement, found {len(trees)}")
    if isinstance(trees[0], exp.Update) and not trees[0].expressions:
        raise ParseError("UPDATE without SET assignments")  # sqlglot reads `UPDATE t SET WHERE …`
    return trees[0]


def _returning_rule(node: exp.Expr, d: Dialect) -> str | None:
    if not (
        isinstance(node, exp.Returning)
        or (isinstance(node, exp.Expression) and node.args.get("returning"))
    ):
        return None
    parent = node.parent if isinstance(node, exp.Returning) else node
    kinds = {
        exp.Update: d.update_returning,
        exp.Delete: d.delete_returning,
        exp.Insert: d.insert_returning,
    }
    for kind, ok in kinds.items():
        if isinstance(parent, kind) and not ok:
            return f"{kind.__name__.upper()} … RETURNING is not accepted by {d.floor_text}"
    return None


def _lock_rule(node: exp.Expr, d: Dialect) -> str | None:
    if not isinstance(node, exp.Lock):
        return None
    if not d.skip_locked:
        return f"locking clauses (FOR UPDATE/SKIP LOCKED) are not accepted by {d.floor_text}"
    if not node.args.get("update") and d.sqlglot == "mysql":
        return "FOR SHARE is not accepted by MariaDB; use LOCK IN SHARE MODE or FOR UPDATE"
    return None


def _modifying_cte_rule(node: exp.Expr, d: Dialect) -> str | None:
    modifying = isinstance(node, exp.CTE) and isinstance(
        node.this, exp.Insert | exp.Update | exp.Delete
    )
    if modifying and not d.data_modifying_cte:
        return f"a data-modifying WITH (… DELETE/UPDATE/INSERT …) is not accepted by {d.floor_text}"
    return None


def _lock_function_rule(node: exp.Expr, d: Dialect) -> str | None:
    if not isinstance(node, exp.Func):
        return None
    name = (node.name if isinstance(node, exp.Anonymous) else node.sql_name()).lower()
    if name in PG_LOCK_FUNCS and d.name != "postgres":
        return f"{name}() exists only on PostgreSQL"
    if name in MYSQL_LOCK_FUNCS and d.sqlglot != "mysql":
        return f"{name}() exists only on MySQL and MariaDB"
    return None


def _change_limit_rule(node: exp.Expr, d: Dialect) -> str | None:
    if (
        isinstance(node, exp.Update | exp.Delete)
        and node.args.get("limit")
        and d.name in ("postgres", "sqlite")
    ):
        return f"{type(node).__name__.upper()} … LIMIT is not accepted by {d.floor_text}; use WHERE id IN (SELECT … LIMIT n)"
    return None


def _limit_subquery_rule(node: exp.Expr, d: Dialect) -> str | None:
    if not (isinstance(node, exp.Update | exp.Delete) and d.sqlglot == "mysql"):
        return None
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


# each rule looks at one node of the tree; on a node, the first rule that objects wins
_NODE_RULES: tuple[Callable[[exp.Expr, Dialect], str | None], ...] = (
    _returning_rule,
    _lock_rule,
    _modifying_cte_rule,
    _lock_function_rule,
    _change_limit_rule,
    _limit_subquery_rule,
)


def dialect_rules(tree: exp.Expression, d: Dialect) -> str | None:
    """Constructs sqlglot reads in every dialect but the engine rejects; the first problem, or None."""
    for node in tree.walk():
        for rule in _NODE_RULES:
            problem = rule(node, d)
            if problem:
                return problem
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


def case_problem(
    tree: exp.Expression, d: Dialect, declared: set[str], tables: set[str]
) -> str | None:
    """An unquoted name the engine folds to something other than the declared one: on
    PostgreSQL an unquoted Jobs_Q means jobs_q, not the table "Jobs_Q" qgen created.

    Only names that reach a declared table or column count: a name the statement defines
    itself (``AS id``, a WITH or a derived table) and the names read back from it (``ins.id``,
    ``id`` from a derived table) are the statement's own, folded alike where defined and read.
    """
    if not d.folds_unquoted:
        return None
    by_fold = {n.lower(): n for n in declared if n != n.lower()}
    if not by_fold:
        return None
    names = _Names(tree, tables)
    for ident in tree.find_all(exp.Identifier):
        name = ident.name
        if ident.quoted or name.lower() not in by_fold or name.lower() in declared:
            continue
        if names.own(ident):
            continue
        wanted = by_fold[name.lower()]
        return (
            f"{d.floor_text.split()[0]} reads the unquoted {name} as {name.lower()}, not "
            f"the declared {wanted!r} ({d.quote_ident(wanted)} quoted)"
        )
    return None


def reserved_problem(tree: exp.Expression, d: Dialect, declared: set[str]) -> str | None:
    """A declared name that is a reserved word of the engine, written unquoted: sqlglot may
    read `SET order = NULL` as a name where SQLite refuses it."""
    reserved = RESERVED[d.sqlglot]
    by_fold = {n.lower(): n for n in declared if n.lower() in reserved}
    for ident in tree.find_all(exp.Identifier):
        if not ident.quoted and ident.name.lower() in by_fold:
            wanted = by_fold[ident.name.lower()]
            return (
                f"{ident.name} is a reserved word in {d.floor_text.split()[0]}, not a name "
                f"unless quoted ({d.quote_ident(wanted)})"
            )
    return None


def _folded(ident: exp.Expression | None) -> str:
    """A name as a folding engine compares it: unquoted in lower case, quoted as written."""
    if not isinstance(ident, exp.Identifier):
        return ""
    return ident.name if ident.quoted else ident.name.lower()


_SCOPES = (exp.Select, exp.Update, exp.Delete, exp.Insert)


class _Names:
    """What the names of one statement refer to: a declared table, or the statement's own."""

    def __init__(self, tree: exp.Expression, tables: set[str]) -> None:
        self.ctes = {
            _folded(cte.args["alias"].this): cte.this
            for cte in tree.find_all(exp.CTE)
            if isinstance(cte.args.get("alias"), exp.TableAlias)
        }
        self.aliases = {_folded(a.this) for a in tree.find_all(exp.TableAlias)} | set(self.ctes)
        self.tables = tables
        #: how the statement names the declared tables: by their name, or their alias
        self.ours = {
            _folded(t.args["alias"].this) if t.alias else _folded(t.this)
            for t in tree.find_all(exp.Table)
            if self.is_ours(t)
        }

    def is_ours(self, source: exp.Expression) -> bool:
        return (
            isinstance(source, exp.Table)
            and source.name in self.tables
            and _folded(source.this) not in self.ctes
        )

    def own(self, ident: exp.Identifier) -> bool:
        """True when the identifier defines or reads a name of the statement's own."""
        parent = ident.parent
        if isinstance(parent, exp.TableAlias) or (
            isinstance(parent, exp.Alias) and ident.arg_key == "alias"
        ):
            return True  # AS id, WITH ins AS (…), (…) AS r: a definition
        if isinstance(parent, exp.Table) and ident.arg_key == "this":
            return _folded(ident) in self.ctes  # FROM ins
        if isinstance(parent, exp.Column):
            if ident.arg_key == "table":  # ins.id's ins: a WITH or an alias of the statement
                return _folded(ident) in self.aliases
            if ident.arg_key == "this":
                if parent.table:  # r.id: the declared table's column only through its name
                    return _folded(parent.args["table"]) not in self.ours
                return self._unqualified_own(parent, _folded(ident))
        return False

    def _unqualified_own(self, col: exp.Column, name: str) -> bool:
        """An unqualified column resolves in its query's own sources first, then outward: the
        statement's own when a derived source or an output alias has it before a declared
        table does."""
        node: exp.Expr | None = col
        while node is not None:
            scope = node.parent
            if isinstance(scope, exp.CTE):
                return True  # a WITH's body sees nothing outside it
            if isinstance(scope, _SCOPES):
                order = scope.args.get("order")
                if order is not None and col.find_ancestor(exp.Order) is order:
                    outputs = scope.expressions if isinstance(scope, exp.Select) else []
                    if name in {
                        _folded(a.args["alias"]) for a in outputs if isinstance(a, exp.Alias)
                    }:
                        return True  # ORDER BY an output column
                sources = _sources(scope)
                if any(name in self._outputs(s) for s in sources):
                    return True
                if any(self.is_ours(s) for s in sources):
                    return False
                if any(self._unknown(s) for s in sources):
                    return True  # another table of the service's may have it: not ours to know
            node = scope
        return True  # read from no declared table: not ours to know

    def _unknown(self, source: exp.Expression) -> bool:
        """A table the declaration does not describe (neither its own nor a WITH)."""
        return (
            isinstance(source, exp.Table)
            and isinstance(source.this, exp.Identifier)
            and not self.is_ours(source)
            and _folded(source.this) not in self.ctes
        )

    def _outputs(self, source: exp.Expression) -> set[str]:
        """The column names a derived source gives: a subquery's, or a WITH's."""
        body: exp.Expression | None = None
        if isinstance(source, exp.Subquery):
            body = source.this
        elif isinstance(source, exp.Table):  # FROM ins: a WITH of the statement
            body = self.ctes.get(_folded(source.this))
        alias = source.args.get("alias")
        out = {_folded(c) for c in alias.columns} if isinstance(alias, exp.TableAlias) else set()
        if body is None:
            return out
        returning = body.args.get("returning")
        exprs = returning.expressions if isinstance(returning, exp.Returning) else []
        if isinstance(body, exp.Select | exp.SetOperation):
            exprs = body.selects
        for e in exprs:
            if isinstance(e, exp.Alias):
                out.add(_folded(e.args["alias"]))
            elif isinstance(e, exp.Column):
                out.add(_folded(e.this))
        return out


def _sources(scope: exp.Expression) -> list[exp.Expression]:
    """The tables and derived tables a query, UPDATE, DELETE or INSERT reads directly."""
    out: list[exp.Expression] = []
    target = scope.this if isinstance(scope, exp.Update | exp.Delete | exp.Insert) else None
    if isinstance(target, exp.Schema):  # INSERT INTO t (a, b)
        target = target.this
    if target is not None:
        out.append(target)
    for key in ("from_", "using"):
        part = scope.args.get(key)
        if isinstance(part, exp.From):
            out.append(part.this)
        elif isinstance(part, list):
            out += part
    out += [j.this for j in scope.args.get("joins") or []]
    return out


def _names(unit: Unit) -> tuple[set[str], set[str]]:
    """The unit's own tables (by their last part) and the columns its SQL may name."""
    # sqlglot names a table by its last part (its schema apart)
    tables = {unit.table.rpartition(".")[2]}
    allowed_cols = set(unit.columns.values())
    if isinstance(unit, QueueDeclaration):
        if unit.dead_letter and unit.dead_letter.table:
            tables.add(unit.dead_letter.table.rpartition(".")[2])
        allowed_cols |= set(unit.other_columns)
        if unit.has("dedupe_key"):
            allowed_cols.add(PENDING_KEY)
    return tables, allowed_cols


def _name_problem(
    fail: Callable[[str, str], Exception],
    tree: exp.Expression,
    d: Dialect,
    tables: set[str],
    allowed_cols: set[str],
) -> None:
    """Raise for a name the engine folds or reserves, or a column the declaration lacks."""
    problem = case_problem(tree, d, tables | allowed_cols, tables)
    if problem:
        raise fail(problem, "quote the name as qgen creates it, or declare it in lower case")
    problem = reserved_problem(tree, d, tables | allowed_cols)
    if problem:
        raise fail(problem, "quote the name as qgen creates it, or declare another name")
    problem = column_problem(tree, allowed_cols, tables)
    if problem:
        raise fail(
            problem,
            f"use one of {', '.join(sorted(allowed_cols))}, or declare it under columns",
        )


def _check_sql(
    fail: Callable[[str, str], Exception],
    sql: str,
    d: Dialect,
    origin: str,
    kind: str,
    tables: set[str],
    allowed_cols: set[str],
) -> Kind:
    """Check one statement of a block; return its kind."""
    own = origin != "template"
    if not own and d.listen_notify and _LISTEN.fullmatch(sql):
        return Kind.WRITES  # changes no row; run for its effect
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
    _name_problem(fail, tree, d, tables, allowed_cols)
    if own:
        unknown = [n for n in driver_params(sql) if n not in PARAMS[kind]]
        if unknown:
            raise fail(
                f"unknown parameter :{unknown[0]}",
                f"the runtime binds only :{', :'.join(sorted(PARAMS[kind]))}",
            )
    return kind_of(tree)


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
    tables, allowed_cols = _names(unit)
    kinds: dict[str, tuple[Kind, ...]] = {}
    for name, sqls in statements.items():
        origin = origins.get(name, "template")
        own = origin != "template"

        def fail(problem: str, fix: str, name: str = name, origin: str = origin) -> Exception:
            return _fail(path, unit, d, name, origin, problem, fix)

        found = [_check_sql(fail, sql, d, origin, kind, tables, allowed_cols) for sql in sqls]
        if own and isinstance(unit, QueueDeclaration) and unit.partitioned:
            _partition_key_problem(fail, sqls, d, unit.columns["processed_at"])
        lease = own and isinstance(unit, QueueDeclaration) and unit.form == "lease"
        if lease and sqls and "token" not in driver_params(sqls[0]):
            raise fail(
                "a lease-form statement without the token guard",
                f"add AND {unit.columns['locked_until']} = :token to its first statement's WHERE",
            )
        kinds[name] = tuple(found)
    return kinds


def _partition_key_problem(
    fail: Callable[[str, str], Exception], sqls: tuple[str, ...], d: Dialect, column: str
) -> None:
    """A partitioned table is ranged by processed_at: an UPDATE that sets it moves the row to
    another partition, and a consumer waiting to lock that row then fails instead of skipping
    it. The service's own SQL must move the row as the rendered ack does."""
    for sql in sqls:
        for update in parse(sql, d).find_all(exp.Update):
            for assignment in update.expressions:
                target = assignment.this if isinstance(assignment, exp.EQ) else None
                if isinstance(target, exp.Column) and _folded(target.this) == column:
                    raise fail(
                        f"an UPDATE of {column} moves the row to another partition of a "
                        "partitioned table, and a consumer waiting on the row then fails",
                        f"move the row as the rendered ack does: WITH moved AS (DELETE … "
                        f"RETURNING …) INSERT … SELECT … with {column} set, or use "
                        'layout = "plain"',
                    )


def _statement_word(tree: exp.Expression) -> str:
    """The statement's leading keyword(s) for a message: DROP, TRUNCATE, CREATE, GRANT, …"""
    if isinstance(tree, exp.Command):
        return str(tree.this).upper()
    return tree.key.upper().replace("TRUNCATETABLE", "TRUNCATE")
