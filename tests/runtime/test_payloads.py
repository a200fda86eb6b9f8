"""Payloads: whatever a service enqueues comes back equal, with the same Python types, on every
engine and form and through the outbox; what no engine can keep the same way is one
PayloadError at enqueue, nothing written; a stored payload that cannot be decoded never fails
its batch.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.engines import Engine, run
from support.outboxes import make
from support.queues import make_queue

import runtime
from runtime.payloads import MAX_DEPTH, encode_payload

FORMS = ["row_lock", "lease", "advisory"]

#: values that once came back changed or stalled a batch on some engine
CORPUS: list[Any] = [
    "hello",
    "",
    "x" * 10_000,
    '{"a": 1}',
    "[1, 2]",
    '"quoted"',
    "null",
    "123",
    "line\u2028sep\u2029para",
    "ünïcødé ✓ 🎉",
    0,
    -1,
    2**53 + 1,
    2**63 - 1,
    -(2**63),
    2**64 - 1,
    1.0,
    0.1,
    -2.5,
    1e308,
    -1e308,
    1e-300,
    5e-324,
    1e16,
    1.5e-10,
    123456789.123456789,
    True,
    False,
    None,
    [],
    {},
    [1, "a", None, 2.0, True, [], {}],
    {"nested": {"list": [{"k": [1, 2.5, "s"]}], "n": None}, "": "empty key", "é": "\u2028"},
    {"b": 1, "a": 2, "10": 3, "2": 4},
    [[[[["deep"]]]]],
]


def same(a: Any, b: Any) -> bool:
    """Equal, and of the same type all the way down (1 == 1.0 == True does not count)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items())
    return bool(a == b)


async def round_trip(
    engine: Engine, form: str, payloads: list[Any], many: bool = False, **load: Any
) -> list[Any]:
    """Enqueue the payloads, drain them with a handler that records each, return them in
    enqueue order."""
    qt = await make_queue(engine, form)
    queue = runtime.Queue(qt.queue.rendered, **load)
    got: dict[int, Any] = {}

    async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
        got[message.id] = message.payload
        return runtime.ack()

    try:
        async with await runtime.connect(qt.url) as db:
            if many:
                await queue.enqueue_many(db, payloads)
            else:
                for p in payloads:
                    await queue.enqueue(db, p)
        counts = await runtime.Consumer(qt.url, queue, handle, concurrency=2).drain()
        assert counts.get("ack") == len(payloads), counts
        return [got[i] for i in sorted(got)]
    finally:
        await qt.drop()


@pytest.mark.parametrize("form", FORMS)
def test_every_payload_of_the_corpus_comes_back_equal_with_its_type(engine, form):
    got = run(round_trip(engine, form, CORPUS))
    for sent, back in zip(CORPUS, got, strict=True):
        assert same(sent, back), f"sent {sent!r:.80}, got {back!r:.80}"


def test_enqueue_many_round_trips_the_corpus(engine):
    got = run(round_trip(engine, "lease", CORPUS, many=True))
    assert all(same(a, b) for a, b in zip(CORPUS, got, strict=True))


def test_the_outbox_round_trips_the_corpus(engine, tmp_path):
    with make(engine, tmp_path) as ob:
        got: list[Any] = []

        async def handle(message: Any, ctx: runtime.Ctx) -> runtime.Outcome:
            got.append(message.payload)
            return runtime.ack()

        async def go() -> None:
            async with await runtime.connect(engine.url) as db:
                for p in CORPUS:
                    await ob.put(db, p)
            report = await ob.relay(engine.url, handle)
            assert report["ack"] == len(CORPUS)

        run(go())
    for sent, back in zip(CORPUS, got, strict=True):
        assert same(sent, back), f"sent {sent!r:.80}, got {back!r:.80}"


