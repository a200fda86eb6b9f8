"""Reads a rendered file back: its header and its named statements, exactly as the driver receives them."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from runtime.dialects import DIALECTS, Dialect
from runtime.errors import RenderedFileError

_HEADER = re.compile(r"^-- ([a-z_]+): (.*)$")
_NAME = re.compile(r"^-- name: (\S+)$")
_STATEMENT_END = re.compile(r";[ \t]*$")


@dataclass(frozen=True)
class RenderedFile:
    """A rendered file: `header` (queue, dialect, form, …) and `statements` (name → SQL list)."""

    path: str
    header: dict[str, str]
    statements: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def dialect(self) -> Dialect:
        return DIALECTS[self.header["dialect"]]

    @property
    def columns(self) -> dict[str, str]:
        """Logical column → the table's real name, as declared."""
        return dict(kv.split("=", 1) for kv in self.header.get("columns", "").split())

    def get(self, name: str) -> tuple[str, ...] | None:
        return self.statements.get(name)

    def require(self, name: str) -> tuple[str, ...]:
        st = self.statements.get(name)
        if not st:
            raise RenderedFileError(
                f"{self.path}: has no '{name}' statement; render it again with `qgen render`"
            )
        return st


def parse_rendered(text: str, path: str = "<text>") -> RenderedFile:
    """Parse the text of a rendered file (see `load` for reading one from disk)."""
    lines = text.splitlines()
    if not lines or not lines[0].startswith("-- DO NOT EDIT"):
        raise RenderedFileError(
            f"{path}: not a file rendered by qgen (no DO NOT EDIT header); "
            "render it with `qgen render`"
        )
    header: dict[str, str] = {}
    statements: dict[str, tuple[str, ...]] = {}
    name: str | None = None
    body: list[str] = []

    def close() -> None:
        if name is None:
            return
        sql_lines = [ln for ln in body if not ln.startswith("-- ")]
        parts, cur = [], []
        for ln in sql_lines:
            cur.append(ln)
            if _STATEMENT_END.search(ln):
                parts.append(_STATEMENT_END.sub("", "\n".join(cur)).strip())
                cur = []
        if any(s.strip() for s in cur):
            raise RenderedFileError(f"{path}: statement '{name}' does not end with ';'")
        statements[name] = tuple(p for p in parts if p)

    for ln in lines[1:]:
        m = _NAME.match(ln)
        if m:
            close()
            name, body = m.group(1), []
            continue
        if name is None:
            h = _HEADER.match(ln)
            if h:
                header[h.group(1)] = h.group(2).strip()
            continue
        body.append(ln)
    close()
    kind_ok = "queue" in header or "outbox" in header
    if not kind_ok or header.get("dialect") not in DIALECTS:
        raise RenderedFileError(
            f"{path}: the header names no queue/outbox or an unknown dialect; "
            "render it again with `qgen render`"
        )
    return RenderedFile(path=path, header=header, statements=statements)


def read_rendered(path: str | Path) -> RenderedFile:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise RenderedFileError(
            f"{path}: cannot be read ({exc.strerror or exc}); render it with `qgen render`"
        ) from None
    return parse_rendered(text, str(path))
