"""The one dialect table: what differs between the engines, read by the generator and the runtime.

Pure data and the standard library only, so the runtime imports it without Jinja2 or sqlglot.
Everything a template or the runtime needs to know about an engine that is not SQL text lives
here; the SQL text that differs lives in ``templates/<dialect>/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    """One target engine: how to quote, how parameters are written, what it can do."""

    name: str
    #: the sqlglot dialect that parses this one (MariaDB is read as MySQL plus our own rules)
    sqlglot: str
    #: the quote character for identifiers
    quote: str
    #: the driver's parameter style: "pyformat" writes %(name)s, "named" writes :name
    paramstyle: str
    #: the claim forms this engine can run
    forms: tuple[str, ...]
    #: the oldest server this runs on, as (major, minor, patch)
    floor: tuple[int, int, int]
    #: a person's name for the engine and its floor, for errors
    floor_text: str
    #: engines whose servers accept files rendered for this dialect
    runs_on: tuple[str, ...]
    #: URL schemes that connect to it
    schemes: tuple[str, ...]
    #: UPDATE/DELETE … RETURNING, INSERT … RETURNING
    update_returning: bool
    delete_returning: bool
    insert_returning: bool
    #: FOR UPDATE SKIP LOCKED
    skip_locked: bool
    #: WITH x AS (DELETE … RETURNING …) INSERT …
    data_modifying_cte: bool
    #: partial indexes (CREATE INDEX … WHERE …)
    partial_index: bool
    #: the advisory lock keys live in the database (False: in the consumer's process)
    server_advisory: bool
    #: the advisory claim also takes the rows whose keys it kept, in the same statement (a
    #: data-modifying WITH): its file has no ``take``
    advisory_claim_takes: bool = False
    #: an unquoted identifier means its lower-case form (PostgreSQL); others keep it as written
    folds_unquoted: bool = False
    #: LISTEN/NOTIFY: the enqueue notifies a channel at commit and idle consumers listen
    listen_notify: bool = False
    #: a backslash in a string literal escapes (MySQL and MariaDB without NO_BACKSLASH_ESCAPES)
    backslash_escapes: bool = False
    #: the most bytes a TEXT column keeps (MySQL and MariaDB's TEXT; None: no limit that matters)
    text_bytes: int | None = None
    #: CREATE TABLE / CREATE INDEX run inside a transaction (False: each commits on its own,
    #: and commits a transaction the connection has open first: MySQL and MariaDB)
    transactional_ddl: bool = True
    #: the lease form's next claim, where the file has no ``ack_claim``, runs after the last
    #: batch's ``ack_many`` (a small batch, all acked) in one transaction and one trip to the
    #: connection's thread (``Connection.run_script``): SQLite, which has no data-modifying
    #: WITH to put both in one statement, and whose claim and ``ack_many`` were each a trip
    #: and a commit of their own
    lease_ack_before_claim: bool = False
    #: what a statement's error (``runtime.DatabaseError``'s text) says when its table or a
    #: column does not exist: a regular expression
    missing_schema: str = r"^$"

    def quote_ident(self, name: str) -> str:
        """Quote an already-validated identifier, e.g. ``quote_ident("order")`` → ``"order"``."""
        q = self.quote
        return f"{q}{name.replace(q, q + q)}{q}"

    def quote_table(self, name: str) -> str:
        """A table, schema-qualified or not: ``quote_table("app.jobs")`` → ``"app"."jobs"``."""
        return ".".join(self.quote_ident(part) for part in name.split("."))

    def quote_text(self, text: str) -> str:
        """A string literal for DDL, where nothing binds: ``quote_text("it's")`` → ``'it''s'``."""
        if self.backslash_escapes:
            text = text.replace("\\", "\\\\")
        return "'" + text.replace("'", "''") + "'"

    def placeholder(self, name: str) -> str:
        """The driver's spelling of a named parameter: ``%(id)s`` or ``:id``."""
        return f"%({name})s" if self.paramstyle == "pyformat" else f":{name}"


FORMS = ("row_lock", "lease", "advisory")
#: engines without partial indexes: the generated column that holds dedupe_key while the row
#: is pending (NULL otherwise), under the unique index
PENDING_KEY = "qgen_pending_key"

DIALECTS: dict[str, Dialect] = {
    "postgres": Dialect(
        name="postgres",
        sqlglot="postgres",
        quote='"',
        paramstyle="pyformat",
        forms=FORMS,
        floor=(11, 0, 0),
        floor_text="PostgreSQL 11",
        runs_on=("postgres",),
        schemes=("postgresql", "postgres"),
        update_returning=True,
        delete_returning=True,
        insert_returning=True,
        skip_locked=True,
        data_modifying_cte=True,
        partial_index=True,
        server_advisory=True,
        advisory_claim_takes=True,
        folds_unquoted=True,
        listen_notify=True,
        missing_schema=r"^Undefined(Table|Column):",
    ),
    "mysql": Dialect(
        name="mysql",
        sqlglot="mysql",
        quote="`",
        paramstyle="pyformat",
        forms=FORMS,
        # SKIP LOCKED arrived in 8.0.1, JSON_TABLE (the lease claim) in 8.0.4; both are
        # milestones before the first GA release, 8.0.11
        floor=(8, 0, 4),
        floor_text="MySQL 8.0.4",
        # MariaDB 10.6+ accepts what MySQL 8 accepts for the constructs we render.
        runs_on=("mysql", "mariadb"),
        schemes=("mysql",),
        update_returning=False,
        delete_returning=False,
        insert_returning=False,
        skip_locked=True,
        data_modifying_cte=False,
        partial_index=False,
        server_advisory=True,
        backslash_escapes=True,
        text_bytes=65_535,
        transactional_ddl=False,
        missing_schema=r"\((1146|1054), ",
    ),
    "mariadb": Dialect(
        name="mariadb",
        sqlglot="mysql",
        quote="`",
        paramstyle="pyformat",
        forms=FORMS,
        floor=(10, 6, 0),
        floor_text="MariaDB 10.6",
        runs_on=("mariadb",),
        schemes=("mariadb",),
        update_returning=False,
        delete_returning=True,
        insert_returning=True,
        skip_locked=True,
        data_modifying_cte=False,
        partial_index=False,
        server_advisory=True,
        backslash_escapes=True,
        text_bytes=65_535,
        transactional_ddl=False,
        missing_schema=r"\((1146|1054), ",
    ),
    "sqlite": Dialect(
        name="sqlite",
        sqlglot="sqlite",
        quote='"',
        paramstyle="named",
        forms=FORMS,
        floor=(3, 35, 0),
        floor_text="SQLite 3.35",
        runs_on=("sqlite",),
        schemes=("sqlite",),
        update_returning=True,
        delete_returning=True,
        insert_returning=True,
        skip_locked=False,
        data_modifying_cte=False,
        partial_index=True,
        server_advisory=False,
        lease_ack_before_claim=True,
        missing_schema=r"no such (table|column)",
    ),
}


