"""SQLite's writer turn: the process's connections to one file take it alone for a
transaction and share it for single writes, in the order they asked (phase-fair), so neither a
stream of single writes nor a chain of transactions keeps the other kind waiting.

The first tests drive the turn itself from threads, as the connections' threads do; the last
ones run real connections on a real file."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest
from support.engines import engine_params, run
from support.queues import make_queue

import runtime
from runtime.drivers import sqlite as sqlite_driver
from runtime.drivers.sqlite import _FileTurn, _TurnClosed, _TurnTimeout

FAR = 3600.0  # a deadline no test reaches


def never_closed() -> bool:
    return False


def in_thread(fn, *args) -> threading.Thread:
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def soon(check, timeout: float = 5.0) -> bool:
    """Whether ``check()`` becomes true within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.005)
    return check()


def test_single_writes_share_the_turn():
    turn = _FileTurn()
    turn.share(time.monotonic() + FAR, never_closed)
    done = threading.Event()

    def second() -> None:
        turn.share(time.monotonic() + FAR, never_closed)
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
    turn.share(time.monotonic() + FAR, never_closed)  # a single write running

    def transaction() -> None:
        turn.take(time.monotonic() + FAR, never_closed)
        order.append("transaction")
        time.sleep(0.05)
        order.append("transaction ends")
        turn.give()

    def later_single() -> None:
        turn.share(time.monotonic() + FAR, never_closed)
        order.append("later single")
        turn.unshare()

    t = in_thread(transaction)
    assert soon(lambda: turn.issued == 1)
    time.sleep(0.05)
    assert order == [], "the transaction began beside a single write"
    s = in_thread(later_single)
    time.sleep(0.05)
    assert order == [], "a single write that came after a waiting transaction went first"
    turn.unshare()  # the first single write ends: the transaction goes, then the later one
    t.join(5)
    s.join(5)
    assert order == ["transaction", "transaction ends", "later single"]


def test_single_writes_waiting_before_a_transaction_asked_go_before_it():
    turn = _FileTurn()
    order: list[str] = []
    turn.take(time.monotonic() + FAR, never_closed)  # a transaction holds the turn

    def single() -> None:
        turn.share(time.monotonic() + FAR, never_closed)
        order.append("single")
        time.sleep(0.05)
        order.append("single ends")
        turn.unshare()

    def transaction() -> None:
        turn.take(time.monotonic() + FAR, never_closed)
        order.append("second transaction")
        turn.give()

    s = in_thread(single)
    assert soon(lambda: turn._waiting)
    t = in_thread(transaction)
    assert soon(lambda: turn.issued == 2)
    turn.give()
    s.join(5)
    t.join(5)
    assert order == ["single", "single ends", "second transaction"]


def test_transactions_go_in_the_order_they_asked():
    turn = _FileTurn()
    order: list[int] = []
    turn.take(time.monotonic() + FAR, never_closed)

    def transaction(k: int) -> None:
        turn.take(time.monotonic() + FAR, never_closed)
        order.append(k)
        turn.give()

    threads = []
    for k in range(5):
        threads.append(in_thread(transaction, k))
        assert soon(lambda k=k: turn.issued == k + 2)
    turn.give()
    for t in threads:
        t.join(5)
    assert order == [0, 1, 2, 3, 4]


def test_a_transaction_that_gives_up_waiting_does_not_hold_up_the_next():
    turn = _FileTurn()
    turn.take(time.monotonic() + FAR, never_closed)
    closed = threading.Event()
    failures: list[BaseException] = []

    def closing() -> None:
        try:
            turn.take(time.monotonic() + FAR, closed.is_set)
        except BaseException as exc:  # the connection closed while it waited
            failures.append(exc)

    def timing_out() -> None:
        try:
            turn.take(time.monotonic() + 0.1, never_closed)
        except BaseException as exc:
            failures.append(exc)

    got = threading.Event()

    def last() -> None:
        turn.take(time.monotonic() + FAR, never_closed)
        got.set()
        turn.give()

    a = in_thread(closing)
    assert soon(lambda: turn.issued == 2)
    b = in_thread(timing_out)
    assert soon(lambda: turn.issued == 3)
    c = in_thread(last)
    assert soon(lambda: turn.issued == 4)
    closed.set()
    a.join(5)
    b.join(5)
    assert [type(e) for e in failures] == [_TurnClosed, _TurnTimeout] or [
        type(e) for e in failures
    ] == [_TurnTimeout, _TurnClosed]
    assert not got.is_set()  # the first transaction still holds it
    turn.give()
    assert got.wait(5), "a ticket given up held up the transactions after it"
    c.join(5)
    assert (turn.done, turn.issued, turn.transaction) == (4, 4, False)


