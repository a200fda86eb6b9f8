"""The raw baselines: the same rendered statements, run in a plain loop on the bare driver.

No runtime code runs here: the SQL text comes from the loaded file's ``rendered.statements``
and the engine's own driver executes it. The loop does what the outcome table says and
nothing more: claim a batch, decode each payload, settle it (ack; or, in the retry-once
scenario, the form's retry on a first delivery), commit or unlock as the form requires —
with no-op handlers, as the runtime does for quick handlers: a batch's settlements run as
one ``<outcome>_many`` statement per outcome (a row-lock batch in its claim's transaction;
a lease batch's in one transaction, id and token pairs; an advisory batch taken in one
step, settled in one transaction, then unlocked in one statement; on PostgreSQL a small
advisory or lease batch all acked is finished by the next claim, ``ack_claim``, and on
SQLite a small lease batch all acked by ``ack_many`` in the next claim's transaction, as the
runtime does).
A step of several statements (MariaDB's lease claim and advisory take) runs in one
transaction, its first row and ``ids`` bound to the statements after it, as the rendered
file documents. A worker stops when its claim finds nothing; a claim that listed ready rows
and then locked none of them (others hold them for now), pauses and claims again, as does
an advisory claim whose held rows were all settled by others since (at once): the runtime's
drain does the same.

Two baselines:

* **async** (the headline): asyncio tasks, one connection per worker, as the runtime runs —
  psycopg's ``AsyncConnection``; aiosqlite's public API (``execute``/``execute_fetchall``:
  one trip to its thread per statement); PyMySQL through a one-thread executor per
  connection (the way a blocking driver is called from asyncio at all), a statement a trip.
  On both of these a step of several statements, or several steps in one transaction, is
  one trip to the driver's thread, its BEGIN and COMMIT included (as the runtime's drivers
  run them).
* **sync** (MariaDB and SQLite only): PyMySQL and sqlite3 called directly, one thread per
  worker, no event loop at all. It shows what asyncio itself costs with blocking drivers.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from bench.counting import Tally
from runtime.contract.dialects import DIALECTS
from runtime.contract.rendered import Kind, Statement, Step
from runtime.forms.base import DEFER_MAX  # the largest batch the next claim finishes

#: libpq's status of a result of rows (``psycopg.pq.ExecStatus.TUPLES_OK``)
TUPLES_OK = 2
#: an advisory claim that found every listed key held waits this long before claiming again
#: (the runtime's Consumer: poll_interval / 10)
CONTENDED_SLEEP_S = 0.005

Statements = dict[str, Step]
Result = tuple[Sequence[Any], dict[str, int], int]  # rows, column → index, rowcount


def _encode(payload: Any) -> str:
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False)


def _decode(value: Any) -> Any:
    if isinstance(value, bytes | bytearray):
        value = value.decode()
    return json.loads(value) if isinstance(value, str) else value


def _cols(description: Any) -> dict[str, int]:
    return {d[0]: i for i, d in enumerate(description)}


def enqueue_params(payloads: Sequence[Any]) -> list[dict[str, Any]]:
    # the PostgreSQL enqueue notifies a channel (any name costs the same); others ignore it
    return [
        {"payload": _encode(p), "group": None, "delay_s": None, "channel": "qgen.bench"}
        for p in payloads
    ]


def pg_conninfo(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(("postgresql", parts.netloc, parts.path, parts.query, ""))


def sqlite_path(url: str) -> str:
    return url.removeprefix("sqlite:///")


_SQLITE_PRAGMAS = (
    "PRAGMA busy_timeout = 30000",
    "PRAGMA journal_mode = WAL",
    "PRAGMA synchronous = NORMAL",
)
_MARIADB_SESSION = (
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    "SET time_zone = '+00:00'",
)


def _pymysql_connect(url: str) -> Any:
    """A PyMySQL session set up as the runtime's driver sets it up (same semantics)."""
    import pymysql
    from pymysql.constants import CLIENT

    parts = urlsplit(url)
    conn = pymysql.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        database=unquote(parts.path.lstrip("/")) or None,
        charset="utf8mb4",
        autocommit=True,
        client_flag=CLIENT.FOUND_ROWS,
    )
    with conn.cursor() as cur:
        for sql in _MARIADB_SESSION:
            cur.execute(sql)
    return conn


