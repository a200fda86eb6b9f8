"""Payloads: what a service enqueues, checked and written as JSON text that every engine keeps
as it is, and read back with the same Python types.

One rule for every engine (each limit is the narrowest engine's, so a message that one engine
accepts is accepted by all of them, and comes back equal):

* the types are JSON's: dict (with str keys), list, str, int, float, bool and None; anything
  else goes through the queue's ``encoder`` (``runtime.load(path, encoder=…, decoder=…)``)
  or is refused;
* strings hold no NUL (PostgreSQL's jsonb refuses it) and no lone surrogate (not UTF-8);
* integers fit in 64 bits, -2**63 … 2**64-1 (MySQL's JSON type keeps no more);
* floats are finite (JSON has no NaN or infinity); -0.0 is stored as 0.0 (jsonb has no
  negative zero); a float is written in positional notation with a decimal point, so that
  jsonb's numeric, which expands exponents, still reads back as a float;
* lists and dicts nest at most ``MAX_DEPTH`` deep (MariaDB's JSON check refuses 32).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol

from runtime.contract.errors import PayloadError

#: a queue's payload type: the model of ``runtime.load(path, payload=Model)``, else Any; its
#: default (PEP 696, for type checkers: typing has it from 3.13) makes a bare ``Queue`` or
#: ``Message`` mean ``…[Any]``
if TYPE_CHECKING:
    from typing_extensions import TypeVar

    P = TypeVar("P", default=Any)
else:
    from typing import TypeVar

    P = TypeVar("P")

#: lists and dicts nested deeper than this are refused (MariaDB's JSON_VALID refuses 32)
MAX_DEPTH = 31
_INT_MIN, _INT_MAX = -(2**63), 2**64 - 1

#: turns a value JSON cannot carry into one it can (e.g. a datetime into {"$dt": "…"})
Encoder = Callable[[Any], Any]
#: called with every decoded JSON object (dict); returns what stands for it
Decoder = Callable[[dict[str, Any]], Any]


class Codec(Protocol):
    """A payload model's codec (runtime.models.PayloadModel): a model's instance as JSON text
    and back, PayloadError when a value is not one."""

    def encode(self, value: Any) -> str: ...

    def decode(self, text: str) -> Any: ...


_HINT = "pass encoder=/decoder= to runtime.load() to carry other types"


def _refuse(what: str, path: str, fix: str = _HINT) -> PayloadError:
    return PayloadError(f"payload cannot be stored: {what} at {path or 'the top'}; {fix}")


def _check_str(s: str, path: str) -> None:
    if "\x00" in s:
        raise _refuse("a string holds NUL (\\u0000)", path, "PostgreSQL cannot store it: drop it")
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise _refuse(
            "a string holds a lone surrogate", path, f"not UTF-8 ({exc.reason})"
        ) from None


def _float_text(f: float) -> str:
    """A float as JSON that every engine reads back as the same float."""
    text = repr(f)
    if "e" in text or "E" in text:
        text = format(Decimal(text), "f")
    return text if "." in text else text + ".0"


def _too_deep(path: str) -> PayloadError:
    return _refuse(
        f"lists and dicts nest deeper than {MAX_DEPTH}",
        path,
        "flatten the payload (MariaDB refuses deeper JSON)",
    )


def _plain_list(
    value: list[Any], encoder: Encoder | None, depth: int, path: str
) -> tuple[Any, bool]:
    if depth >= MAX_DEPTH:
        raise _too_deep(path)
    special = False
    out_list = []
    for i, item in enumerate(value):
        v, s = _plain(item, encoder, depth + 1, f"{path}[{i}]")
        out_list.append(v)
        special |= s
    return out_list, special


def _plain_dict(
    value: dict[Any, Any], encoder: Encoder | None, depth: int, path: str
) -> tuple[Any, bool]:
    if depth >= MAX_DEPTH:
        raise _too_deep(path)
    special = False
    out: dict[str, Any] = {}
    for k, item in value.items():
        if type(k) is not str:
            raise _refuse(
                f"the key {k!r} is a {type(k).__name__}, not a str",
                path,
                "JSON keys are strings: convert it before enqueueing",
            )
        _check_str(k, f"{path}[{k!r}]")
        v, s = _plain(item, encoder, depth + 1, f"{path}[{k!r}]")
        out[k] = v
        special |= s
    return out, special


def _plain(value: Any, encoder: Encoder | None, depth: int, path: str) -> tuple[Any, bool]:
    """The value with the encoder applied and every rule checked; True when a float needs
    the positional spelling (json.dumps would write an exponent or -0.0)."""
    t = type(value)
    if value is None or t is bool:
        return value, False
    if t is str:
        _check_str(value, path)
        return value, False
    if t is int:
        if not _INT_MIN <= value <= _INT_MAX:
            raise _refuse(
                f"the integer {value} does not fit in 64 bits",
                path,
                "send it as a string (MySQL's JSON type keeps no more)",
            )
        return value, False
    if t is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise _refuse(f"{value} is not a JSON number", path, "send a finite number or None")
        if value == 0.0:
            return 0.0, False
        return value, "e" in repr(value)
    if t is list:
        return _plain_list(value, encoder, depth, path)
    if t is dict:
        return _plain_dict(value, encoder, depth, path)
    if encoder is not None:
        encoded = encoder(value)
        if type(encoded) is t:
            raise _refuse(
                f"the encoder returned a {t.__name__} for a {t.__name__}", path, "return JSON"
            )
        return _plain(encoded, None, depth, path)
    hint = "pass a list" if t is tuple else _HINT
    raise _refuse(f"a {t.__name__} is not a JSON value (it would not come back as one)", path, hint)


def _dumps(value: Any) -> str:
    """JSON text with floats in positional notation (the slow path, for such floats only)."""
    if type(value) is float:
        return _float_text(value)
    if type(value) is list:
        return "[" + ",".join(_dumps(v) for v in value) + "]"
    if type(value) is dict:
        return (
            "{"
            + ",".join(
                json.dumps(k, ensure_ascii=False) + ":" + _dumps(v) for k, v in value.items()
            )
            + "}"
        )
    return json.dumps(value, ensure_ascii=False)


def encode_payload(payload: Any, encoder: Encoder | None = None, model: Codec | None = None) -> str:
    """The JSON text stored for a payload; PayloadError when an engine could not keep it, or
    (a ``model``: runtime.models) when it is not a valid instance of the model.

    ``encode_payload({"n": 1})`` → ``'{"n":1}'``
    """
    if model is not None:
        return model.encode(payload)
    value, special = _plain(payload, encoder, 0, "")
    if special:
        return _dumps(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


#: json's own scanner, called directly on the common case (text that is one JSON value and
#: nothing around it): json.loads' checks and its two whitespace matches cost as much again
_scan_once: Callable[[str, int], tuple[Any, int]] = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def decode_payload(value: Any, decoder: Decoder | None = None, model: Codec | None = None) -> Any:
    """A stored payload back as Python: every engine's driver hands it over as text; with a
    ``model`` (runtime.models), an instance of it.

    Raises PayloadError (naming the reason) for text that is not JSON, or not the model.
    """
    if type(value) is str and decoder is None and model is None:
        try:
            obj, end = _scan_once(value, 0)
        except Exception:  # not JSON, or JSON after whitespace: json.loads says which
            pass
        else:
            if end == len(value):
                return obj
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = bytes(value).decode()
        except UnicodeDecodeError as exc:
            raise PayloadError(f"the stored payload is not UTF-8 ({exc.reason})") from exc
    if not isinstance(value, str):
        raise PayloadError(
            f"the stored payload is a {type(value).__name__}, not JSON text "
            "(is the payload column JSON or text?)"
        )
    if model is not None:
        try:
            return model.decode(value)
        except PayloadError:
            raise
        except Exception as exc:  # the model's own check (a __post_init__, a validator) refused it
            raise PayloadError(
                f"the stored payload does not decode into the model ({type(exc).__name__}: {exc})"
            ) from exc
    try:
        return json.loads(value, object_hook=decoder)
    except PayloadError:
        raise
    except Exception as exc:
        raise PayloadError(f"the stored payload is not JSON the decoder accepts ({exc})") from exc


def shown_payload(value: Any, decoder: Decoder | None = None) -> tuple[Any, str | None]:
    """A stored payload for reading back (dead list, status): ``(decoded, None)``, or, when it
    cannot be decoded (one way into the dead letter), ``(its text, why)``, so that a reader
    still sees the message and the reason instead of an error."""
    try:
        return decode_payload(value, decoder), None
    except PayloadError as exc:
        if isinstance(value, bytes | bytearray | memoryview):
            value = bytes(value).decode("utf-8", "replace")
        return str(value), str(exc)
