"""Typed payloads: ``runtime.load(path, payload=Order)`` checks each payload against a model at
enqueue and hands the handler an ``Order``.

A model is a dataclass, a pydantic v2 model (``pydantic.BaseModel``) or a msgspec Struct. Its
JSON form is stored under the rules of every other payload (runtime.payloads), and only a
payload whose stored text decodes back into the model is written: an instance of the model,
or a dict that validates as one (a schedule's payload, a request body), is encoded; anything
else raises PayloadError naming the model and the field, nothing written. A stored row that
does not decode into the model is an undecodable payload (see runtime.consumer).

A dataclass's fields are checked by this module (pydantic and msgspec check their own): JSON's
types (``str``, ``int``, ``float``, ``bool``, ``None``), ``list[T]``, ``tuple[…]``,
``set[T]``, ``dict[str, T]``, unions (``T | None``), ``Literal[…]``, ``Any``, an ``Enum``
(stored as its value), ``datetime``, ``date``, ``time`` (ISO text), ``UUID`` and ``Decimal``
(text), and nested dataclasses. A field of another type is refused by ``load``.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import sys
import types
import typing
from collections.abc import Callable, Mapping, Set
from contextvars import ContextVar
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from typing import Any, Generic

from runtime.contract.errors import ConfigurationError, PayloadError
from runtime.payloads import P, encode_payload

__all__ = ["PayloadModel", "codec", "payload_model"]


class PayloadModel(Generic[P]):
    """A model's codec: ``encode`` (a payload to the JSON text stored) and ``decode`` (the
    stored text back to an instance), both raising PayloadError naming the model and field."""

    def __init__(self, cls: type[P]) -> None:
        self.cls = cls
        self.name = cls.__qualname__

    def _plain(self, value: Any) -> Any:
        """An instance's JSON value (not yet checked against the storage rules)."""
        raise NotImplementedError

    def _validate(self, data: Mapping[str, Any]) -> P:
        """A dict given to enqueue, as an instance (PayloadError when it does not validate)."""
        raise NotImplementedError

    def decode(self, text: str) -> P:
        """The stored JSON text as an instance of the model."""
        raise NotImplementedError

    def encode(self, value: Any) -> str:
        """The JSON text stored for ``value``, an instance of the model or a dict that
        validates as one; it decodes back into the model, else PayloadError."""
        if not isinstance(value, self.cls):
            if not isinstance(value, Mapping):
                raise PayloadError(
                    f"payload is of type {type(value).__qualname__} where {self.name} is "
                    f"expected: pass an instance of {self.name} or a dict of its fields"
                )
            value = self._validate(value)
        plain = self._plain(value)
        try:
            text = encode_payload(plain)
        except PayloadError as exc:
            raise PayloadError(f"{self.name}: {exc}") from None
        self.decode(text)  # what is written is what a consumer can read
        return text

    def _invalid(self, where: str, why: str) -> PayloadError:
        return PayloadError(f"payload is not a valid {self.name}: {where}{why}")


# ---------------------------------------------------------------------- pydantic


class _Pydantic(PayloadModel[P]):
    def _errors(self, exc: Any) -> PayloadError:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first.get("loc", ()))
        more = f" (and {exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
        return self._invalid(f"field '{loc}': " if loc else "", f"{first['msg']}{more}")

    def _plain(self, value: Any) -> Any:
        from pydantic_core import PydanticSerializationError

        try:
            return value.model_dump(mode="json", warnings=False)
        except PydanticSerializationError as exc:
            raise self._invalid("", str(exc)) from None

    def _validate(self, data: Mapping[str, Any]) -> P:
        from pydantic import ValidationError

        try:
            return self.cls.model_validate(data)  # type: ignore[attr-defined,no-any-return]
        except ValidationError as exc:
            raise self._errors(exc) from None

    def decode(self, text: str) -> P:
        from pydantic import ValidationError

        try:
            return self.cls.model_validate_json(text)  # type: ignore[attr-defined,no-any-return]
        except ValidationError as exc:
            raise self._errors(exc) from None


# ---------------------------------------------------------------------- msgspec