def _sqlite3_connect(path: str) -> Any:
    import sqlite3

    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    for pragma in _SQLITE_PRAGMAS:
        conn.execute(pragma).close()
    return conn


# ------------------------------------------------------- async drivers (one trip each)


class _PgDriver:
    async def open(self, url: str) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(pg_conninfo(url), autocommit=True)
        # the planner settings every runtime session runs with (each statement planned once,
        # no JIT): the twin then pays what the SQL costs, not a re-plan of it at every call
        await self.conn.execute("SET plan_cache_mode = force_generic_plan")
        await self.conn.execute("SET jit = off")

    async def run(self, sql: Statement, params: dict[str, Any] | None) -> Result:
        cur = await self.conn.execute(sql, params)
        # the column names off the result itself, as the runtime's driver reads them:
        # ``cur.description`` builds a Column object a column at every access
        res = cur.pgresult
        if res is None or not (res.nfields or res.status == TUPLES_OK):
            return (), {}, cur.rowcount
        cols = {(res.fname(i) or b"").decode(): i for i in range(res.nfields)}
        return await cur.fetchall(), cols, cur.rowcount

    async def commit_begin(self) -> None:
        """COMMIT and the next BEGIN in one query, as the runtime's row-lock worker sends
        them when it claims again at once."""
        await self.conn.execute("COMMIT; BEGIN", prepare=False)

    async def close(self) -> None:
        await self.conn.close()


class OneTripSteps:
    """A step of several statements, or several steps in one transaction, in one trip to
    the thread the driver's statements run on, BEGIN and COMMIT included: what the
    runtime's MariaDB and SQLite drivers do (``Connection.run_script``), and what a
    hand-written loop on a blocking driver does with a transaction."""

    #: how the loop opens a transaction here
    begin_sql = "BEGIN"

    def _run(self, sql: str, params: dict[str, Any] | None) -> Result:
        raise NotImplementedError

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        raise NotImplementedError

    def _step(
        self, stmts: Step, params: dict[str, Any], own: bool, tally: Tally, found: list[int]
    ) -> Result:
        if own:
            tally.control()
            self._run(self.begin_sql, None)
        result = statements_in_turn(stmts, params, self._run, tally, found)
        if own:
            tally.control(commit=True)
            self._run("COMMIT", None)
        return result

    async def step(
        self, stmts: Step, params: dict[str, Any], own: bool, tally: Tally, found: list[int]
    ) -> Result:
        """A step of several statements in one trip, BEGIN and COMMIT (``own``) included."""
        result: Result = await self._in_thread(self._step, stmts, params, own, tally, found)
        return result

    def _steps(
        self, steps: list[tuple[Step, dict[str, Any]]], tally: Tally, found: list[int]
    ) -> list[Result]:
        tally.control()
        self._run(self.begin_sql, None)
        results = [
            statements_in_turn(stmts, params, self._run, tally, found) for stmts, params in steps
        ]
        tally.control(commit=True)
        self._run("COMMIT", None)
        return results

    async def steps(
        self, steps: list[tuple[Step, dict[str, Any]]], tally: Tally, found: list[int]
    ) -> list[Result]:
        """Several steps in one transaction, BEGIN and COMMIT included, in one trip: a
        batch's settlements of several outcomes, or (SQLite's lease form) the last batch's
        acks and the next claim, as the runtime's driver runs them."""
        results: list[Result] = await self._in_thread(self._steps, steps, tally, found)
        return results


