"""The private driver names the runtime uses exist in the installed libraries, and work.

runtime/drivers/private.py is the one place they are reached; an upgrade of PyMySQL or aiosqlite
that renames one fails here, loudly, naming it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import aiosqlite
import pymysql
import pytest

from runtime.contract.errors import ConfigurationError
from runtime.drivers import private


def test_every_private_name_exists_in_the_installed_library() -> None:
    libraries = {"pymysql": pymysql, "aiosqlite": aiosqlite}
    for library, dotted, why in private.PRIVATE_NAMES:
        owner_name, attribute = dotted.split(".")
        owner = getattr(libraries[library], owner_name)
        if attribute in ("_sock",):  # set on the instance by __init__
            instance = owner.__new__(owner)
            owner.__init__(instance, host="127.0.0.1", defer_connect=True)
            assert hasattr(instance, attribute), f"{library} {dotted} is gone ({why})"
        else:
            assert hasattr(owner, attribute) or attribute in owner.__init__.__code__.co_names, (
                f"{library} {dotted} is gone; the runtime uses it to {why}"
            )


def test_aiosqlite_privates_run_a_call_on_the_connection_thread(tmp_path: Path) -> None:
    async def scenario() -> None:
        db = await aiosqlite.connect(tmp_path / "p.db")
        try:
            raw = private.aiosqlite_raw(db)
            assert isinstance(raw, sqlite3.Connection)
            on_thread = private.aiosqlite_caller(db)
            assert await on_thread(lambda: raw.execute("SELECT 7").fetchone()) == (7,)
            assert private.aiosqlite_thread(db).is_alive()
        finally:
            await db.close()

    asyncio.run(scenario())


def test_pymysql_privates_reach_the_socket() -> None:
    my = pymysql.connect(host="127.0.0.1", user="root", defer_connect=True)
    assert private.mysql_socket(my) is None  # not connected yet
    private.mysql_force_close(my)  # closing an unconnected one is harmless


def test_a_missing_private_name_is_one_clear_error() -> None:
    class Renamed:
        pass

    with pytest.raises(ConfigurationError, match=r"aiosqlite .* has no Renamed\._conn"):
        private.aiosqlite_raw(Renamed())  # type: ignore[arg-type]
