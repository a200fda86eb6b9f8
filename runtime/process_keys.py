"""The advisory keys a consumer of this process holds where the engine has none (SQLite).

The advisory form takes and releases them; operate's cancel and status read them (a row whose
key is held here is in flight). Both import this module, neither the other.
"""

from __future__ import annotations

#: (keyspace: the database, table, id) held by a consumer of this process
_held: set[tuple[str, str, int]] = set()


def take_key(keyspace: str, table: str, id: int) -> bool:
    """Hold the row's key; False when a consumer of this process holds it already."""
    key = (keyspace, table, id)
    if key in _held:
        return False
    _held.add(key)
    return True


def release_key(keyspace: str, table: str, id: int) -> None:
    _held.discard((keyspace, table, id))


def key_held(table: str, id: int) -> bool:
    """Whether a consumer of this process holds the key of row ``id`` of ``table``."""
    return any(t == table and i == id for _, t, i in _held)


def forget_keys(keyspace: str) -> None:
    """Drop every key held in ``keyspace`` (tests, after an example)."""
    _held.difference_update([k for k in _held if k[0] == keyspace])