class _AiosqliteDriver(OneTripSteps):
    begin_sql = "BEGIN IMMEDIATE"

    async def open(self, url: str) -> None:
        import sqlite3

        import aiosqlite

        self.db = await aiosqlite.connect(sqlite_path(url), isolation_level=None)
        self.db.row_factory = sqlite3.Row
        for pragma in _SQLITE_PRAGMAS:
            await self.db.execute(pragma)

    async def run(self, sql: Statement, params: dict[str, Any] | None) -> Result:
        # the generator wrote what each statement returns; BEGIN and COMMIT are plain text
        if getattr(sql, "kind", Kind.WRITES) is not Kind.WRITES:
            rows = await self.db.execute_fetchall(sql, params or {})
            rows = list(rows)
            cols = {k: i for i, k in enumerate(rows[0].keys())} if rows else {}
            return rows, cols, len(rows)
        cur = await self.db.execute(sql, params or {})
        return (), {}, cur.rowcount

    def _run(self, sql: str, params: dict[str, Any] | None) -> Result:
        # on aiosqlite's thread, on its sqlite3 connection
        cur = self.db._conn.execute(sql, params or {})
        try:
            if cur.description is None:
                return (), {}, cur.rowcount
            rows = cur.fetchall()
            return rows, _cols(cur.description), len(rows)
        finally:
            cur.close()

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        # aiosqlite has no public call for a function of several statements on its thread:
        # its own queue, one trip (as the runtime's SQLite driver goes)
        return await self.db._execute(fn, *args)

    async def close(self) -> None:
        await self.db.close()


class _PyMySQLExecutorDriver(OneTripSteps):
    async def open(self, url: str) -> None:
        self.executor = ThreadPoolExecutor(max_workers=1)
        loop = asyncio.get_running_loop()
        self.conn = await loop.run_in_executor(self.executor, _pymysql_connect, url)
        self.cur = self.conn.cursor()

    def _run(self, sql: str, params: dict[str, Any] | None) -> Result:
        cur = self.cur
        cur.execute(sql, params)
        if cur.description is None:
            return (), {}, cur.rowcount
        return cur.fetchall(), _cols(cur.description), cur.rowcount

    async def run(self, sql: Statement, params: dict[str, Any] | None) -> Result:
        return await asyncio.get_running_loop().run_in_executor(
            self.executor, self._run, sql, params
        )

    async def _in_thread(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn, *args)

    async def close(self) -> None:
        await asyncio.get_running_loop().run_in_executor(self.executor, self.conn.close)
        self.executor.shutdown(wait=False)


ASYNC_DRIVERS: dict[str, Callable[[], Any]] = {
    "postgres": _PgDriver,
    "sqlite": _AiosqliteDriver,
    "mariadb": _PyMySQLExecutorDriver,
}


