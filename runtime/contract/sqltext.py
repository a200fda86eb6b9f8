"""Parameters in SQL text: a service writes :name; each driver reads its own spelling (shared by qgen and the runtime)."""

from __future__ import annotations

import re
from collections.abc import Callable

from runtime.contract.dialects import Dialect

# :name outside quotes and not part of a PostgreSQL ::cast
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_PYFORMAT = re.compile(r"%\(([A-Za-z_]\w*)\)s")


def _outside_quotes(sql: str, fn: Callable[[str], str]) -> str:
    """Apply fn to the parts of sql outside '…', "…" and `…` quotes and outside comments
    (`-- …` to the line's end, `/* … */`): a placeholder or a quote inside a comment is not SQL.
    """
    out, i, n = [], 0, len(sql)
    start = 0
    while i < n:
        ch = sql[i]
        if ch in "'\"`":
            end = _quote_end(sql, i)
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            end = n if end < 0 else end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            end = n if end < 0 else end + 2
        else:
            i += 1
            continue
        out.append(fn(sql[start:i]))
        out.append(sql[i:end])
        i = start = end
    out.append(fn(sql[start:]))
    return "".join(out)


def _quote_end(sql: str, i: int) -> int:
    """Where the quoted text starting at sql[i] ends (one past its closing quote)."""
    ch, j, n = sql[i], i + 1, len(sql)
    while j < n:
        if sql[j] == ch:
            if j + 1 < n and sql[j + 1] == ch:  # doubled quote inside
                j += 2
                continue
            break
        if sql[j] == "\\" and ch == "'":
            j += 2
            continue
        j += 1
    return j + 1


def named_params(sql: str) -> list[str]:
    """The :name parameters a service's SQL uses, in order of first use."""
    found: list[str] = []

    def grab(part: str) -> str:
        found.extend(_NAMED.findall(part))
        return part

    _outside_quotes(sql, grab)
    return list(dict.fromkeys(found))


def to_driver(sql: str, dialect: Dialect) -> str:
    """A service's :name SQL in the driver's style; a literal % is doubled for pyformat drivers."""
    if dialect.paramstyle == "named":
        return sql
    return named_to_pyformat(sql)


def named_to_pyformat(sql: str) -> str:
    """:name SQL as ``%(name)s`` SQL, a literal % doubled."""
    sql = sql.replace("%", "%%")
    return _outside_quotes(sql, lambda part: _NAMED.sub(r"%(\1)s", part))


def to_named(sql: str) -> str:
    """Driver-style SQL back to :name for parsing (pyformat → named, %% → %)."""
    return _PYFORMAT.sub(r":\1", sql).replace("%%", "%")


def driver_params(sql: str) -> list[str]:
    """The parameter names driver-style SQL binds (either style)."""
    return list(dict.fromkeys([*_PYFORMAT.findall(sql), *named_params(to_named(sql))]))
