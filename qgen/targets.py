"""The rendered files an operating command works on (``qgen verify``, ``apply``, ``stats``,
``dead``, ``serve``, …): the declaration's queues for the database URL's dialect.

It imports the runtime inside the function: rendering and checking never load it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from qgen.declaration import load_declaration


def loaded_files(
    args: argparse.Namespace, names: list[str], outbox: bool = False
) -> tuple[str, list[Any]]:
    """The database URL and the rendered files of ``names`` (default: every queue, and with
    ``outbox`` the outbox too, which ``names`` may then name) for the URL's dialect, under the
    declaration's out folder."""
    import runtime
    from runtime.contract.dialects import dialect_for_scheme
    from runtime.worker import database_url

    decl = load_declaration(args.config)
    own = decl.outbox.name if outbox and decl.outbox is not None else None
    names = names or [*decl.queues, *([own] if own else [])]
    unknown = [n for n in names if n not in decl.queues and n != own]
    if unknown:
        raise runtime.ConfigurationError(
            f"no queue {unknown[0]!r} in {args.config} "
            f"(declared: {', '.join([*decl.queues, *([own] if own else [])]) or 'none'})"
        )
    read_db = getattr(args, "read_db", None)
    try:
        url = database_url(args.db)
    except runtime.ConfigurationError:
        if not read_db:
            raise
        url = read_db  # only reads to do: the replica's URL says the dialect
    dialect = dialect_for_scheme(url.split("://", 1)[0])
    if dialect is None:
        raise runtime.ConfigurationError(f"cannot tell the dialect of {url.split('://', 1)[0]}://")
    out = Path(args.config).resolve().parent / decl.out / dialect.name
    return url, [runtime.load(out / f"{n}.sql") for n in names]
