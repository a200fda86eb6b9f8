"""Servers that speak a dialect's protocol but behave apart are recognised from what they say of
themselves (``runtime.contract.dialects.recognise``), and a form unsafe there is refused in one line
naming the safe one. The strings are the engines' own, as their documentation and trackers
show them; the real Galera cluster is in test_galera.py."""

from __future__ import annotations

import pytest
from support.engines import Engine, run
from support.queues import make_queue

from runtime.contract.dialects import recognise
from runtime.contract.errors import ConfigurationError
from runtime.queue import check_server

IDENTITIES = [
    # (dialect, what the driver reads, the server recognised or None)
    (
        "mariadb",
        "version=10.11.19-MariaDB-0+deb12u1; version_comment=Debian 12; wsrep_on=ON",
        "MariaDB Galera cluster",
    ),
    (
        "mariadb",
        "version=10.11.19-MariaDB-0+deb12u1; version_comment=Debian 12; wsrep_on=OFF",
        None,
    ),
    ("mysql", "version=8.0.36; version_comment=MySQL Community Server - GPL", None),
    (
        "mysql",
        "version=8.0.11-TiDB-v8.5.6; version_comment=TiDB Server (Apache License 2.0) "
        "Community Edition, MySQL 8.0 compatible",
        "TiDB",
    ),
    ("mysql", "version=8.0.30-Vitess; version_comment=Version: 19.0.4", "Vitess"),
    (
        "mysql",
        "version=8.0.28; version_comment=Source distribution; aurora_version=3.04.0",
        "Amazon Aurora MySQL",
    ),
    (
        "postgres",
        "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)",
        "CockroachDB",
    ),
    (
        "postgres",
        "PostgreSQL 11.2-YB-2.18.0.0-b0 on x86_64-pc-linux-gnu, compiled by clang version "
        "15.0.3, 64-bit",
        "YugabyteDB",
    ),
    (
        "postgres",
        "PostgreSQL 15.19 (Debian 15.19-0+deb12u1) on x86_64-pc-linux-gnu, compiled by gcc",
        None,
    ),
    ("sqlite", "3.40.1", None),
]


@pytest.mark.parametrize(("dialect", "identity", "expected"), IDENTITIES)
def test_recognise(dialect: str, identity: str, expected: str | None) -> None:
    server = recognise(dialect, identity)
    assert (server.name if server else None) == expected


REFUSED = [
    (
        "version=10.11.19-MariaDB; wsrep_on=ON",
        "mariadb",
        "advisory",
        "GET_LOCK is granted per node",
    ),
    ("version=8.0.11-TiDB-v8.5.6", "mysql", "row_lock", "pingcap/tidb#69720"),
    ("CockroachDB CCL v23.1.11", "postgres", "advisory", "cockroachdb/cockroach#13546"),
]


@pytest.mark.parametrize(("identity", "dialect", "form", "why"), REFUSED)
def test_unsafe_form_refused_in_one_line(
    identity: str, dialect: str, form: str, why: str, tmp_path
) -> None:
    # the queue is only rendered here (sqlite: no server needed); the check reads its form
    qt = run(make_queue(Engine("sqlite", f"sqlite:///{tmp_path / 'q.db'}", "sqlite"), form))
    with pytest.raises(ConfigurationError) as caught:
        check_server(qt.queue, recognise(dialect, identity))
    text = str(caught.value)
    assert "\n" not in text and why in text and 'declare form = "lease"' in text


def test_lease_allowed_everywhere_recognised(tmp_path) -> None:
    qt = run(make_queue(Engine("sqlite", f"sqlite:///{tmp_path / 'q.db'}", "sqlite"), "lease"))
    for dialect, identity, _ in IDENTITIES:
        assert check_server(qt.queue, recognise(dialect, identity)) is None


def test_row_lock_on_galera_costs_a_warning(tmp_path) -> None:
    qt = run(make_queue(Engine("sqlite", f"sqlite:///{tmp_path / 'q.db'}", "sqlite"), "row_lock"))
    cost = check_server(qt.queue, recognise("mariadb", "wsrep_on=ON"))
    assert cost is not None and "row_lock on a MariaDB Galera cluster" in cost and "lease" in cost


def test_plain_servers_not_taken_for_others(engine: Engine) -> None:
    """The engines here (a plain MariaDB, PostgreSQL, SQLite) are recognised as themselves."""
    import runtime

    async def identity() -> tuple[str, str]:
        async with await runtime.connect(engine.url) as conn:
            return conn.dialect.name, await conn.server_identity()

    dialect, text = run(identity())
    assert recognise(dialect, text) is None, text