class _Loop:
    """What any hand-written consumer of these statements does; shared by both baselines."""

    def __init__(
        self,
        engine: str,
        st: Statements,
        retry_once: bool,
        batch: int,
        concurrency: int,
        lease_s: float | None,
        tally: Tally,
        counts: Counter[str],
        keys: set[int] | None,
        keys_lock: threading.Lock,
    ) -> None:
        self.engine, self.st, self.retry_once = engine, st, retry_once
        self.params: dict[str, Any] = {"limit": batch, "group": None, "lease_s": lease_s}
        # the advisory claim looks past its batch by the workers claiming beside it
        self.params["scan"] = batch * concurrency
        self.tally, self.counts, self.keys, self.keys_lock = tally, counts, keys, keys_lock
        self.in_tx = False
        #: how many rows each SELECT of the last step of several statements found
        self.found: list[int] = []

    def contended(self) -> bool:
        """The last claim listed ready rows, then locked none of them (MariaDB's claims list,
        then lock skipping locked rows): others hold them for now, so pause and claim again,
        as the runtime does, rather than stop this worker."""
        return any(self.found)

    def acks_before_claim(self) -> bool:
        """The lease form's last batch, all acked, is finished by ``ack_many`` in the next
        claim's transaction, where the file has no ``ack_claim`` (SQLite), as the runtime
        does (a claim of one statement, with no limits before it)."""
        return (
            "ack_claim" not in self.st
            and DIALECTS[self.engine].lease_ack_before_claim
            and len(self.st["claim"]) == 1
        )

    def settle_name(self, attempt: Any) -> str:
        return "retry" if self.retry_once and attempt == 1 else "ack"

    def begin_sql(self, immediate: bool) -> str:
        return "BEGIN IMMEDIATE" if immediate and self.engine == "sqlite" else "BEGIN"

    def leased(self, rows: Sequence[Any], c: dict[str, int]) -> list[tuple[str, Any, Any]]:
        """A lease batch decoded, as its settlements ``(outcome, id, token)``."""
        settle = []
        for row in rows:
            _decode(row[c["payload"]])
            settle.append((self.settle_name(row[c["attempt"]]), row[c["id"]], row[c["token"]]))
        return settle

    def held(self, rows: Sequence[Any], c: dict[str, int]) -> list[int]:
        """The advisory claim's rows whose keys this worker now holds (at most limit)."""
        if self.keys is None:  # the server took the keys: the held column says which
            return [r[c["id"]] for r in rows if r[c["held"]]]
        held: list[int] = []
        with self.keys_lock:
            for r in rows:
                if r[c["id"]] not in self.keys and len(held) < self.params["limit"]:
                    self.keys.add(r[c["id"]])
                    held.append(r[c["id"]])
        return held

    def grouped(
        self, settle: list[tuple[str, Any, Any]], by_token: bool
    ) -> list[tuple[str | None, dict[str, Any], str, int]]:
        """A batch's settlements ``(outcome, id, token)`` as the runtime groups them: one
        ``<outcome>_many`` statement per outcome, by ids (the lease form: id and token
        pairs); ``None`` for an outcome with no statement (the advisory retry: the unlock
        returns its rows). Each: (step, params, outcome, how many)."""
        by: dict[str, list[tuple[Any, Any]]] = {}
        for name, row_id, token in settle:
            by.setdefault(name, []).append((row_id, token))
        out: list[tuple[str | None, dict[str, Any], str, int]] = []
        for name, rows in by.items():
            many = f"{name}_many"
            if many not in self.st:
                out.append((None, {}, name, len(rows)))
            elif by_token:
                pairs = json.dumps([[i, t] for i, t in rows], default=str)
                out.append((many, {"pairs": pairs, "delay_s": None}, name, len(rows)))
            else:
                ids = json.dumps([i for i, _ in rows])
                out.append((many, {"ids": ids, "delay_s": None}, name, len(rows)))
        return out

    def count(self, name: str, n: int, rows: Sequence[Any] | None) -> None:
        """``n`` settlements of ``name``; with ``rows`` (the lease form's), only the ids it
        returned settled, the rest lost their lease."""
        done = n if rows is None else len(rows)
        self.counts[name] += done
        if done < n:
            self.counts["lease_lost"] += n - done

    def unlock_local(self, ids: list[int]) -> None:
        assert self.keys is not None
        with self.keys_lock:
            self.keys.difference_update(ids)


