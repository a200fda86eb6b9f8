"""Statements and commits per message: a tally, and a hook that counts what the runtime sends.

The Consumer is handed an opener whose connections get counting wrappers on their statement
and transaction methods (instance attributes, so the object stays the runtime's own
Connection class).
The raw baselines call the same tally by hand, with the same rules:

* statements: every round trip of SQL, BEGIN, COMMIT and ROLLBACK included;
* commits: every COMMIT, plus every write statement run outside a transaction (autocommit
  makes it a transaction of its own). A read outside a transaction is not a commit.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from runtime.connect import connect as runtime_connect
from runtime.drivers.base import Connection, Rows, Script

_WRITE = re.compile(
    r"^\s*(INSERT|UPDATE|DELETE|REPLACE|WITH\b.*\b(DELETE|UPDATE|INSERT)\b)", re.I | re.S
)


def is_write(sql: str) -> bool:
    return bool(_WRITE.match(sql))


@dataclass
class Tally:
    """Round trips and commits, summed over every connection of one run."""

    statements: int = 0
    commits: int = 0

    def statement(self, sql: str, in_transaction: bool) -> None:
        self.statements += 1
        if not in_transaction and is_write(sql):
            self.commits += 1

    def control(self, commit: bool = False) -> None:
        """BEGIN / ROLLBACK (commit=False) or COMMIT (commit=True)."""
        self.statements += 1
        if commit:
            self.commits += 1

    def __iadd__(self, other: Tally) -> Tally:
        self.statements += other.statements
        self.commits += other.commits
        return self


def instrument(conn: Connection, tally: Tally) -> Connection:
    """Count every statement and transaction call made on ``conn`` into ``tally``."""

    def counted(method: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        async def call(sql: str, params: Any = None) -> Any:
            tally.statement(sql, conn.in_transaction)
            return await method(sql, params)

        return call

    for name in ("execute", "fetchall", "fetchrows", "fetchone", "executemany"):
        setattr(conn, name, counted(getattr(conn, name)))

    begin, commit, rollback = conn.begin, conn.commit, conn.rollback

    async def counted_begin(immediate: bool = False) -> None:
        tally.control()
        await begin(immediate=immediate)

    async def counted_commit() -> None:
        tally.control(commit=True)
        await commit()

    async def counted_rollback() -> None:
        if conn.in_transaction and not conn.closed:  # otherwise the runtime sends nothing
            tally.control()
        await rollback()

    _count_pairs(conn, tally)
    conn.begin = counted_begin  # type: ignore[method-assign]
    conn.commit = counted_commit  # type: ignore[method-assign]
    conn.rollback = counted_rollback  # type: ignore[method-assign]
    if type(conn).run_script is not Connection.run_script:
        # the driver runs a step's statements itself, in one trip to its thread, past the
        # wrappers above: its script is counted as it runs (BEGIN and COMMIT when it opens
        # its own transaction), into the tally once it is back on the event loop
        run_script = conn.run_script

        async def counted_script(script: Script) -> Rows:
            ran: list[str] = []
            own = not conn.in_transaction
            try:
                return await run_script(_noted(script, ran))
            finally:
                if own:
                    tally.control()
                for sql in ran:
                    tally.statement(sql, True)
                if own:
                    tally.control(commit=True)

        conn.run_script = counted_script  # type: ignore[method-assign]
    return conn


def _count_pairs(conn: Connection, tally: Tally) -> None:
    """The pairs a driver may send in one trip, past ``instrument``'s wrappers: counted as
    the statements they are (the default implementations call the wrapped methods)."""
    commit_begin = conn.commit_begin
    begin_fetchrows, execute_commit = conn.begin_fetchrows, conn.execute_commit

    async def counted_commit_begin() -> None:
        if conn.chains_transactions:
            tally.control(commit=True)
            tally.control()
        await commit_begin()

    async def counted_begin_fetchrows(sql: str, params: Any = None) -> Rows:
        tally.control()
        tally.statement(sql, True)
        return await begin_fetchrows(sql, params)

    async def counted_execute_commit(sql: str, params: Any = None) -> int:
        tally.statement(sql, True)
        tally.control(commit=True)
        return await execute_commit(sql, params)

    conn.commit_begin = counted_commit_begin  # type: ignore[method-assign]
    if type(conn).begin_fetchrows is not Connection.begin_fetchrows:
        conn.begin_fetchrows = counted_begin_fetchrows  # type: ignore[method-assign]
    if type(conn).execute_commit is not Connection.execute_commit:
        conn.execute_commit = counted_execute_commit  # type: ignore[method-assign]


def _noted(script: Script, ran: list[str]) -> Script:
    """``script``, noting each statement it runs."""
    try:
        request = next(script)
        while True:
            ran.append(request[0])
            request = script.send((yield request))
    except StopIteration as done:
        return done.value


def counting_opener(url: str, tally: Tally) -> Callable[[], Awaitable[Connection]]:
    """An opener for ``runtime.Consumer(opener, …)``: each connection it opens counts into
    ``tally``."""

    async def open_counted() -> Connection:
        return instrument(await runtime_connect(url), tally)

    return open_counted
