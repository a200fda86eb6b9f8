"""The database drivers: one async Connection interface over psycopg, PyMySQL and aiosqlite.

Importing this package imports no driver: each engine's module imports its driver on first
connect, so the runtime works with only the drivers it uses installed. Open connections with
``runtime.connect.connect(url)``.
"""

from runtime.drivers.base import Connection, Params, Row, redact_url

__all__ = ["Connection", "Params", "Row", "redact_url"]
