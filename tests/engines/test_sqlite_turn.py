"""SQLite's writer turn: the process's connections to one file take it alone for a
transaction and share it for single writes, in the order they asked (phase-fair), so neither a
stream of single writes nor a chain of transactions keeps the other kind waiting.

The first tests drive the turn itself from threads, as the connections' threads do; the last
ones run real connections on a real file."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time

import pytest
from support.engines import engine_params, run
from support.queues import make_queue

import runtime
from runtime.contract.rendered import Kind, Statement
from runtime.drivers import sqlite as sqlite_driver
from runtime.drivers.sqlite import _FileTurn, _TurnTimeout
from runtime.steps import run_rows

FAR = 3600.0  # a wait no test reaches


def never_closed() -> bool:
    return False


def in_thread(fn, *args) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def joined(*threads: threading.Thread) -> None:
    for t in threads:
        t.join(5)
        assert not t.is_alive(), "a thread still waits for the turn"


def soon(check, timeout: float = 5.0) -> bool:
    """Whether ``check()`` becomes true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.005)
    return check()


def holding(turn: _FileTurn, transaction: bool, order: list, name: object, hold: float = 0.0):
    """For a thread: a transaction (or a single write) that takes (shares) the turn, notes
    ``name`` in ``order``, keeps it ``hold`` seconds (noting its end), and gives it back."""

    def call() -> None:
        turn.take(FAR, never_closed) if transaction else turn.share(FAR, never_closed)
        order.append(name)
        if hold:
            time.sleep(hold)
            order.append(f"{name} ends")
        turn.give() if transaction else turn.unshare()

    return call


def test_single_writes_share_the_turn():
    turn = _FileTurn()
    turn.share(FAR, never_closed)
    done = threading.Event()

    def second() -> None:
        turn.share(FAR, never_closed)
        done.set()

    in_thread(second)
    assert done.wait(2), "a single write waited for another single write"
    assert turn.singles == 2
    turn.unshare()
    turn.unshare()
    assert turn.singles == 0


def test_a_transaction_waits_for_the_single_writes_before_it_and_those_after_wait_for_it():
    turn = _FileTurn()
    order: list[str] = []
    turn.share(FAR, never_closed)  # a single write running

    t = in_thread(holding(turn, True, order, "transaction", 0.05))
    assert soon(lambda: turn.issued == 1)
    time.sleep(0.05)
    assert order == [], "the transaction began beside a single write"
    s = in_thread(holding(turn, False, order, "later single"))
    time.sleep(0.05)
    assert order == [], "a single write that came after a waiting transaction went first"
    turn.unshare()  # the first single write ends: the transaction goes, then the later one
    joined(t, s)
    assert order == ["transaction", "transaction ends", "later single"]


def test_single_writes_waiting_before_a_transaction_asked_go_before_it():
    turn = _FileTurn()
    order: list[str] = []
    turn.take(FAR, never_closed)  # a transaction holds the turn

    s = in_thread(holding(turn, False, order, "single", 0.05))
    assert soon(lambda: turn._waiting)
    t = in_thread(holding(turn, True, order, "second transaction"))
    assert soon(lambda: turn.issued == 2)
    turn.give()
    joined(s, t)
    assert order == ["single", "single ends", "second transaction"]


def test_transactions_go_in_the_order_they_asked():
    turn = _FileTurn()
    order: list[int] = []
    turn.take(FAR, never_closed)
    threads = []
    for k in range(5):
        threads.append(in_thread(holding(turn, True, order, k)))
        assert soon(lambda k=k: turn.issued == k + 2)
    turn.give()
    joined(*threads)
    assert order == [0, 1, 2, 3, 4]


def recording(failures: list[BaseException], fn, *args):
    """``fn(*args)``, for a thread: what it raises is kept in ``failures``."""

    def call() -> None:
        try:
            fn(*args)
        except BaseException as exc:
            failures.append(exc)

    return call


