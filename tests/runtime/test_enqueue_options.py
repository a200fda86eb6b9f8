"""Enqueue options: keyword-only, checked once against the queue's file (runtime.enqueue), the
same for enqueue, enqueue_many and queue.sync; each bad value one error naming the option and
its fix, nothing written. On a real SQLite file and PostgreSQL."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest
from support.engines import Engine, engine_params, run
from support.queues import QueueUnderTest, make_queue
from support.services import sync_connection

import runtime
from runtime.enqueue import EnqueueOptions

pytestmark = pytest.mark.parametrize("engine", engine_params("sqlite", "postgres"), indirect=True)

#: a queue with every optional role an option needs (and a group column, by its dead group)
FULL = (
    "attempt",
    "retry_after",
    "processed_at",
    "priority",
    "fifo_key",
    "dedupe_key",
    "concurrency_key",
)
FULL_EXTRA = {"other_columns": ["tenant"], "concurrency_limit": 2}

#: (options, error type, what the message says): on the full queue
BAD_VALUES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"delay": -1}, runtime.InvalidArgument, "delay must be from 0"),
    ({"delay": "soon"}, runtime.InvalidArgument, "delay must be a number of seconds"),
    ({"delay": float("nan")}, runtime.InvalidArgument, "delay must be from 0"),
    ({"priority": 1.5}, runtime.InvalidArgument, "priority 1.5 is not a whole number"),
    ({"priority": True}, runtime.InvalidArgument, "priority True is not a whole number"),
    ({"priority": 2**31}, runtime.InvalidArgument, "is not a whole number from"),
    ({"fifo_key": ""}, runtime.InvalidArgument, "fifo_key '' is not a string of 1 to 191"),
    ({"fifo_key": "k" * 192}, runtime.InvalidArgument, "is not a string of 1 to 191"),
    ({"concurrency_key": 7}, runtime.InvalidArgument, "concurrency_key 7 is not a string"),
    ({"group": 5}, runtime.InvalidArgument, "group must be a string"),
    ({"group": "g" * 192}, runtime.InvalidArgument, "group must be at most 191 characters"),
    ({"values": {"nope": 1}}, runtime.ConfigurationError, "no other column 'nope'"),
    ({"values": ["tenant"]}, runtime.InvalidArgument, "values must be a mapping"),
    ({"dealy": 1}, runtime.InvalidArgument, "no option 'dealy': did you mean delay?"),
]
#: on a queue with none of the optional roles: each option names its missing column
NO_COLUMN: list[tuple[dict[str, Any], str]] = [
    ({"group": "eu"}, "no group column: enqueue without group="),
    ({"priority": 1}, "no priority column: enqueue without priority="),
    ({"fifo_key": "a"}, "no fifo_key column: enqueue without fifo_key="),
    ({"concurrency_key": "a"}, "no concurrency_key column: enqueue without concurrency_key="),
    ({"values": {"a": 1}}, "no other column 'a' (declared: none): list it under other_columns"),
]


async def _full(engine: Engine) -> QueueUnderTest:
    return await make_queue(engine, "lease", columns=FULL, dead="group", extra=FULL_EXTRA)


def _refused(call: Any, error: type[Exception], says: str) -> None:
    with pytest.raises(error) as caught:
        call()
    message = str(caught.value)
    assert says in message and "\n" not in message, message


async def _refused_async(call: Any, error: type[Exception], says: str) -> None:
    with pytest.raises(error) as caught:
        await call()
    message = str(caught.value)
    assert says in message and "\n" not in message, message


def _each_way(
    engine: Engine, qt: QueueUnderTest, options: dict[str, Any], error: type[Exception], says: str
) -> None:
    """enqueue, enqueue_many (a valid first item) and queue.sync.enqueue all refuse it."""
    queue = qt.queue

    async def aio() -> None:
        async with await runtime.connect(qt.url) as db:
            await _refused_async(lambda: queue.enqueue(db, {"n": 1}, **options), error, says)
            await _refused_async(
                lambda: queue.enqueue_many(db, [{"n": 1}, {"n": 2}], **options), error, says
            )
            # checked once, before any payload: an empty batch refuses it too
            await _refused_async(lambda: queue.enqueue_many(db, [], **options), error, says)

    run(aio())
    with sync_connection(engine, "driver") as (conn, commit, _rollback, _execute):
        _refused(lambda: queue.sync.enqueue(conn, {"n": 1}, **options), error, says)
        _refused(lambda: queue.sync.enqueue_many(conn, [{"n": 1}], **options), error, says)
        commit()


def test_each_bad_value_is_one_error_naming_the_option_and_nothing_is_written(
    engine: Engine,
) -> None:
    qt = run(_full(engine))
    try:
        for options, error, says in BAD_VALUES:
            _each_way(engine, qt, options, error, says)
        assert run(qt.rows()) == []
    finally:
        run(qt.drop())


def test_an_option_without_its_column_names_the_column_and_nothing_is_written(
    engine: Engine,
) -> None:
    qt = run(make_queue(engine, "lease"))
    try:
        for options, says in NO_COLUMN:
            _each_way(engine, qt, options, runtime.ConfigurationError, says)

        async def keyed() -> None:
            async with await runtime.connect(qt.url) as db:
                await _refused_async(
                    lambda: qt.queue.enqueue(db, {}, dedupe_key="k"),
                    runtime.ConfigurationError,
                    "no dedupe_key column: enqueue without dedupe_key=",
                )
                await _refused_async(
                    lambda: qt.queue.enqueue_many(db, [{}], dedupe_keys=["k"]),
                    runtime.ConfigurationError,
                    "no dedupe_key column",
                )

        run(keyed())
        assert run(qt.rows()) == []
    finally:
        run(qt.drop())


def test_dedupe_keys_are_checked_before_anything_is_written(engine: Engine) -> None:
    qt = run(_full(engine))

    async def go() -> None:
        async with await runtime.connect(qt.url) as db:
            many = qt.queue.enqueue_many
            await _refused_async(
                lambda: qt.queue.enqueue(db, {}, dedupe_key="k "),
                runtime.InvalidArgument,
                "dedupe_key must be text of 1 to 191 characters not ending with a space",
            )
            # the bad key is the last: the first item is not written either
            await _refused_async(
                lambda: many(db, [{"n": 1}, {"n": 2}], dedupe_keys=["a", ""]),
                runtime.InvalidArgument,
                "dedupe_key must be text",
            )
            await _refused_async(
                lambda: many(db, [{"n": 1}], dedupe_keys=["a", "b"]),
                runtime.InvalidArgument,
                "dedupe_keys has 2 keys for 1 payloads: give one per payload",
            )
            # enqueue_many takes dedupe_keys, one per payload
            await _refused_async(
                lambda: many(db, [{"n": 1}], dedupe_key="a"),
                runtime.InvalidArgument,
                "enqueue_many() has no option 'dedupe_key': did you mean dedupe_keys?",
            )

    try:
        run(go())
        assert run(qt.rows()) == []
    finally:
        run(qt.drop())


def test_options_are_keyword_only_and_bind_as_given(engine: Engine) -> None:
    qt = run(_full(engine))

    async def go() -> None:
        async with await runtime.connect(qt.url) as db:
            with pytest.raises(TypeError):
                await qt.queue.enqueue(db, {"n": 0}, 30)  # type: ignore[misc]
            with pytest.raises(TypeError):
                await qt.queue.enqueue_many(db, [{"n": 0}], 30)  # type: ignore[misc]
            await qt.queue.enqueue(
                db, {"n": 1}, group="eu", priority=3, fifo_key="f", values={"tenant": "t"}
            )
            await qt.queue.enqueue_many(db, [{"n": 2}, {"n": 3}], priority=-1, concurrency_key="c")

    try:
        run(go())
        with sync_connection(engine, "driver") as (conn, commit, _rollback, _execute):
            with pytest.raises(TypeError):
                qt.queue.sync.enqueue(conn, {"n": 0}, 30)  # type: ignore[misc]
            qt.queue.sync.enqueue(conn, {"n": 4}, dedupe_key="k", delay=timedelta(hours=1))
            commit()
        rows = {r["payload"]["n"]: r for r in run(qt.rows())}
        assert sorted(rows) == [1, 2, 3, 4]
        assert (rows[1]["group"], rows[1]["priority"], rows[1]["fifo_key"]) == ("eu", 3, "f")
        order = f"SELECT tenant AS t FROM {qt.q(qt.table)} ORDER BY {qt.col('id')}"
        assert [r["t"] for r in run(qt.sql(order))] == ["t", None, None, None]
        assert [rows[n]["priority"] for n in (2, 3)] == [-1, -1]
        assert rows[2]["concurrency_key"] == rows[3]["concurrency_key"] == "c"
        assert rows[4]["dedupe_key"] == "k" and rows[4]["group"] == qt.queue.default_group

        async def delayed() -> Any:
            async with await runtime.connect(qt.url) as db:
                return (await qt.queue.stats(db))["delayed"]

        assert run(delayed()) == 1  # the sync enqueue's hour
    finally:
        run(qt.drop())


def test_the_options_as_checked(engine: Engine) -> None:
    """EnqueueOptions itself: the values as bound, the queue's default group filled in."""
    qt = run(_full(engine))
    try:
        header = qt.queue.rendered.header
        options = EnqueueOptions.check(
            header, delay=timedelta(seconds=1.5), priority=2, values={"tenant": "t"}
        )
        assert (options.delay_s, options.priority, options.group) == (1.5, 2, header.default_group)
        assert dict(options.values) == {"tenant": "t"} and options.dedupe_key is None
        params = options.params('{"n": 1}')
        assert params["payload"] == '{"n": 1}' and params["value_tenant"] == "t"
        assert params["delay_s"] == 1.5 and params["dedupe_key"] is None
        assert options.keyed_params("{}", "k")["dedupe_key"] == "k"
        with pytest.raises(dataclasses.FrozenInstanceError):
            options.priority = 3  # type: ignore[misc]
    finally:
        run(qt.drop())
