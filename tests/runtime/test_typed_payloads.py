"""Typed payloads: ``runtime.load(path, payload=Model)`` with a dataclass, a pydantic v2 model or
a msgspec Struct. Enqueue takes an instance or a dict that validates and refuses anything
else with one PayloadError naming the model and the field, nothing written, on every engine;
handlers get instances of the model; a row that does not decode into it is an undecodable
payload (the dead letter, never handled); mypy sees the model through Queue, Message and
Consumer.
"""

from __future__ import annotations

import datetime as dt
import decimal
import enum
import textwrap
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec
import pydantic
import pytest
from support.engines import Engine, run
from support.outboxes import make, records
from support.queues import QueueUnderTest, make_queue
from support.services import sync_connection

import runtime
from runtime.models import payload_model
from runtime.queue import Queue
from runtime.testing import Harness

AT = dt.datetime(2026, 1, 2, 3, 4, 5)
SQL = Path(__file__).resolve().parents[2] / "generated_examples" / "sql" / "sqlite"


@dataclass
class DItem:
    sku: str
    qty: int = 1


@dataclass
class DOrder:
    id: int
    items: list[DItem]
    at: dt.datetime
    note: str | None = None


class PItem(pydantic.BaseModel):
    sku: str
    qty: int = 1


class POrder(pydantic.BaseModel):
    id: int
    items: list[PItem]
    at: dt.datetime
    note: str | None = None


class MItem(msgspec.Struct):
    sku: str
    qty: int = 1


class MOrder(msgspec.Struct):
    id: int
    items: list[MItem]
    at: dt.datetime
    note: str | None = None


@dataclass
class Refund:
    id: int


#: kind → (the order model, its item model)
KINDS: dict[str, tuple[type[Any], type[Any]]] = {
    "dataclass": (DOrder, DItem),
    "pydantic": (POrder, PItem),
    "msgspec": (MOrder, MItem),
}


def order(kind: str, id: int, sku: str = "a", qty: int = 2) -> Any:
    model, item = KINDS[kind]
    return model(id=id, items=[item(sku=sku, qty=qty)], at=AT)


def as_dict(id: int, sku: str = "a", qty: int = 2) -> dict[str, Any]:
    return {"id": id, "items": [{"sku": sku, "qty": qty}], "at": AT.isoformat()}


def typed(qt: QueueUnderTest, kind: str) -> Queue[Any]:
    return Queue(qt.queue.rendered, model=KINDS[kind][0])


async def drain(qt: QueueUnderTest, queue: Queue[Any]) -> tuple[list[Any], runtime.Counts]:
    got: list[Any] = []

    async def handle(message: runtime.Message[Any], ctx: runtime.Ctx) -> None:
        got.append(message.payload)

    counts = await runtime.Consumer(qt.url, queue, handle, concurrency=1).drain()
    return got, counts


@pytest.mark.parametrize("kind", KINDS)
def test_a_typed_queue_hands_the_handler_instances_of_its_model(engine: Engine, kind: str) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease")
        queue = typed(qt, kind)
        try:
            async with await runtime.connect(qt.url) as db:
                await queue.enqueue(db, order(kind, 1))
                await queue.enqueue(db, as_dict(2, "b", 1))  # a dict that validates
                assert await queue.enqueue_many(db, [order(kind, 3), as_dict(4)]) == 2
            with sync_connection(engine, "driver") as (conn, commit, _rollback, _execute):
                queue.sync.enqueue(conn, order(kind, 5))
                queue.sync.enqueue_many(conn, [as_dict(6)])
                commit()
            got, counts = await drain(qt, queue)
            assert counts == {"ack": 6}
            assert all(type(p) is KINDS[kind][0] for p in got), got
            assert sorted(got, key=lambda p: p.id) == [
                order(kind, 1),
                order(kind, 2, "b", 1),
                order(kind, 3),
                order(kind, 4),
                order(kind, 5),
                order(kind, 6),
            ]
            assert got[0].at == AT and type(got[0].items[0]) is KINDS[kind][1]
        finally:
            await qt.drop()

    run(go())


#: what enqueue refuses: the payload, and the words its message must hold beside the model
MISMATCHES: list[tuple[str, Any, str]] = [
    ("a field of the wrong type", as_dict(1) | {"id": "seven"}, "'id'"),
    ("a nested field of the wrong type", as_dict(1, qty="two"), "items"),  # type: ignore[arg-type]
    ("a missing field", {"items": [], "at": AT.isoformat()}, "'id'"),
    ("an instance of another class", Refund(1), "Refund"),
    ("not a dict at all", [1, 2], "list"),
]