class _AsyncWorker(_Loop):
    def __init__(self, driver: Any, *args: Any) -> None:
        super().__init__(*args)
        self.drv = driver

    async def begin(self, immediate: bool = False) -> None:
        self.tally.control()
        await self.drv.run(self.begin_sql(immediate), None)
        self.in_tx = True

    async def end(self, commit: bool) -> None:
        self.tally.control(commit=commit)
        await self.drv.run("COMMIT" if commit else "ROLLBACK", None)
        self.in_tx = False

    async def commit_begin(self) -> None:
        self.tally.control(commit=True)
        self.tally.control()
        await self.drv.commit_begin()

    async def step(self, name: str, params: dict[str, Any]) -> Result:
        stmts = self.st[name]
        self.found = []
        if len(stmts) == 1:
            self.tally.statement(stmts[0], self.in_tx)
            return await self.drv.run(stmts[0], params)
        if not isinstance(self.drv, OneTripSteps):
            # only MariaDB's files have steps of several statements (claims, take, _many)
            raise NotImplementedError(f"{name}: a step of several statements on {self.engine}")
        # the whole step in one trip to the driver's thread, as the runtime's driver runs it
        result: Result = await self.drv.step(stmts, params, not self.in_tx, self.tally, self.found)
        return result

    async def settle_all(
        self, settle: list[tuple[str, Any, Any]], by_token: bool, own_tx: bool = True
    ) -> None:
        """The batch's settlements; in a transaction of their own (``own_tx``) when there
        are several statements, as the runtime does (one commits on its own)."""
        groups = self.grouped(settle, by_token)
        own_tx = own_tx and sum(step is not None for step, *_ in groups) > 1
        if own_tx and isinstance(self.drv, OneTripSteps):
            # every statement of every outcome in one trip to the driver's thread
            ran = [(step, params, name, n) for step, params, name, n in groups if step is not None]
            self.found = []
            results = await self.drv.steps(
                [(self.st[step], params) for step, params, _, _ in ran], self.tally, self.found
            )
            for (_, _, name, n), result in zip(ran, results, strict=True):
                self.count(name, n, result[0] if by_token else None)
            for step, _, name, n in groups:
                if step is None:
                    self.count(name, n, None)
            return
        if own_tx:
            await self.begin()
        for step, params, name, n in groups:
            rows = (await self.step(step, params))[0] if step is not None else None
            self.count(name, n, rows if by_token else None)
        if own_tx:
            await self.end(commit=True)

    async def run(self, form: str) -> None:
        if form == "row_lock":
            # PostgreSQL: a batch's COMMIT and the next one's BEGIN in one query, as the
            # runtime sends them when it claims again at once
            chains = isinstance(self.drv, _PgDriver)
            while True:
                if not self.in_tx:
                    await self.begin(immediate=True)
                rows, c, _ = await self.step("claim", self.params)
                if not rows:
                    await self.end(commit=False)
                    if self.contended():
                        await asyncio.sleep(CONTENDED_SLEEP_S)
                        continue
                    return
                settle = []
                for row in rows:
                    _decode(row[c["payload"]])
                    settle.append((self.settle_name(row[c["attempt"]]), row[c["id"]], None))
                await self.settle_all(
                    settle, by_token=False, own_tx=False
                )  # the claim's transaction
                if chains:
                    await self.commit_begin()
                else:
                    await self.end(commit=True)
        elif form == "lease":
            await self._lease()
        else:
            await self._advisory()

    async def _lease(self) -> None:
        """The lease loop: claim, then the batch's settlements, which commit together; a
        small batch all acked is finished by the next claim, as the runtime does: on
        PostgreSQL in its statement (``ack_claim``, id and token pairs), on SQLite by
        ``ack_many`` and the claim in one transaction, one trip (``together``)."""
        together = self.acks_before_claim() and isinstance(self.drv, OneTripSteps)
        fused = "ack_claim" in self.st or together
        acked: list[list[Any]] = []  # the last batch, all acked: [id, token] pairs
        while True:
            if acked and together:
                pairs = json.dumps(acked, default=str)
                (done, _, _), (rows, c, _) = await self.drv.steps(
                    [(self.st["ack_many"], {"pairs": pairs}), (self.st["claim"], self.params)],
                    self.tally,
                    [],
                )
                self.count("ack", len(acked), done)
                acked = []
            elif acked:
                pairs = json.dumps(acked, default=str)
                rows, c, _ = await self.step("ack_claim", self.params | {"pairs": pairs})
                finished = json.loads(rows[0][c["finished"]]) if rows else []
                self.count("ack", len(acked), finished)
                acked = []
                rows = [r for r in rows if r[c["id"]] is not None]  # NULLs: none leased
            else:
                rows, c, _ = await self.step("claim", self.params)
            if not rows:
                if self.contended():
                    await asyncio.sleep(CONTENDED_SLEEP_S)
                    continue
                return
            settle = self.leased(rows, c)
            if fused and len(settle) <= DEFER_MAX and all(name == "ack" for name, _, _ in settle):
                acked = [[i, token] for _, i, token in settle]
                continue
            await self.settle_all(settle, by_token=True)

    async def _advisory(self) -> None:
        """The advisory loop: claim (and take), settle, unlock."""
        takes = "take" not in self.st  # the claim takes (PostgreSQL), releasing first
        fused = "ack_claim" in self.st  # and can finish the last batch first, all acked
        release: list[int] = []  # what the last batch finished, for the next claim
        acked: list[int] = []  # the last batch, all acked: the next claim finishes them
        while True:
            params = self.params | {"release": json.dumps(release)} if takes else self.params
            if acked:
                rows, c, _ = await self.step("ack_claim", params | {"ids": json.dumps(acked)})
                self.counts["ack"] += len(acked)
                release, acked = acked, []  # their keys: released by the next claim
            else:
                rows, c, _ = await self.step("claim", params)
                release = []
            if not rows:
                return
            held = self.held(rows, c)
            if not held:  # other workers hold every listed key for now
                await asyncio.sleep(CONTENDED_SLEEP_S)
                continue
            if takes:  # the taken column says which held rows it took
                got, tc = [r for r in rows if r[c["held"]] and r[c["taken"]]], c
            else:  # take the held rows: re-check and count (one step)
                got, tc, _ = await self.step("take", self.params | {"ids": json.dumps(held)})
            settle = []
            for row in got:
                _decode(row[tc["payload"]])
                settle.append((self.settle_name(row[tc["attempt"]]), row[tc["id"]], None))
            if fused and len(settle) <= DEFER_MAX and all(name == "ack" for name, _, _ in settle):
                acked = [i for _, i, _ in settle]
                if set(held) - set(acked):  # kept keys of rows settled since: unlock now
                    await self.step("unlock", {"ids": json.dumps(sorted(set(held) - set(acked)))})
                continue
            await self.settle_all(settle, by_token=False)  # they commit, then the unlock
            if self.keys is not None:
                self.unlock_local(held)
                continue
            if takes:  # acked rows: the next claim releases them; the others now
                release += [i for name, i, _ in settle if name == "ack"]
                now = set(held) - set(release)
                if now:
                    await self.step("unlock", {"ids": json.dumps(sorted(now))})
            else:
                await self.step("unlock", {"ids": json.dumps(held)})


