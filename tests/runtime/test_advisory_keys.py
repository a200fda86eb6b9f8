"""The advisory form's key registry on SQLite (no server lock there: the keys live in this
process, one per database, table and row): a key is held once whatever the number of
consumers, another database or table has keys of its own, an unlock frees the key, and a
claim keeps at most ``limit`` of them."""

from __future__ import annotations

from pathlib import Path

from support.engines import run

import runtime
from runtime.forms import AdvisoryForm, form_for
from runtime.process_keys import key_held

SQL = Path(__file__).resolve().parents[2] / "generated_examples" / "sql" / "sqlite"


def form(name: str, keyspace: str) -> AdvisoryForm:
    queue = runtime.load(SQL / f"{name}.sql")
    assert isinstance(queue, runtime.Queue) and queue.form == "advisory"
    f = form_for(queue, keyspace=keyspace)
    assert isinstance(f, AdvisoryForm) and not queue.dialect.server_advisory
    return f


def test_a_key_is_held_once_per_database_table_and_row(tmp_path: Path) -> None:
    db, other_db = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    one, two = form("webhooks", db), form("webhooks", db)  # two consumers of one queue
    elsewhere, other_table = form("webhooks", other_db), form("exports", db)
    try:
        assert one._lock_in_process([1, 2, 3], limit=2) == [1, 2]
        assert two._lock_in_process([1, 2, 3, 4], limit=10) == [3, 4]
        assert two._lock_in_process([1, 2], limit=10) == []
        # another database, or another table in the same one: keys of their own
        assert elsewhere._lock_in_process([1, 2], limit=10) == [1, 2]
        assert other_table._lock_in_process([1, 2], limit=10) == [1, 2]
        run(one.unlock(None, [1]))
        assert two._lock_in_process([1, 2], limit=10) == [1]
        assert one._lock_in_process([1], limit=10) == []
    finally:
        for f in (one, two, elsewhere, other_table):
            run(f.unlock(None, range(1, 5)))
    tables = {f.queue.table for f in (one, other_table)}
    assert not any(key_held(table, i) for table in tables for i in range(1, 5))
