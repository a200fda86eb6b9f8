"""Opening a connection from a URL: scheme → driver, then the server's version and dialect.

``connect()`` is the only way the runtime opens a database connection. It picks the driver from
the URL's scheme, reads the server's version, sets ``conn.dialect`` to the engine actually
reached (a ``mysql://`` URL that lands on MariaDB gets the ``mariadb`` dialect) and refuses
servers older than the dialect's floor.
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit, urlunsplit

from runtime.contract.dialects import DIALECTS, Dialect, dialect_for_scheme
from runtime.contract.errors import ConfigurationError, ServerTooOld
from runtime.drivers.base import Connection, redact_url

ACCEPTED_FORMS = (
    "postgresql://user[:password]@host[:port][,host[:port]...]/database (or postgres://)",
    "mysql://user[:password]@host[:port][,host[:port]...]/database",
    "mariadb://user[:password]@host[:port][,host[:port]...]/database",
    "sqlite:///relative/path.db, sqlite:////absolute/path.db or sqlite:///:memory:"
    " (SQLite's own URI parameters may follow: ?mode=ro, ?mode=rw, ?mode=rwc)",
)
# Query-string options a mysql:// or mariadb:// URL may carry, and how to read them.
_MYSQL_OPTIONS: dict[str, type] = {
    "unix_socket": str,
    "connect_timeout": int,
    "read_timeout": int,
    "write_timeout": int,
    # TCP keepalives and the user timeout of the socket, named as libpq names them
    "keepalives": int,
    "keepalives_idle": int,
    "keepalives_interval": int,
    "keepalives_count": int,
    "tcp_user_timeout": int,
    # session variables (SET SESSION name = value)
    "innodb_lock_wait_timeout": int,
    "max_statement_time": float,
    "max_execution_time": int,
}


def _bad_url(url: str, why: str) -> ConfigurationError:
    return ConfigurationError(
        f"cannot use database URL {redact_url(url)!r}: {why}; accepted forms: "
        + "; ".join(ACCEPTED_FORMS)
    )


async def connect(url: str, *, read_only: bool = False, **kwargs: Any) -> Connection:
    """Open a connection to the database at ``url``, checked against the dialect's floor.

    ``kwargs`` are passed to the driver's own connect (psycopg, PyMySQL or sqlite3).

    ``read_only=True`` opens a connection for reading only (stats, the dead-letter listing),
    which may be a replica: every transaction of its session is read-only (PostgreSQL
    ``default_transaction_read_only``, MySQL/MariaDB ``SET SESSION TRANSACTION READ ONLY``,
    SQLite ``PRAGMA query_only``), so a write sent there fails instead of landing; and on
    PostgreSQL libpq prefers a standby (``target_session_attrs=prefer-standby`` unless the
    URL says otherwise) instead of insisting on a writable server.

    A server URL may list several hosts, each with its own port (``h1:5432,h2:5433``,
    ``[::1]:5432``): libpq tries them in its own order, keeping to writable servers
    (``target_session_attrs=read-write`` unless the URL says otherwise); MySQL/MariaDB
    connect to the first that answers.

    A SQLite URL opens its file, creating it when it does not exist (a service's first run,
    the demo); its query string is handed to SQLite as URI parameters, so
    ``sqlite:///app.db?mode=rw`` refuses a missing file and ``?mode=ro`` opens it read-only.
    The qgen commands refuse a missing file unless the URL says ``?mode=rwc``
    (``check_url``).

    Raises ConfigurationError for a URL it cannot use, a driver that is not installed or a
    login the server refuses for a reason retrying cannot fix (wrong password, unknown user or
    database, an sslmode it cannot meet); ConnectionLost when the server cannot be reached
    (or is starting up or shutting down); ServerTooOld when it is below the floor.
    """
    parts, dialect = _parsed(url)
    hosts = split_hosts(url, parts.netloc) if dialect.name != "sqlite" else []

    conn: Connection
    if dialect.name == "postgres":
        from runtime.drivers.postgres import open_postgres

        # libpq parses the URI itself (keeping sslmode=…, options=… and friends; no host means
        # its Unix socket); it only needs the scheme normalised (postgresql+psycopg:// is not
        # one it knows).
        conninfo = urlunsplit(("postgresql", parts.netloc, parts.path, parts.query, ""))
        conn = await open_postgres(url, conninfo, read_only=read_only, **kwargs)
    elif dialect.name in ("mysql", "mariadb"):
        from runtime.drivers.mysql import open_mysql

        options = _mysql_options(url, parts.query)
        if not any(host for host, _ in hosts) and "unix_socket" not in options:
            raise _bad_url(url, "it names no host")
        database = unquote(parts.path.lstrip("/")) or None
        if database is not None and "/" in database:
            raise _bad_url(url, f"{database!r} is not a database name")
        conn = await open_mysql(
            url,
            hosts=[(host or "127.0.0.1", port or 3306) for host, port in hosts]
            or [("127.0.0.1", 3306)],
            user=unquote(parts.username) if parts.username else None,
            password=unquote(parts.password) if parts.password is not None else None,
            database=database,
            dialect_name=dialect.name,
            options=options,
            read_only=read_only,
            **kwargs,
        )
    else:
        from runtime.drivers.sqlite import open_sqlite

        path = _sqlite_path(url, parts.netloc, parts.path)
        conn = await open_sqlite(url, path, query=parts.query, read_only=read_only, **kwargs)

    try:
        version_text = await conn.server_version_text()
        if dialect.name in ("mysql", "mariadb"):
            # The URL's scheme picks the driver; the server's own words pick the dialect.
            dialect = DIALECTS["mariadb" if "mariadb" in version_text.lower() else "mysql"]
            conn.dialect = dialect
        conn.server_version = check_server_version(dialect, version_text)
    except ServerTooOld as exc:
        await conn.close()
        raise ServerTooOld(f"the server at {conn.url} is too old: {exc}") from None
    except BaseException:
        await conn.close()
        raise
    return conn


#: a way to open connections: ``lambda: runtime.connect(url, sslrootcert=…)``, a pool's
#: acquire, a test's instrumented opener
Opener = Callable[[], Awaitable[Connection]]


def opener(url_or_open: str | Opener) -> Opener:
    """A URL as an opener (``runtime.connect(url)``), or the service's own opener as it is."""
    if isinstance(url_or_open, str):
        url = url_or_open
        return lambda: connect(url)
    if not callable(url_or_open):
        raise ConfigurationError(
            f"expected a database URL or a function that opens a connection, not {url_or_open!r}"
        )
    return url_or_open