async def drain_async(
    url: str,
    engine: str,
    st: Statements,
    form: str,
    retry_once: bool,
    concurrency: int,
    batch: int,
    lease_s: float | None,
    tally: Tally,
) -> Counter[str]:
    """``concurrency`` asyncio workers, each opening its own connection (inside the timing)."""
    counts: Counter[str] = Counter()
    keys: set[int] | None = set() if engine == "sqlite" else None
    keys_lock = threading.Lock()

    async def worker() -> None:
        driver = ASYNC_DRIVERS[engine]()
        await driver.open(url)
        try:
            await _AsyncWorker(
                driver,
                engine,
                st,
                retry_once,
                batch,
                concurrency,
                lease_s,
                tally,
                counts,
                keys,
                keys_lock,
            ).run(form)
        finally:
            await driver.close()

    try:
        async with asyncio.TaskGroup() as tg:  # one worker failing stops the others
            for _ in range(concurrency):
                tg.create_task(worker())
    except* Exception as group:
        raise group.exceptions[0] from None
    return counts


# ---------------------------------------------- sync: PyMySQL / sqlite3 on threads


def statements_in_turn(
    stmts: Step,
    params: dict[str, Any],
    one: Callable[[str, dict[str, Any]], Result],
    tally: Tally,
    found: list[int],
) -> Result:
    """A step's statements run one after the other by a blocking ``one`` (in the step's
    transaction), each SELECT's first row and ``ids`` bound to the statements after it;
    ``found`` receives how many rows each SELECT found. The rows of its last statement that
    returns rows; the count of the first that changes rows."""
    rows: Sequence[Any] = ()
    cols: dict[str, int] = {}
    rowcount = -1
    bound = dict(params)
    for sql in stmts:
        tally.statement(sql, True)
        got, got_cols, n = one(sql, bound)
        if sql.kind is Kind.WRITES_RETURNING:  # SQLite's claim, ack_many
            rows, cols = got, got_cols
            if rowcount == -1:
                rowcount = n
        elif sql.kind is Kind.READS:
            rows, cols = got, got_cols
            found.append(len(rows))
            if not rows:
                break
            bound.update({k: rows[0][i] for k, i in cols.items()})
            bound["ids"] = json.dumps([r[cols["id"]] for r in rows])
        elif rowcount == -1:
            rowcount = n
    return rows, cols, rowcount


