"""The generator's pipeline, in one direction: declaration → draft → text → read back → validate → sealed file.

What is validated is what the runtime reads: the draft's text is read back with the
runtime's own reader, a block of the service's SQL that reads back differently from how it
was declared is refused, the statements as read are validated, and the file written with
their kinds is read back once more, seal and all, before it is returned.
"""

from __future__ import annotations

from pathlib import Path

import jinja2

from qgen.declaration import Declaration, DeclarationError, QueueDeclaration, Unit
from qgen.render import Draft, environment, render_unit
from qgen.validate import validate_statements
from runtime.contract.errors import RenderedFileError
from runtime.contract.rendered import parse_rendered, split_blocks


def build_unit(
    unit: Unit,
    dialect: str,
    path: Path | str = "qgen.toml",
    env: jinja2.Environment | None = None,
) -> str:
    """The validated, sealed text of one queue's (or the outbox's) file for one dialect."""
    draft = render_unit(unit, dialect, env)
    read_back = _read_back(draft, path)
    origins = {b.name: b.origin for b in draft.blocks}
    kinds = validate_statements(unit, draft.dialect, read_back, origins, path)
    text = draft.text(kinds)
    try:
        final = parse_rendered(text, f"{dialect}/{unit.name}.sql")
    except RenderedFileError as exc:  # the writer and the reader disagree: a bug of ours
        raise AssertionError(f"qgen wrote a file its reader refuses: {exc}") from None
    if {n: tuple(s) for n, s in final.statements.items()} != read_back:
        raise AssertionError("qgen wrote statements other than those it validated")
    return text


def _read_back(draft: Draft, path: Path | str) -> dict[str, tuple[str, ...]]:
    """The draft's blocks as the runtime's reader finds them in its text. A block of the
    service's SQL that reads back otherwise than it was declared is refused, naming its key
    (each is read alone first, so the message names the block at fault)."""
    for block in draft.blocks:
        if block.origin == "template":
            continue
        if _split(draft.text(blocks=[block])) != {block.name: tuple(block.sql)}:
            unit = draft.unit
            where = f"queue '{unit.name}'" if isinstance(unit, QueueDeclaration) else "outbox"
            raise DeclarationError(
                path,
                where,
                block.origin,
                "its SQL would not read back from the rendered file as written: a line of "
                "it ends with ';' or starts with '-- name:' inside a comment or a literal "
                f"[{draft.dialect.name}]",
                "remove the comment, or keep ';' off the end and '-- name:' off the start "
                "of lines inside literals",
            )
    read_back = _split(draft.text())
    if read_back != {b.name: tuple(b.sql) for b in draft.blocks}:
        raise AssertionError(f"a template renders a block the reader splits otherwise: {draft}")
    return read_back


def _split(text: str) -> dict[str, tuple[str, ...]] | None:
    """The blocks of a file's text, as the runtime's splitter cuts them (None: it refuses)."""
    lines = text.split("\n")[:-1]
    try:
        found = split_blocks(lines[lines.index("") :], "<draft>")
    except RenderedFileError:
        return None
    return {name: tuple(str(s) for s in step) for name, step in found.items()}


def render_declaration(
    decl: Declaration, dialects: list[str] | None = None, out: Path | str | None = None
) -> dict[Path, str]:
    """Every file the declaration renders, ``<out>/<dialect>/<unit>.sql`` → its sealed text
    (``out``: the declaration's own unless given)."""
    env = environment()
    folder = Path(decl.out if out is None else out)
    return {
        folder / dialect / f"{unit.name}.sql": build_unit(unit, dialect, decl.path, env)
        for dialect in dialects or decl.dialects
        for unit in decl.units()
    }