def split_hosts(url: str, netloc: str) -> list[tuple[str, int | None]]:
    """The hosts a URL lists, in order, as (host, port or None), without the user info.

    ``u:pw@h1:5433,h2,[::1]:5434`` → ``[("h1", 5433), ("h2", None), ("::1", 5434)]``: each host
    may carry its own port, an IPv6 address goes in brackets, a host is percent-decoded (libpq
    takes ``%2Fvar%2Frun%2Fpostgresql`` as a Unix socket's directory). An empty host list (or
    an empty host in it) means the driver's default host. Raises ConfigurationError naming the
    host whose port is not a number from 1 to 65535.
    """
    hostlist = netloc.rpartition("@")[2]
    if not hostlist:
        return []
    hosts: list[tuple[str, int | None]] = []
    for item in hostlist.split(","):
        if item.startswith("["):
            host, bracket, rest = item[1:].partition("]")
            if not bracket or (rest and not rest.startswith(":")):
                raise _bad_url(url, f"host {item!r} is not [IPv6 address] or [IPv6 address]:port")
            port_text = rest[1:]
        else:
            host, _, port_text = item.partition(":")
        host = unquote(host)
        if not port_text:
            hosts.append((host, None))
            continue
        if not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise _bad_url(
                url, f"the port {port_text!r} of host {host!r} is not a number from 1 to 65535"
            )
        hosts.append((host, int(port_text)))
    return hosts