def taking(turn: _FileTurn, got: threading.Event):
    """A transaction, for a thread: it takes the turn, sets ``got`` and gives it back."""

    def call() -> None:
        turn.take(FAR, never_closed)
        got.set()
        turn.give()

    return call


def test_a_transaction_that_gives_up_waiting_does_not_hold_up_the_next():
    turn = _FileTurn()
    turn.take(FAR, never_closed)
    closed, got = threading.Event(), threading.Event()
    failures: list[BaseException] = []
    # one waits until its connection closes, one until its deadline passes
    a = in_thread(recording(failures, turn.take, FAR, closed.is_set))
    assert soon(lambda: turn.issued == 2)
    b = in_thread(recording(failures, turn.take, 0.1, never_closed))
    assert soon(lambda: turn.issued == 3)
    c = in_thread(taking(turn, got))
    assert soon(lambda: turn.issued == 4)
    closed.set()
    joined(a, b)
    assert sorted(type(e).__name__ for e in failures) == ["_TurnClosed", "_TurnTimeout"]
    assert not got.is_set()  # the first transaction still holds it
    turn.give()
    assert got.wait(5), "a ticket given up held up the transactions after it"
    joined(c)
    assert (turn.done, turn.issued, turn.transaction) == (4, 4, False)


def test_a_single_write_that_gives_up_lets_the_transaction_after_it_go():
    turn = _FileTurn()
    turn.take(FAR, never_closed)
    got = threading.Event()
    failures: list[BaseException] = []
    s = in_thread(recording(failures, turn.share, 0.1, never_closed))
    assert soon(lambda: turn._waiting)
    t = in_thread(taking(turn, got))
    joined(s)
    assert [type(e) for e in failures] == [_TurnTimeout]
    assert turn._waiting == {}
    turn.give()
    assert got.wait(5)
    joined(t)


# ------------------------------------------------------------- real connections, one file