@pytest.mark.parametrize("kind", KINDS)
def test_a_payload_that_is_not_the_model_is_refused_with_nothing_written(
    engine: Engine, kind: str
) -> None:
    model = KINDS[kind][0]

    async def go() -> None:
        qt = await make_queue(engine, "lease")
        queue = typed(qt, kind)
        try:
            async with await runtime.connect(qt.url) as db:
                for what, payload, words in MISMATCHES:
                    with pytest.raises(runtime.PayloadError) as err:
                        await queue.enqueue(db, payload)
                    message = str(err.value)
                    assert model.__name__ in message and words in message, (what, message)
                # a wrong instance of the model itself (built without validation)
                wrong = order(kind, 1)
                wrong.id = "seven"
                with pytest.raises(runtime.PayloadError, match=rf"{model.__name__}.*'id'"):
                    await queue.enqueue(db, wrong)
                # one bad item refuses the whole batch
                with pytest.raises(runtime.PayloadError, match=r"item 1 of the batch.*'id'"):
                    await queue.enqueue_many(db, [order(kind, 1), as_dict(2) | {"id": "x"}])
            with sync_connection(engine, "driver") as (conn, commit, _rollback, _execute):
                with pytest.raises(runtime.PayloadError, match=model.__name__):
                    queue.sync.enqueue(conn, Refund(1))
                commit()
            assert await qt.rows() == []
        finally:
            await qt.drop()

    run(go())


@pytest.mark.parametrize("kind", KINDS)
def test_a_row_that_does_not_decode_into_the_model_goes_to_the_dead_letter(
    engine: Engine, kind: str
) -> None:
    async def go() -> None:
        qt = await make_queue(engine, "lease", dead="table")
        try:
            # written by a service that loaded the queue without the model
            await qt.enqueue({"id": "not a number", "items": [], "at": AT.isoformat()})
            await qt.enqueue(as_dict(2))
            got, counts = await drain(qt, typed(qt, kind))
            assert got == [order(kind, 2)]
            assert counts["undecodable"] == 1 and counts["dead_letter"] == 1
            (dead,) = await qt.dead_rows()
            assert dead["payload"]["id"] == "not a number"  # kept as it was written
        finally:
            await qt.drop()

    run(go())


@dataclass
class Checked:
    """A model whose own check refuses a value its fields' types allow."""

    qty: int

    def __post_init__(self) -> None:
        if self.qty < 0:
            raise ValueError(f"qty must not be negative, not {self.qty}")


@pytest.mark.parametrize("form", ["row_lock", "lease", "advisory"])
def test_a_row_the_models_own_check_refuses_goes_to_the_dead_letter_and_the_claim_stands(
    engine: Engine, form: str
) -> None:
    """The payload is decoded as the batch is claimed: a ValueError from the model's own
    __post_init__ is that row's undecodable payload, not a failed claim, so the rest of the
    batch is handled and the row is moved unhandled."""

    async def go() -> None:
        qt = await make_queue(engine, form, dead="table")
        try:
            await qt.enqueue({"qty": 1}, {"qty": -5}, {"qty": 3})  # -5: written without it
            got, counts = await drain(qt, Queue(qt.queue.rendered, model=Checked))
            assert got == [Checked(1), Checked(3)]
            assert counts == {"ack": 2, "undecodable": 1, "dead_letter": 1}
            (dead,) = await qt.dead_rows()
            assert dead["payload"] == {"qty": -5}
            assert await drain(qt, Queue(qt.queue.rendered, model=Checked)) == ([], {})
        finally:
            await qt.drop()

    run(go())


def test_the_outbox_checks_and_decodes_the_model(engine: Engine, tmp_path: Path) -> None:
    with make(engine, tmp_path) as plain:
        outbox = runtime.outbox.Outbox(plain.rendered, model=DOrder)

        async def go() -> None:
            async with await runtime.connect(engine.url) as db:
                await outbox.put(db, order("dataclass", 1), topic="orders")
                await outbox.put_many(db, [as_dict(2)])
                with pytest.raises(runtime.PayloadError, match=r"DOrder.*'id'"):
                    await outbox.put(db, as_dict(3) | {"id": None})
                with pytest.raises(runtime.PayloadError, match="Refund"):
                    await outbox.put_many(db, [order("dataclass", 4), Refund(4)])
            with sync_connection(engine, "driver") as (conn, commit, _rollback, _execute):
                outbox.sync.put(conn, order("dataclass", 5))
                commit()
            assert len(await records(engine.url, outbox)) == 3
            got: list[Any] = []

            async def handle(message: runtime.outbox.OutboxMessage[DOrder], ctx: Any) -> None:
                got.append(message.payload)

            await outbox.relay(engine.url, handle)
            assert got == [order("dataclass", i) for i in (1, 2, 5)]

        run(go())