def _mysql_options(url: str, query: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for key, value in parse_qsl(query, keep_blank_values=True):
        kind = _MYSQL_OPTIONS.get(key)
        if kind is None:
            raise _bad_url(
                url, f"unknown option {key!r} (known: {', '.join(sorted(_MYSQL_OPTIONS))})"
            )
        try:
            options[key] = kind(value)
        except ValueError:
            raise _bad_url(url, f"option {key}={value!r} is not a {kind.__name__}") from None
    return options


def _parsed(url: str) -> tuple[SplitResult, Dialect]:
    """The URL's parts and the dialect its scheme names, or the one error for a bad URL."""
    if not isinstance(url, str) or "://" not in url:
        raise _bad_url(str(url), "it has no scheme://")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise _bad_url(url, str(exc)) from None
    dialect = dialect_for_scheme(parts.scheme)
    if dialect is None:
        raise _bad_url(url, f"unknown scheme {parts.scheme!r}")
    return parts, dialect


def check_url(url: str) -> None:
    """What ``connect`` would refuse in the URL itself (no scheme, an unknown one, a bad
    port), as ConfigurationError before anything connects; and a SQLite file that does not
    exist unless the URL asks SQLite to create it (``?mode=rwc``): a mistyped path or a
    command run from another folder must not leave an empty database behind."""
    parts, dialect = _parsed(url)
    if dialect.name != "sqlite":
        split_hosts(url, parts.netloc)  # validates every host's port
        return
    path = _sqlite_path(url, parts.netloc, parts.path)
    creates = dict(parse_qsl(parts.query)).get("mode") == "rwc"
    if path == ":memory:" or creates or os.path.exists(path):
        return
    raise ConfigurationError(
        f"the SQLite database file {path!r} does not exist (in {os.getcwd()}); check the path "
        f"of {redact_url(url)!r}, or add ?mode=rwc to the URL to create it"
    )


def _sqlite_path(url: str, netloc: str, path: str) -> str:
    """``sqlite:///rel.db`` → ``rel.db``; ``sqlite:////abs.db`` → ``/abs.db``; ``:memory:``."""
    if netloc:
        raise _bad_url(url, f"a SQLite URL has no host (found {netloc!r}): use three slashes")
    # The first "/" only separates the empty host from the path.
    file_path = unquote(path[1:] if path.startswith("/") else path)
    if not file_path:
        raise _bad_url(url, "it names no file")
    return file_path


# ----------------------------------------------------------------- versions

_VERSION = re.compile(r"(\d+)(?:\.(\d+))?(?:\.(\d+))?")


def parse_server_version(dialect: Dialect, version: str) -> tuple[int, int, int]:
    """Read (major, minor, patch) from what a server says of itself.

    PostgreSQL: ``server_version_num`` (``150019`` → (15, 19, 0); ``90605`` → (9, 6, 5)) or the
    ``server_version`` text (``10.4``, ``15.19 (Debian …)``, ``PostgreSQL 15.19 on …``).
    MySQL/MariaDB: ``SELECT VERSION()`` (``8.0.36``, ``10.11.19-MariaDB-0+deb12u1``; the
    ``5.5.5-`` prefix of MariaDB's handshake is skipped). SQLite: ``3.40.1``.
    """
    text = version.strip()
    if dialect.name == "postgres" and re.fullmatch(r"\d{5,}", text):
        num = int(text)
        if num >= 100_000:  # PostgreSQL 10+: major * 10000 + minor
            return (num // 10_000, num % 10_000, 0)
        return (num // 10_000, num // 100 % 100, num % 100)
    if dialect.name in ("mysql", "mariadb") and text.startswith("5.5.5-"):
        text = text[len("5.5.5-") :]
    m = _VERSION.search(text)
    if m is None:
        raise ConfigurationError(f"cannot read a {_engine_name(dialect)} version from {version!r}")
    return (int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0))


def check_server_version(dialect: Dialect, version_string: str) -> tuple[int, int, int]:
    """Parse the server's version string and check it against ``dialect.floor``.

    Pure (no I/O), so tests can show it refusing old servers without running one. Raises
    ServerTooOld, e.g. "found MariaDB 10.5.3, needs MariaDB 10.6 or newer".
    """
    found = parse_server_version(dialect, version_string)
    if found < dialect.floor:
        shown = _show_version(dialect, found)
        raise ServerTooOld(
            f"found {_engine_name(dialect)} {shown}, needs {dialect.floor_text} or newer"
        )
    return found


def _engine_name(dialect: Dialect) -> str:
    # floor_text is "<Engine> <version>": the engine's name is everything before the version.
    return dialect.floor_text.rsplit(" ", 1)[0]


def _show_version(dialect: Dialect, v: tuple[int, int, int]) -> str:
    if dialect.name == "postgres" and v[0] >= 10:
        return f"{v[0]}.{v[1]}"  # PostgreSQL 10+ versions have two parts
    return f"{v[0]}.{v[1]}.{v[2]}"