async def beside_writers(qt, count: int, transactions: bool, measured):
    """``await measured()`` while ``count`` other connections write rows all along, each in
    back-to-back transactions that hold the turn 20 ms (a row-lock handler's work), or as
    single writes as fast as they can; what it returned, once every writer has written."""
    stop = asyncio.Event()

    async def writer(k: int) -> int:
        n = 0
        async with await runtime.connect(qt.url) as db:
            while not stop.is_set():
                if transactions:
                    await db.begin()
                await qt.queue.enqueue(db, {"k": k, "n": n})
                if transactions:
                    await asyncio.sleep(0.02)  # the transaction holds the turn meanwhile
                    await db.commit()
                n += 1
        return n

    writers = [asyncio.ensure_future(writer(k)) for k in range(count)]
    try:
        await asyncio.sleep(0.2)  # the writers run
        result = await measured()
    finally:
        stop.set()
        counts = await asyncio.gather(*writers)
    assert all(n > 0 for n in counts)
    return result


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_chain_of_transactions_does_not_starve_a_single_write(engine, monkeypatch):
    """Three connections hand the turn to each other in back-to-back transactions, each
    holding it a while; single writes from a fourth connection ask in the middle and are
    written each after the transactions that asked before it, not after SQLite's busy
    timeout."""
    monkeypatch.setattr(sqlite_driver, "BUSY_TIMEOUT_MS", 3000)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as single:

                async def five_single_writes() -> float:
                    started = time.monotonic()
                    for i in range(5):
                        await qt.queue.enqueue(single, {"single": i})  # outside a transaction
                    return time.monotonic() - started

                took = await beside_writers(qt, 3, True, five_single_writes)
            # each single write waits for at most the three transactions that asked before it
            assert took < 5 * 4 * 0.02 + 1.0, f"five single writes took {took:.2f} s"
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_stream_of_single_writes_does_not_starve_a_transaction(engine, monkeypatch):
    """Four connections write single rows as fast as they can; a transaction asked for
    meanwhile begins after the single writes that came before it, not after the busy
    timeout, and the single writes go on after it."""
    monkeypatch.setattr(sqlite_driver, "BUSY_TIMEOUT_MS", 3000)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as tx:

                async def five_transactions() -> list[float]:
                    waits = []
                    for i in range(5):
                        started = time.monotonic()
                        await tx.begin()
                        waits.append(time.monotonic() - started)
                        await qt.queue.enqueue(tx, {"tx": i})
                        await tx.commit()
                    return waits

                waits = await beside_writers(qt, 4, False, five_transactions)
            assert max(waits) < 1.0, f"begin() waited {max(waits):.2f} s for the turn"
            assert len([r for r in await qt.rows() if "tx" in r["payload"]]) == 5
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("inline", [False, True], ids=["thread", "inline"])
@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_step_of_several_statements_waits_for_an_open_transaction_then_goes_with_the_rest(
    engine, monkeypatch, inline
):
    """A step of several statements (``run_script``: its own transaction, begun and ended in
    one trip to the connection's thread, or on the event loop's with ``inline_steps`` when
    nothing is in its way) waits for a transaction that holds the turn, not for SQLite's
    busy timeout, and never on the event loop; then steps from several connections, beside
    their single writes, all go through, each whole."""
    monkeypatch.setattr(sqlite_driver, "BUSY_TIMEOUT_MS", 3000)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        table, attempt = qt.q(qt.table), qt.col("attempt")
        bump = Statement(f"UPDATE {table} SET {attempt} = {attempt} + 1", Kind.WRITES)
        total = Statement(f"SELECT SUM({attempt}) AS n FROM {table}", Kind.READS)
        try:
            await qt.enqueue({"n": 1})
            conns = [await runtime.connect(qt.url) for _ in range(4)]
            for conn in conns:
                conn.inline_steps = inline
            tx, stepper = conns[0], conns[1]
            try:
                await tx.begin()
                await tx.execute(f"UPDATE {table} SET {attempt} = 10")
                waiting = asyncio.ensure_future(run_rows(stepper, (bump, total), {}))
                await asyncio.sleep(0.3)
                assert not waiting.done()  # the transaction holds the turn
                await tx.commit()
                _, rows = await asyncio.wait_for(waiting, 5)
                assert rows == [(11,)]  # after the transaction, seeing what it wrote

                async def steps_and_single_writes(conn: runtime.Connection) -> None:
                    for i in range(20):
                        await run_rows(conn, (bump, total), {})
                        await qt.queue.enqueue(conn, {"i": i})

                await asyncio.gather(*(steps_and_single_writes(c) for c in conns))
            finally:
                for conn in conns:
                    await conn.close()
            rows = await qt.rows()
            assert len(rows) == 1 + 4 * 20
            assert rows[0]["attempt"] == 11 + 4 * 20  # every step bumped it, once
        finally:
            await qt.drop()

    run(go())


# ---------------------------------------------- a worker's step on the event loop's thread


async def _with_thread_ident(conn: runtime.Connection) -> Statement:
    """A statement whose one row is the ident of the thread that runs it."""
    raw = conn._raw  # type: ignore[attr-defined]
    await conn._on_thread(raw.create_function, "qgen_test_thread", 0, threading.get_ident)  # type: ignore[attr-defined]
    return Statement("SELECT qgen_test_thread() AS t", Kind.READS)


def _bump_step(qt) -> Statement:
    table, attempt = qt.q(qt.table), qt.col("attempt")
    return Statement(f"UPDATE {table} SET {attempt} = {attempt} + 1", Kind.WRITES)