class _Msgspec(PayloadModel[P]):
    def _error(self, exc: Exception) -> PayloadError:
        # "Expected `int`, got `str` - at `$.qty`", "Object missing required field `id`"
        why, _, at = str(exc).partition(" - at `")
        where = at.rstrip("`").removeprefix("$").removeprefix(".")
        missing = re.fullmatch(r"Object missing required field `(.+)`", why)
        if missing:
            where, why = f"{where}.{missing[1]}".lstrip("."), "missing (it has no default)"
        return self._invalid(f"field '{where}': " if where else "", why)

    def _plain(self, value: Any) -> Any:
        import msgspec

        try:
            return msgspec.to_builtins(value)
        except (TypeError, ValueError) as exc:
            raise self._invalid("", str(exc)) from None

    def _validate(self, data: Mapping[str, Any]) -> P:
        import msgspec

        try:
            return msgspec.convert(dict(data), self.cls)  # type: ignore[no-any-return]
        except msgspec.ValidationError as exc:
            raise self._error(exc) from None

    def decode(self, text: str) -> P:
        import msgspec

        try:
            return msgspec.json.decode(text, type=self.cls)  # type: ignore[no-any-return]
        except msgspec.ValidationError as exc:
            raise self._error(exc) from None
        except msgspec.DecodeError as exc:
            raise self._invalid("", f"not JSON ({exc})") from None


# ---------------------------------------------------------------------- dataclasses