def test_a_single_write_that_gives_up_lets_the_transaction_after_it_go():
    turn = _FileTurn()
    turn.take(time.monotonic() + FAR, never_closed)
    failures: list[BaseException] = []

    def single() -> None:
        try:
            turn.share(time.monotonic() + 0.1, never_closed)
        except BaseException as exc:
            failures.append(exc)

    got = threading.Event()

    def transaction() -> None:
        turn.take(time.monotonic() + FAR, never_closed)
        got.set()
        turn.give()

    s = in_thread(single)
    assert soon(lambda: turn._waiting)
    t = in_thread(transaction)
    s.join(5)
    assert [type(e) for e in failures] == [_TurnTimeout]
    assert turn._waiting == {}
    turn.give()
    assert got.wait(5)
    t.join(5)


# ------------------------------------------------------------- real connections, one file


@pytest.mark.parametrize("engine", engine_params("sqlite"), indirect=True)
def test_a_chain_of_transactions_does_not_starve_a_single_write(engine, monkeypatch):
    """Three connections hand the turn to each other in back-to-back transactions, each
    holding it a while (a row-lock handler's work); a single write from a fourth connection
    asks in the middle and is written after the transactions that asked before it, not
    after SQLite's busy timeout."""
    monkeypatch.setattr(sqlite_driver, "BUSY_TIMEOUT_MS", 3000)

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        stop = asyncio.Event()
        try:

            async def chain(k: int) -> int:
                n = 0
                async with await runtime.connect(qt.url) as db:
                    while not stop.is_set():
                        await db.begin()
                        await qt.queue.enqueue(db, {"k": k, "n": n})
                        await asyncio.sleep(0.02)  # the transaction holds the turn meanwhile
                        await db.commit()
                        n += 1
                return n

            chains = [asyncio.ensure_future(chain(k)) for k in range(3)]
            async with await runtime.connect(qt.url) as single:
                await asyncio.sleep(0.2)  # the chain runs
                started = time.monotonic()
                for i in range(5):
                    await qt.queue.enqueue(single, {"single": i})  # outside a transaction
                took = time.monotonic() - started
            stop.set()
            counts = await asyncio.gather(*chains)
            assert all(n > 0 for n in counts)
            # each single write waits for at most the three transactions that asked before it
            assert took < 5 * 4 * 0.02 + 1.0, f"five single writes took {took:.2f} s"
        finally:
            stop.set()
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
        stop = asyncio.Event()
        try:

            async def stream(k: int) -> int:
                n = 0
                async with await runtime.connect(qt.url) as db:
                    while not stop.is_set():
                        await qt.queue.enqueue(db, {"k": k, "n": n})
                        n += 1
                return n

            streams = [asyncio.ensure_future(stream(k)) for k in range(4)]
            async with await runtime.connect(qt.url) as tx:
                await asyncio.sleep(0.2)
                waits = []
                for i in range(5):
                    started = time.monotonic()
                    await tx.begin()
                    waits.append(time.monotonic() - started)
                    await qt.queue.enqueue(tx, {"tx": i})
                    await tx.commit()
            stop.set()
            counts = await asyncio.gather(*streams)
            assert all(n > 0 for n in counts)
            assert max(waits) < 1.0, f"begin() waited {max(waits):.2f} s for the turn"
            assert len([r for r in await qt.rows() if "tx" in r["payload"]]) == 5
        finally:
            stop.set()
            await qt.drop()

    run(go())