async def _one_worker_step(engine, body) -> None:
    """``body(qt, conn, where)`` with a lease queue of one row and a worker's connection
    (``inline_steps``) to it; ``body`` runs one step (``_bump_step``) that must stand, whole."""
    qt = await make_queue(engine, "lease")
    try:
        await qt.enqueue({"n": 1})
        async with await runtime.connect(qt.url) as conn:
            conn.inline_steps = True
            await body(qt, conn, await _with_thread_ident(conn))
        assert (await qt.rows())[0]["attempt"] == 2
    finally:
        await qt.drop()


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_workers_step_runs_on_the_event_loops_thread_when_nothing_is_in_its_way(engine):
    """With ``inline_steps`` (a consumer's worker connection), a step of its own transaction
    runs where it was asked for, on the event loop's thread, with no trip to the
    connection's; without it, on the connection's thread. Either way it is whole."""

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            await qt.enqueue({"n": 1})
            async with await runtime.connect(qt.url) as conn:
                where = await _with_thread_ident(conn)
                loop_thread = threading.get_ident()
                assert not conn.inline_steps  # a connection's other users: the thread
                _, rows = await run_rows(conn, (_bump_step(qt), where), {})
                assert rows[0][0] != loop_thread
                conn.inline_steps = True
                _, rows = await run_rows(conn, (_bump_step(qt), where), {})
                assert rows[0][0] == loop_thread
                assert not conn.in_transaction
            assert (await qt.rows())[0]["attempt"] == 3  # each step bumped it, once
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_workers_step_never_waits_for_the_write_lock_on_the_event_loop(engine):
    """Another connection (another process's, outside the turn) holds SQLite's write lock: a
    worker's step goes to its connection's thread, which waits there, while the event loop
    runs on; once the lock is free the step commits, whole, and the connection's busy
    timeout is what it was."""

    async def body(qt, conn: runtime.Connection, where: Statement) -> None:
        other = sqlite3.connect(qt.url.removeprefix("sqlite:///"), isolation_level=None)
        try:
            other.execute("BEGIN IMMEDIATE")
            ticks = 0

            async def ticking() -> None:
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.ensure_future(ticking())
            try:
                step = asyncio.ensure_future(run_rows(conn, (_bump_step(qt), where), {}))
                await asyncio.sleep(0.3)
                assert not step.done()  # waiting for the lock, on the connection's thread
                assert ticks >= 10, f"the event loop ticked {ticks} times in 0.3 s"
                other.execute("COMMIT")
                _, rows = await asyncio.wait_for(step, 5)
            finally:
                ticker.cancel()
        finally:
            other.close()
        assert rows[0][0] != threading.get_ident()
        (busy,) = (await conn.fetchrows("PRAGMA busy_timeout"))[1]
        assert busy == (sqlite_driver.BUSY_TIMEOUT_MS,)

    run(_one_worker_step(engine, body))


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_workers_step_never_runs_beside_a_call_still_running_on_its_thread(engine):
    """A caller cancelled while its statement runs on the connection's thread leaves it
    running there: the worker's next step does not run on the event loop beside it, but
    after it, on the thread."""

    async def body(qt, conn: runtime.Connection, where: Statement) -> None:
        ended: list[float] = []

        def pause(seconds: float) -> int:
            time.sleep(seconds)
            ended.append(time.monotonic())
            return 1

        raw = conn._raw  # type: ignore[attr-defined]
        await conn._on_thread(raw.create_function, "qgen_test_pause", 1, pause)  # type: ignore[attr-defined]
        slow = asyncio.ensure_future(conn.fetchrows("SELECT qgen_test_pause(0.3)"))
        await asyncio.sleep(0.1)
        slow.cancel()
        with pytest.raises(asyncio.CancelledError):
            await slow
        assert not ended  # it still runs on the thread
        _, rows = await run_rows(conn, (_bump_step(qt), where), {})
        assert ended and rows[0][0] != threading.get_ident()

    run(_one_worker_step(engine, body))


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_consumers_workers_run_their_steps_inline(engine):
    """A Consumer marks the connections it opens for its workers ``inline_steps``: their
    claims and settlements are each a moment long."""

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        opened: list[runtime.Connection] = []

        async def open_connection() -> runtime.Connection:
            conn = await runtime.connect(qt.url)
            opened.append(conn)
            return conn

        async def handle(message, ctx):
            return runtime.ack()

        try:
            for n in range(25):
                await qt.enqueue({"n": n})
            counts = await runtime.Consumer(open_connection, qt.queue, handle).drain()
            assert counts["ack"] == 25
            assert opened and all(conn.inline_steps for conn in opened)
        finally:
            await qt.drop()

    run(go())