def dialect_for_scheme(scheme: str) -> Dialect | None:
    """The dialect a URL scheme names (``postgresql`` → postgres), or None."""
    base = scheme.split("+", 1)[0].lower()
    for d in DIALECTS.values():
        if base in d.schemes:
            return d
    return None


# ------------------------------------------------------------------ servers


@dataclass(frozen=True)
class Server:
    """An engine that speaks one of the dialects' protocols but does not behave like a single
    server of it: a cluster, a distributed SQL engine, a managed fork. Recognised from what
    the server says of itself (``identity``: its version text and a few variables), at a
    consumer's start; a form it cannot run safely is refused there, naming ``safe``."""

    #: a person's name for it, in messages
    name: str
    #: the dialects whose URLs reach it
    dialects: tuple[str, ...]
    #: a regular expression searched in the server's identity text (see ``recognise``)
    pattern: str
    #: form → why it is unsafe there (a clause: "GET_LOCK locks on one node only …")
    refused: tuple[tuple[str, str], ...] = ()
    #: form → what it costs there, logged once as a warning when a consumer starts
    caution: tuple[tuple[str, str], ...] = ()
    #: the form to use instead of a refused one
    safe: str = "lease"

    def refusal(self, form: str) -> str | None:
        """Why ``form`` is refused on this server, or None."""
        return dict(self.refused).get(form)

    def cost(self, form: str) -> str | None:
        """What ``form`` costs on this server (a warning), or None."""
        return dict(self.caution).get(form)


#: engines recognised by what they say of themselves; the first that matches wins. A form is
#: refused only where the engine's own documentation or tracker shows it unsafe, or a run
#: here did (Galera); the rest is in docs/howto/scaling-out.md.
SERVERS: tuple[Server, ...] = (
    Server(
        name="MariaDB Galera cluster",
        dialects=("mariadb", "mysql"),
        pattern=r"\bwsrep_on=(ON|1)\b",
        refused=(
            (
                "advisory",
                "GET_LOCK is granted per node, so consumers on two nodes hold the same key and "
                "a message is handled and settled twice",
            ),
        ),
        caution=(
            (
                "row_lock",
                "FOR UPDATE SKIP LOCKED locks only on the node that runs it, so consumers on "
                "several nodes claim the same rows and handle them each; the cluster's "
                "certification aborts all but one batch at commit (settled once, counted as "
                "conflicts). Point every consumer at one node, or use lease, which handles "
                "each message once",
            ),
        ),
    ),
    Server(
        name="TiDB",
        dialects=("mysql", "mariadb"),
        pattern=r"-TiDB-",
        refused=(
            (
                "row_lock",
                "TiDB drops FOR UPDATE when SKIP LOCKED is given (pingcap/tidb#69720), so two "
                "consumers claim the same rows",
            ),
        ),
    ),
    Server(name="Vitess", dialects=("mysql", "mariadb"), pattern=r"-Vitess\b"),
    Server(name="Amazon Aurora MySQL", dialects=("mysql",), pattern=r"\baurora_version=\S"),
    Server(
        name="CockroachDB",
        dialects=("postgres",),
        pattern=r"CockroachDB",
        refused=(
            (
                "advisory",
                "CockroachDB's pg_try_advisory_lock is a stub that locks nothing "
                "(cockroachdb/cockroach#13546)",
            ),
        ),
    ),
    Server(
        name="YugabyteDB",
        dialects=("postgres",),
        pattern=r"-YB-",
        caution=(
            (
                "row_lock",
                "YugabyteDB ignores SKIP LOCKED under SERIALIZABLE: keep the consumers' "
                "sessions at READ COMMITTED (yb_enable_read_committed_isolation=true)",
            ),
        ),
    ),
)


def recognise(dialect: str, identity: str) -> Server | None:
    """The server among ``SERVERS`` that ``identity`` names, for a connection of ``dialect``.

    ``identity`` is what the driver reads of the server (``Connection.server_identity``):
    MySQL/MariaDB ``version=8.0.11-TiDB-v7.5.0; version_comment=…; wsrep_on=ON; …``,
    PostgreSQL the text of ``version()``. None: a plain server of the dialect.
    """
    for server in SERVERS:
        if dialect in server.dialects and re.search(server.pattern, identity):
            return server
    return None