class _SyncWorker(_Loop):
    def __init__(self, conn: Any, *args: Any) -> None:
        super().__init__(*args)
        self.conn = conn
        self.cur = conn.cursor()

    def begin(self, immediate: bool = False) -> None:
        self.tally.control()
        self.cur.execute(self.begin_sql(immediate))
        self.in_tx = True

    def end(self, commit: bool) -> None:
        self.tally.control(commit=commit)
        self.cur.execute("COMMIT" if commit else "ROLLBACK")
        self.in_tx = False

    def _one(self, sql: str, params: dict[str, Any]) -> Result:
        cur = self.cur
        cur.execute(sql, params)
        if cur.description is None:
            return (), {}, cur.rowcount
        return cur.fetchall(), _cols(cur.description), cur.rowcount

    def step(self, name: str, params: dict[str, Any]) -> Result:
        stmts = self.st[name]
        self.found = []
        if len(stmts) == 1:
            self.tally.statement(stmts[0], self.in_tx)
            return self._one(stmts[0], params)
        own = not self.in_tx
        if own:
            self.begin()
        result = statements_in_turn(stmts, params, self._one, self.tally, self.found)
        if own:
            self.end(commit=True)
        return result

    def settle_all(
        self, settle: list[tuple[str, Any, Any]], by_token: bool, own_tx: bool = True
    ) -> None:
        groups = self.grouped(settle, by_token)
        own_tx = own_tx and sum(step is not None for step, *_ in groups) > 1
        if own_tx:
            self.begin()
        for step, params, name, n in groups:
            rows = self.step(step, params)[0] if step is not None else None
            self.count(name, n, rows if by_token else None)
        if own_tx:
            self.end(commit=True)

    def _lease(self) -> None:
        """The lease loop, as the async one runs it (SQLite: a small batch all acked is
        finished by ``ack_many`` in the next claim's transaction)."""
        together = self.acks_before_claim()
        acked: list[list[Any]] = []  # the last batch, all acked: [id, token] pairs
        while True:
            if acked:  # finished in the claim's transaction (SQLite), as the async loop
                self.begin(immediate=True)
                done = self.step("ack_many", {"pairs": json.dumps(acked, default=str)})[0]
                rows, c, _ = self.step("claim", self.params)
                self.end(commit=True)
                self.count("ack", len(acked), done)
                acked = []
            else:
                rows, c, _ = self.step("claim", self.params)
            if not rows:
                if self.contended():
                    time.sleep(CONTENDED_SLEEP_S)
                    continue
                return
            settle = self.leased(rows, c)
            if together and len(settle) <= DEFER_MAX and all(n == "ack" for n, _, _ in settle):
                acked = [[i, token] for _, i, token in settle]
                continue
            self.settle_all(settle, by_token=True)

    def run(self, form: str) -> None:
        if form == "row_lock":
            while True:
                self.begin(immediate=True)
                rows, c, _ = self.step("claim", self.params)
                if not rows:
                    self.end(commit=False)
                    if self.contended():
                        time.sleep(CONTENDED_SLEEP_S)
                        continue
                    return
                settle = []
                for row in rows:
                    _decode(row[c["payload"]])
                    settle.append((self.settle_name(row[c["attempt"]]), row[c["id"]], None))
                self.settle_all(settle, by_token=False, own_tx=False)
                self.end(commit=True)
        elif form == "lease":
            self._lease()
        else:
            while True:
                rows, c, _ = self.step("claim", self.params)
                if not rows:
                    return
                held = self.held(rows, c)
                if not held:
                    time.sleep(CONTENDED_SLEEP_S)
                    continue
                got, tc, _ = self.step("take", self.params | {"ids": json.dumps(held)})
                settle = []
                for row in got:
                    _decode(row[tc["payload"]])
                    settle.append((self.settle_name(row[tc["attempt"]]), row[tc["id"]], None))
                self.settle_all(settle, by_token=False)
                if self.keys is not None:
                    self.unlock_local(held)
                else:
                    self.step("unlock", {"ids": json.dumps(held)})