# JSON values as a service would send them: every scalar, text that looks like JSON,
# line separators, big integers, floats at their extremes, nesting
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"))
    | st.sampled_from(["", "{}", '{"a": 1}', "[]", "null", "1e5", "\u2028", '"'])
)
json_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(blacklist_categories=("Cs",)), max_size=5).filter(
                lambda k: "\x00" not in k
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


def test_any_json_value_round_trips(engine):
    @settings(
        max_examples=15,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(st.lists(json_values, min_size=1, max_size=8))
    def check(payloads: list[Any]) -> None:
        got = run(round_trip(engine, "lease", payloads))
        for sent, back in zip(payloads, got, strict=True):
            assert same(no_minus_zero(sent), back), f"sent {sent!r}, got {back!r}"

    check()


def no_minus_zero(value: Any) -> Any:
    """-0.0 is stored as 0.0 on every engine (jsonb has no negative zero; -0.0 == 0.0)."""
    if type(value) is float and value == 0.0:
        return 0.0
    if type(value) is list:
        return [no_minus_zero(v) for v in value]
    if type(value) is dict:
        return {k: no_minus_zero(v) for k, v in value.items()}
    return value


REFUSED: list[tuple[Any, str]] = [
    (float("nan"), "not a JSON number"),
    (float("inf"), "not a JSON number"),
    ({"x": [float("-inf")]}, "not a JSON number"),
    ("a\x00b", "NUL"),
    ({"k\x00": 1}, "NUL"),
    ("\ud800", "lone surrogate"),
    (2**64, "64 bits"),
    (-(2**63) - 1, "64 bits"),
    (dt.datetime(2026, 1, 1), "datetime is not a JSON value"),
    (Decimal("1.5"), "Decimal is not a JSON value"),
    (b"bytes", "bytes is not a JSON value"),
    ((1, 2), "tuple is not a JSON value"),
    ({1: "int key"}, "not a str"),
    ({"s": {1, 2}}, "set is not a JSON value"),
]


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(("payload", "says"), [*REFUSED, (nested(MAX_DEPTH + 1), "nest deeper")])
def test_a_payload_no_engine_keeps_the_same_way_is_one_payload_error(payload, says):
    with pytest.raises(runtime.PayloadError, match=says):
        encode_payload(payload)


def test_nesting_up_to_the_limit_is_kept_on_every_engine(engine):
    got = run(round_trip(engine, "lease", [nested(MAX_DEPTH), {"a": nested(MAX_DEPTH - 1)}]))
    assert got == [nested(MAX_DEPTH), {"a": nested(MAX_DEPTH - 1)}]


def test_a_refused_payload_writes_nothing_on_any_engine(engine):
    async def go() -> None:
        qt = await make_queue(engine, "lease")
        try:
            async with await runtime.connect(qt.url) as db:
                for payload, _ in [*REFUSED, (nested(40), "")]:
                    with pytest.raises(runtime.PayloadError):
                        await qt.queue.enqueue(db, payload)
                with pytest.raises(runtime.PayloadError, match=r"item 2 of the batch"):
                    await qt.queue.enqueue_many(db, [{"n": 1}, {"n": 2}, {"n": float("nan")}])
            assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


def test_minus_zero_is_stored_as_zero_everywhere():
    assert encode_payload(-0.0) == "0.0"
    assert encode_payload({"x": [-0.0]}) == '{"x":[0.0]}'


# ---------------------------------------------------------------- encoder / decoder


def encoder(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return {"$dt": value.isoformat()}
    if isinstance(value, Decimal):
        return {"$dec": str(value)}
    raise TypeError(f"cannot encode {type(value).__name__}")


def decoder(obj: dict[str, Any]) -> Any:
    if obj.keys() == {"$dt"}:
        return dt.datetime.fromisoformat(obj["$dt"])
    if obj.keys() == {"$dec"}:
        return Decimal(obj["$dec"])
    return obj


def test_an_encoder_and_decoder_carry_datetimes_and_decimals(engine, tmp_path):
    when = dt.datetime(2026, 11, 30, 20, 0, tzinfo=dt.UTC)
    payloads = [when, {"at": when, "price": Decimal("19.99"), "n": [Decimal("0.1")]}]
    got = run(round_trip(engine, "lease", payloads, encoder=encoder, decoder=decoder))
    assert got == payloads
    assert type(got[1]["price"]) is Decimal


def test_load_takes_the_hooks(tmp_path):
    path = Path(__file__).resolve().parents[2] / "generated_examples"
    files = sorted(path.glob("sql/sqlite/*.sql"))
    queue = next(q for f in files if isinstance(q := runtime.load(f), runtime.Queue))
    hooked = runtime.load(queue.rendered.path, encoder=encoder, decoder=decoder)
    assert hooked.encoder is encoder and hooked.decoder is decoder


# ---------------------------------------------------------------- undecodable rows


def refusing_decoder(obj: dict[str, Any]) -> Any:
    if obj.get("poison"):
        raise ValueError("poison pill")
    return obj


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("dead", ["group", "table", None])
def test_a_row_that_cannot_be_decoded_never_fails_its_batch(engine, form, dead, caplog):
    caplog.set_level(logging.ERROR, logger="runtime")

    async def go() -> None:
        qt = await make_queue(engine, form, dead=dead, max_attempts=3)
        queue = runtime.Queue(qt.queue.rendered, decoder=refusing_decoder)
        handled: list[Any] = []

        async def handle(message: runtime.Message, ctx: runtime.Ctx) -> runtime.Outcome:
            handled.append(message.payload)
            return runtime.ack()

        try:
            ids = await qt.enqueue({"n": 1}, {"poison": True}, {"n": 3})
            consumer = runtime.Consumer(
                qt.url, queue, handle, concurrency=1, batch=10, retry_policy=runtime.Immediate()
            )
            if dead:
                counts = await consumer.drain()
            else:  # no dead letter: the row comes back again and again, as any failure would
                running = asyncio.create_task(consumer.run())
                while not (len(handled) == 2 and consumer.counts["undecodable"]):
                    await asyncio.sleep(0.02)
                consumer.stop()
                counts = await running
            assert handled == [{"n": 1}, {"n": 3}]
            assert counts.get("failed_batches", 0) == 0
            if dead:
                assert counts["undecodable"] == 1
                assert counts["dead_letter"] == 1
                (row,) = await qt.dead_rows()
                assert row["id"] == ids[1] or dead == "table"
                assert row["payload"] == {"poison": True}
            else:
                # no dead letter: a failure like any other, the row waits for its next claim
                assert counts["retry"] == counts["undecodable"] >= 1
                assert [r["id"] for r in await qt.rows() if not r.get("processed_at")] == [ids[1]]
            assert f"message {ids[1]} cannot be decoded" in caplog.text
            assert "poison pill" in caplog.text
        finally:
            await qt.drop()

    run(go())