class _Mismatch(Exception):
    """A value that does not fit its annotation: where (a field path) and why."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(why)
        self.where, self.why = where, why


#: turns a value into JSON (dump) or JSON into a value (load); raises _Mismatch
Convert = Callable[[Any, str], Any]


def _got(value: Any) -> str:
    return f"got {type(value).__qualname__} {value!r:.40}"


def _exact(kind: type) -> tuple[Convert, Convert]:
    """str, int, bool: that type and no other (a bool is no int, an int no str); a subclass
    (not an Enum) is stored as its base type."""

    def check(value: Any, where: str) -> Any:
        if type(value) is kind:
            return value
        if isinstance(value, kind) and not isinstance(value, bool | enum.Enum):
            return kind(value)
        raise _Mismatch(where, f"expected {kind.__name__}, {_got(value)}")

    return check, check


def _float() -> tuple[Convert, Convert]:
    def dump(value: Any, where: str) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _Mismatch(where, f"expected float, {_got(value)}")
        return float(value)

    return dump, dump


def _text(kind: type, parse: Callable[[str], Any]) -> tuple[Convert, Convert]:
    """A type stored as text: its ISO form or str()."""

    def dump(value: Any, where: str) -> Any:
        if not isinstance(value, kind) or (kind is date and isinstance(value, datetime)):
            raise _Mismatch(where, f"expected {kind.__name__}, {_got(value)}")
        return value.isoformat() if hasattr(value, "isoformat") else str(value)

    def load(value: Any, where: str) -> Any:
        if isinstance(value, kind) and not (kind is date and isinstance(value, datetime)):
            return value  # in a dict given to enqueue
        if not isinstance(value, str):
            raise _Mismatch(where, f"expected {kind.__name__} as text, {_got(value)}")
        try:
            return parse(value)
        except (ValueError, InvalidOperation):
            raise _Mismatch(where, f"{value!r:.40} is not a {kind.__name__}") from None

    return dump, load


def _decimal(text: str) -> Decimal:
    d = Decimal(text)
    if not d.is_finite():
        raise ValueError(text)
    return d


def _enum(kind: type[enum.Enum]) -> tuple[Convert, Convert]:
    def dump(value: Any, where: str) -> Any:
        if not isinstance(value, kind):
            raise _Mismatch(where, f"expected {kind.__name__}, {_got(value)}")
        return value.value

    def load(value: Any, where: str) -> Any:
        try:
            return kind(value)
        except ValueError:
            raise _Mismatch(where, f"{value!r:.40} is not a {kind.__name__}") from None

    return dump, load


def _literal(choices: tuple[Any, ...]) -> tuple[Convert, Convert]:
    def check(value: Any, where: str) -> Any:
        if not any(type(value) is type(c) and value == c for c in choices):
            raise _Mismatch(where, f"expected one of {list(choices)}, {_got(value)}")
        return value

    return check, check


def _union(arms: list[tuple[Convert, Convert]], name: str) -> tuple[Convert, Convert]:
    def each(i: int) -> Convert:
        def convert(value: Any, where: str) -> Any:
            for arm in arms:
                try:
                    return arm[i](value, where)
                except _Mismatch:
                    continue
            raise _Mismatch(where, f"expected {name}, {_got(value)}")

        return convert

    return each(0), each(1)


def _sequence(item: tuple[Convert, Convert], made: type) -> tuple[Convert, Convert]:
    kinds = (list, tuple) if made in (list, tuple) else (set, frozenset)

    def dump(value: Any, where: str) -> Any:
        if not isinstance(value, kinds) or isinstance(value, str):
            raise _Mismatch(where, f"expected {made.__name__}, {_got(value)}")
        return [item[0](v, f"{where}[{i}]") for i, v in enumerate(value)]

    def load(value: Any, where: str) -> Any:
        if not isinstance(value, list | tuple | set | frozenset):
            raise _Mismatch(where, f"expected {made.__name__} (a JSON array), {_got(value)}")
        return made(item[1](v, f"{where}[{i}]") for i, v in enumerate(value))

    return dump, load


def _fixed_tuple(items: list[tuple[Convert, Convert]]) -> tuple[Convert, Convert]:
    def each(i: int) -> Convert:
        def convert(value: Any, where: str) -> Any:
            if not isinstance(value, tuple | list) or len(value) != len(items):
                raise _Mismatch(where, f"expected {len(items)} items, {_got(value)}")
            out = [
                c[i](v, f"{where}[{n}]") for n, (c, v) in enumerate(zip(items, value, strict=True))
            ]
            return out if i == 0 else tuple(out)

        return convert

    return each(0), each(1)


def _mapping(item: tuple[Convert, Convert]) -> tuple[Convert, Convert]:
    def each(i: int) -> Convert:
        def convert(value: Any, where: str) -> Any:
            if not isinstance(value, Mapping):
                raise _Mismatch(where, f"expected dict, {_got(value)}")
            out = {}
            for k, v in value.items():
                if not isinstance(k, str):
                    raise _Mismatch(where, f"the key {k!r:.40} is not a str")
                out[k] = item[i](v, f"{where}[{k!r}]")
            return out

        return convert

    return each(0), each(1)


def _anything(value: Any, where: str) -> Any:
    return value


class _Dataclass(PayloadModel[P]):
    def __init__(self, cls: type[P]) -> None:
        super().__init__(cls)
        self._dump, self._load = _dataclass(cls, {})

    def _run(self, convert: Convert, value: Any) -> Any:
        try:
            return convert(value, "")
        except _Mismatch as exc:
            where = exc.where.lstrip(".")
            raise self._invalid(f"field '{where}': " if where else "", exc.why) from None

    def _plain(self, value: Any) -> Any:
        return self._run(self._dump, value)

    def _validate(self, data: Mapping[str, Any]) -> P:
        return self._run(_strict(self._load), data)  # type: ignore[no-any-return]

    def decode(self, text: str) -> P:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise self._invalid("", f"not JSON ({exc})") from None
        return self._run(self._load, data)  # type: ignore[no-any-return]


#: a load that refuses keys the dataclass has no field for (a dict given to enqueue: most likely
#: a misspelt field); a stored row's extra keys are ignored (a field removed while its
#: messages were queued)
_strict_keys: ContextVar[bool] = ContextVar("strict_keys", default=False)


def _strict(load: Convert) -> Convert:
    def convert(value: Any, where: str) -> Any:
        token = _strict_keys.set(True)
        try:
            return load(value, where)
        finally:
            _strict_keys.reset(token)

    return convert


def _dataclass_dump(cls: type, fields: Mapping[str, tuple[Convert, Convert]]) -> Convert:
    def dump(value: Any, where: str) -> Any:
        if not isinstance(value, cls):
            raise _Mismatch(where, f"expected {cls.__qualname__}, {_got(value)}")
        return {name: c[0](getattr(value, name), f"{where}.{name}") for name, c in fields.items()}

    return dump


def _dataclass_load(
    cls: type, fields: Mapping[str, tuple[Convert, Convert]], required: Set[str]
) -> Convert:
    def load(value: Any, where: str) -> Any:
        if isinstance(value, cls) and where:  # a nested instance inside a dict given to enqueue
            return value
        if not isinstance(value, Mapping):
            raise _Mismatch(where, f"expected {cls.__qualname__} (a JSON object), {_got(value)}")
        if _strict_keys.get():
            unknown = sorted(k for k in value if k not in fields)
            if unknown:
                raise _Mismatch(f"{where}.{unknown[0]}", f"{cls.__qualname__} has no such field")
        args = {}
        for name, c in fields.items():
            if name in value:
                args[name] = c[1](value[name], f"{where}.{name}")
            elif name in required:
                raise _Mismatch(f"{where}.{name}", "missing (it has no default)")
        return cls(**args)

    return load


def _dataclass(cls: type, seen: dict[type, tuple[Convert, Convert]]) -> tuple[Convert, Convert]:
    if cls in seen:  # a recursive model (a field of its own type): bound once built
        return seen[cls]
    # filled below, after seen holds the pair: a field of the class's own type finds it there
    fields: dict[str, tuple[Convert, Convert]] = {}
    required: set[str] = set()
    dump, load = _dataclass_dump(cls, fields), _dataclass_load(cls, fields, required)
    seen[cls] = (dump, load)
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:
        raise ConfigurationError(
            f"payload={cls.__qualname__}: its annotations cannot be resolved ({exc}): define "
            "the classes its fields name at module level"
        ) from None
    for f in dataclasses.fields(cls):
        if not f.init:
            continue
        fields[f.name] = _field(hints[f.name], f"{cls.__qualname__}.{f.name}", seen)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.add(f.name)
    return dump, load


_SIMPLE: dict[Any, Callable[[], tuple[Convert, Convert]]] = {
    str: lambda: _exact(str),
    int: lambda: _exact(int),
    bool: lambda: _exact(bool),
    float: _float,
    type(None): lambda: _literal((None,)),
    None: lambda: _literal((None,)),
    datetime: lambda: _text(datetime, datetime.fromisoformat),
    date: lambda: _text(date, date.fromisoformat),
    time: lambda: _text(time, time.fromisoformat),
    Decimal: lambda: _text(Decimal, _decimal),
}


def _field(
    tp: Any, owner: str, seen: dict[type, tuple[Convert, Convert]]
) -> tuple[Convert, Convert]:
    """The converters of one annotation; ConfigurationError for a type JSON cannot carry."""
    import uuid

    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _field(args[0], owner, seen)
    if tp is Any or tp is object:
        return _anything, _anything
    if tp in _SIMPLE:
        return _SIMPLE[tp]()
    if tp is uuid.UUID:
        return _text(uuid.UUID, uuid.UUID)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return _enum(tp)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _dataclass(tp, seen)
    if origin is typing.Literal:
        return _literal(args)
    if origin is typing.Union or origin is types.UnionType:
        return _union([_field(a, owner, seen) for a in args], " | ".join(map(_name, args)))
    if tp in (list, tuple, set, frozenset):
        return _sequence((_anything, _anything), tp)
    if origin in (list, set, frozenset) or (origin is tuple and args[1:] == (...,)):
        return _sequence(_field(args[0], owner, seen), origin)
    if origin is tuple:
        return _fixed_tuple([_field(a, owner, seen) for a in args])
    if tp is dict or (origin in (dict, Mapping) and args[:1] in ((str,), ())):
        return _mapping(_field(args[1], owner, seen) if args else (_anything, _anything))
    raise ConfigurationError(
        f"payload: {owner} is a {_name(tp)}, which a dataclass payload cannot carry as JSON: "
        "use JSON types, list/tuple/set/dict[str, …], unions, Literal, Enum, datetime, date, "
        "time, UUID, Decimal or a nested dataclass (or make the model a pydantic model or a "
        "msgspec Struct)"
    )


def _name(tp: Any) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


# ---------------------------------------------------------------------- which kind


def _subclass_of(cls: type, module: str, name: str) -> bool:
    """Whether ``cls`` derives from ``module.name``, without importing that module (a class
    can only derive from it once it is imported)."""
    mod = sys.modules.get(module)
    base = getattr(mod, name, None) if mod is not None else None
    return isinstance(base, type) and issubclass(cls, base)


def payload_model(cls: Any) -> PayloadModel[Any]:
    """The codec of ``payload=cls``; ConfigurationError for anything but a dataclass, a
    pydantic v2 model or a msgspec Struct (or a dataclass field JSON cannot carry)."""
    if isinstance(cls, type):
        if _subclass_of(cls, "pydantic", "BaseModel"):
            return _Pydantic(cls)
        if _subclass_of(cls, "msgspec", "Struct"):
            return _Msgspec(cls)
        if dataclasses.is_dataclass(cls):
            return _Dataclass(cls)
    raise ConfigurationError(
        f"payload={cls!r:.60} is not a model: pass a dataclass, a pydantic v2 model "
        "(pydantic.BaseModel) or a msgspec Struct class (pip install 'qgen-sql[pydantic]' or "
        "'qgen-sql[msgspec]')"
    )


def codec(model: Any, encoder: Any = None, decoder: Any = None) -> PayloadModel[Any] | None:
    """The codec of ``load(path, payload=model, encoder=…, decoder=…)``: None without a model;
    ConfigurationError for a model with an encoder or decoder (the model says how its fields
    are stored: the hooks would not know which dicts are the model's)."""
    if model is None:
        return None
    if encoder is not None or decoder is not None:
        raise ConfigurationError(
            f"payload={getattr(model, '__qualname__', model)!r} and encoder=/decoder= do not "
            "combine: the model encodes and decodes its own fields (a dataclass's datetime, "
            "date, UUID, Decimal and Enum fields; pydantic and msgspec their types), so drop "
            "encoder= and decoder=, or load without payload= to keep the hooks"
        )
    return payload_model(model)