def _sync_connect(url: str, engine: str) -> Any:
    return _sqlite3_connect(sqlite_path(url)) if engine == "sqlite" else _pymysql_connect(url)


async def drain_sync(
    url: str,
    engine: str,
    st: Statements,
    form: str,
    retry_once: bool,
    concurrency: int,
    batch: int,
    lease_s: float | None,
    tally: Tally,
) -> Counter[str]:
    """``concurrency`` threads, each with its own connection (opened inside the timing)."""
    keys: set[int] | None = set() if engine == "sqlite" else None
    keys_lock = threading.Lock()
    errors: list[BaseException] = []
    # one tally and counter per thread (``+=`` is not atomic across threads), summed after
    tallies = [Tally() for _ in range(concurrency)]
    counters: list[Counter[str]] = [Counter() for _ in range(concurrency)]

    def work(i: int) -> None:
        try:
            conn = _sync_connect(url, engine)
            try:
                _SyncWorker(
                    conn,
                    engine,
                    st,
                    retry_once,
                    batch,
                    concurrency,
                    lease_s,
                    tallies[i],
                    counters[i],
                    keys,
                    keys_lock,
                ).run(form)
            finally:
                conn.close()
        except BaseException as exc:
            errors.append(exc)

    def run_all() -> None:
        threads = [threading.Thread(target=work, args=(i,)) for i in range(concurrency)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    await asyncio.to_thread(run_all)
    if errors:
        raise errors[0]
    counts: Counter[str] = Counter()
    for i in range(concurrency):
        tally += tallies[i]
        counts.update(counters[i])
    return counts


# --------------------------------------------------------------------- enqueue


async def enqueue(url: str, engine: str, st: Statements, payloads: Sequence[Any]) -> float:
    """The batch in one transaction on the bare driver; returns the seconds.

    psycopg and sqlite3 run the INSERT by ``executemany``. PyMySQL's ``executemany`` would send
    one statement a row (it rewrites only a row of bare placeholders, and the rendered row
    holds ``UTC_TIMESTAMP(6) + INTERVAL … SECOND``), so on MariaDB the loop writes what a
    PyMySQL user writes instead: the row escaped by ``cursor.mogrify``, 500 rows an INSERT.
    The timing covers what ``queue.enqueue_many`` does too: encoding the payloads, BEGIN,
    the batch, COMMIT (the connection is opened before it).
    """
    sql = st["enqueue"][0]  # the INSERT (MySQL reads the id in a second statement)
    if engine == "postgres":
        import psycopg

        conninfo = pg_conninfo(url)
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            t0 = time.perf_counter()
            params = enqueue_params(payloads)
            await conn.execute("BEGIN")
            async with conn.cursor() as cur:
                await cur.executemany(sql, params)
            await conn.execute("COMMIT")
            return time.perf_counter() - t0

    def sync() -> float:
        conn = _sync_connect(url, engine)
        try:
            cur = conn.cursor()
            t0 = time.perf_counter()
            params = enqueue_params(payloads)
            cur.execute("BEGIN")
            if engine == "sqlite":
                cur.executemany(sql, params)
            else:
                head, _, row = sql.partition("VALUES")
                for i in range(0, len(params), 500):
                    rows = [cur.mogrify(row, p) for p in params[i : i + 500]]
                    cur.execute(f"{head}VALUES {','.join(rows)}")
            cur.execute("COMMIT")
            return time.perf_counter() - t0
        finally:
            conn.close()

    return await asyncio.to_thread(sync)