def test_the_harness_enqueues_drains_and_shows_model_instances(tmp_path: Path) -> None:
    path = SQL / "orders.sql"
    h = Harness(path, f"sqlite:///{tmp_path / 'h.db'}?mode=rwc", payload=POrder).sync
    h.enqueue(order("pydantic", 1))
    h.enqueue(as_dict(2))
    with pytest.raises(runtime.PayloadError, match=r"POrder.*'id'"):
        h.enqueue(as_dict(3) | {"id": "x"})
    h.assert_enqueued(as_dict(2), count=1)  # a dict compares as the model it validates to
    h.assert_enqueued(order("pydantic", 1), count=1)
    assert [r["payload"] for r in h.pending()] == [order("pydantic", 1), order("pydantic", 2)]
    seen: list[Any] = []
    drained = h.drain(lambda m, ctx: seen.append(m.payload))
    assert drained.outcomes == {1: "ack", 2: "ack"}
    assert seen == [order("pydantic", 1), order("pydantic", 2)]
    assert [s.payload for s in drained] == seen
    with pytest.raises(runtime.ConfigurationError, match="without that model"):
        Harness(runtime.load(path), "sqlite://", payload=POrder)


def test_what_load_refuses_is_one_configuration_error(tmp_path: Path) -> None:
    path = SQL / "orders.sql"
    with pytest.raises(runtime.ConfigurationError, match="not a model"):
        runtime.load(path, payload=dict)
    with pytest.raises(runtime.ConfigurationError, match="do not combine"):
        runtime.load(path, payload=DOrder, decoder=lambda d: d)

    @dataclass
    class Odd:
        n: complex

    with pytest.raises(runtime.ConfigurationError, match=r"Odd\.n is a complex"):
        runtime.load(path, payload=Odd)
    assert runtime.load(path, payload=DOrder).model is DOrder
    assert runtime.load(path).codec is None


class Colour(enum.Enum):
    RED = "red"


@dataclass
class Node:
    name: str
    children: list[Node]
    when: dt.date | None = None
    price: decimal.Decimal = decimal.Decimal("0")
    ref: uuid.UUID | None = None
    colour: Colour = Colour.RED
    pair: tuple[int, str] = (0, "")
    tags: set[str] | None = None
    weights: dict[str, float] | None = None
    mode: Literal["a", "b"] = "a"
    extra: Any = None


def test_dataclass_fields_round_trip_through_json() -> None:
    codec = payload_model(Node)
    value = Node(
        "root",
        [Node("leaf", [], when=dt.date(2026, 5, 1))],
        price=decimal.Decimal("9.99"),
        ref=uuid.UUID(int=7),
        pair=(1, "x"),
        tags={"t"},
        weights={"w": 1},
        mode="b",
        extra={"free": [1, "form"]},
    )
    assert codec.decode(codec.encode(value)) == value
    # a stored row's unknown keys are ignored; a dict given to enqueue may not have them
    assert codec.decode('{"name": "n", "children": [], "gone": 1}') == Node("n", [])
    with pytest.raises(runtime.PayloadError, match="'gone': Node has no such field"):
        codec.encode({"name": "n", "children": [], "gone": 1})
    with pytest.raises(runtime.PayloadError, match=r"'children\[0\]\.mode': expected one of"):
        codec.encode({"name": "n", "children": [{"name": "c", "children": [], "mode": "c"}]})
    with pytest.raises(runtime.PayloadError, match=r"Node: .*\['weights'\]\['w'\]"):
        codec.encode(Node("n", [], weights={"w": float("nan")}))


def test_mypy_sees_the_model_through_queue_message_and_consumer(tmp_path: Path) -> None:
    mypy_api = pytest.importorskip("mypy.api")
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from dataclasses import dataclass
            from typing import Any

            import runtime


            @dataclass
            class Order:
                id: int


            @dataclass
            class Refund:
                id: int


            queue = runtime.load("sql/sqlite/orders.sql", payload=Order)
            plain = runtime.load("sql/sqlite/orders.sql")
            reveal_type(queue)
            reveal_type(plain)


            async def handle(message: runtime.Message[Order], ctx: runtime.Ctx) -> None:
                reveal_type(message.payload)


            async def main(db: Any) -> None:
                await queue.enqueue(db, Order(1))
                await queue.enqueue(db, {"id": 1})
                await queue.enqueue(db, Refund(1))
                queue.sync.enqueue(db, Refund(2))
                await queue.enqueue_many(db, [Order(1), Refund(3)])
                runtime.Consumer("sqlite://", queue, handle)
                runtime.Consumer("sqlite://", queue, lambda m, c: print(reveal_type(m.payload)))
                runtime.Consumer("sqlite://", plain, handle)
            """
        )
    )
    out, err, status = mypy_api.run(
        [
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / ".mypy_cache"),
            "--follow-imports",
            "silent",
            str(snippet),
        ]
    )
    lines = out.splitlines()
    revealed = [line.split("note: ")[1] for line in lines if "Revealed type" in line]
    assert revealed == [
        'Revealed type is "runtime.queue.Queue[snippet.Order]"',
        'Revealed type is "runtime.queue.Queue[Any]"',
        'Revealed type is "snippet.Order"',
        'Revealed type is "snippet.Order"',
    ], out
    errors = [line for line in lines if ": error:" in line]
    assert len(errors) == 3 and all('"Refund"' in e for e in errors), out + err
    assert status == 1
