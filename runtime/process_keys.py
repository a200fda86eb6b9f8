"""The advisory keys a consumer of this process holds where the engine has none (SQLite).

The advisory form takes and releases them; operate's cancel and status read them (a row whose
key is held here is in flight). Both import this module, neither the other.
"""

from __future__ import annotations

from collections.abc import Iterable

#: the ids of the rows held by a consumer of this process, by (keyspace: the database, table)
_held: dict[tuple[str, str], set[int]] = {}


def take_keys(keyspace: str, table: str, ids: Iterable[int], limit: int) -> list[int]:
    """Hold the keys of the first ``limit`` of these rows no consumer of this process holds
    yet, in the order given: their ids."""
    held = _held.get((keyspace, table))
    if held is None:
        held = _held[keyspace, table] = set()
    taken: list[int] = []
    if limit <= 0:
        return taken
    for id in ids:
        if id not in held:
            held.add(id)
            taken.append(id)
            if len(taken) == limit:
                break
    return taken


def release_keys(keyspace: str, table: str, ids: Iterable[int]) -> None:
    held = _held.get((keyspace, table))
    if held is not None:
        held.difference_update(ids)


def key_held(table: str, id: int) -> bool:
    """Whether a consumer of this process holds the key of row ``id`` of ``table``."""
    return any(t == table and id in ids for (_, t), ids in _held.items())


def forget_keys(keyspace: str) -> None:
    """Drop every key held in ``keyspace`` (tests, after an example)."""
    for key in [k for k in _held if k[0] == keyspace]:
        del _held[key]
