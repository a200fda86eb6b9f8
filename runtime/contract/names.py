"""The names and key sizes both halves check alike: the generator when it reads a declaration,
the runtime when it reads a rendered file's header or binds a value."""

from __future__ import annotations

import re
from typing import Any, TypeGuard

#: a name qgen quotes into SQL: a letter or underscore, then letters, digits and underscores,
#: at most 63 characters (PostgreSQL's limit, the lowest of the engines)
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")

#: the longest group, fifo_key, concurrency_key and dedupe_key, in characters: the most a
#: utf8mb4 VARCHAR that MySQL and MariaDB can index holds (VARCHAR(191))
KEY_MAX = 191


def is_identifier(value: Any) -> TypeGuard[str]:
    return isinstance(value, str) and IDENTIFIER.fullmatch(value) is not None


def is_table_name(value: Any) -> TypeGuard[str]:
    """An identifier, or schema.identifier (a PostgreSQL schema, a MySQL/MariaDB database, an
    attached SQLite database)."""
    return isinstance(value, str) and all(is_identifier(p) for p in value.split(".", 1))
