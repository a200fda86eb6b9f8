"""A queue table of a given Shape on a real engine: its declaration, rendered with qgen from the
templates on disk at test time, and the SQL the model tests read it back with."""

from __future__ import annotations

from typing import Any

from qgen.build import build_unit
from qgen.declaration import parse_declaration
from qgen.render import environment
from runtime.contract.rendered import parse_rendered
from runtime.queue import Queue
from support.model.outcome_model import DEAD_GROUP, DEFAULT_GROUP, Shape

#: long enough that no lease runs out by itself during a test; the tests expire them
LEASE_S = 600

#: the database's clock, and a moment an hour before it
NOW = {
    "postgres": "clock_timestamp()",
    "mysql": "UTC_TIMESTAMP(6)",
    "mariadb": "UTC_TIMESTAMP(6)",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now')",
}
AN_HOUR_AGO = {
    "postgres": "clock_timestamp() - interval '1 hour'",
    "mysql": "UTC_TIMESTAMP(6) - INTERVAL 3600 SECOND",
    "mariadb": "UTC_TIMESTAMP(6) - INTERVAL 3600 SECOND",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', 'now', '-3600 seconds')",
}

#: the table's real column names: as the roles are called, or renamed
PLAIN_NAMES = {
    "id": "id",
    "payload": "payload",
    "group": "queue",
    "attempt": "attempt",
    "retry_after": "retry_after",
    "locked_until": "locked_until",
    "processed_at": "processed_at",
    "priority": "priority",
    "fifo_key": "fifo_key",
    "dedupe_key": "dedupe_key",
    "last_error": "last_error",
    "result": "result",
    "concurrency_key": "ckey",
}
RENAMED = {
    "id": "msg_id",
    "payload": "body",
    "group": "lane",
    "attempt": "tries",
    "retry_after": "not_before",
    "locked_until": "lease_until",
    "processed_at": "done_at",
    "priority": "urgency",
    "fifo_key": "ordering_key",
    "dedupe_key": "uniq",
    "last_error": "why",
    "result": "outcome",
    "concurrency_key": "customer",
}
#: the per_s of a model queue's rate_limit: so slow that only the test refills the bucket (it
#: moves refilled_at back REFILL_S seconds per token)
RATE_PER_S = 0.001
REFILL_S = round(1 / RATE_PER_S)
#: a time column moved back by :s seconds, per dialect (the bucket's refill)
BACK_BY = {
    "postgres": "{c} - make_interval(secs => {s})",
    "mysql": "{c} - INTERVAL {s} SECOND",
    "mariadb": "{c} - INTERVAL {s} SECOND",
    "sqlite": "strftime('%Y-%m-%d %H:%M:%f', {c}, '-' || {s} || ' seconds')",
}


def declaration(
    shape: Shape, dialect: str, table: str, dead_table: str, renamed: bool = False
) -> dict[str, Any]:
    """The qgen.toml (as parsed TOML) of a queue named "model" with this shape."""
    names = RENAMED if renamed else PLAIN_NAMES
    roles = ["id", "payload"]
    roles += [
        r
        for r in ("group", "attempt", "retry_after", "processed_at", "priority", "fifo_key")
        if getattr(shape, r)
    ]
    if shape.lease:
        roles.append("locked_until")
    if shape.dedupe_key:
        roles.append("dedupe_key")
    if shape.last_error:
        roles.append("last_error")
    if shape.result:
        roles.append("result")
    if shape.concurrency_limit:
        roles.append("concurrency_key")
    q: dict[str, Any] = {
        "table": table,
        "form": shape.form,
        "columns": {r: names[r] for r in roles},
    }
    if shape.lease:
        q["lease_s"] = LEASE_S
    if shape.group:
        q["default_group"] = DEFAULT_GROUP
    if shape.concurrency_limit:
        q["concurrency_limit"] = shape.concurrency_limit
    if shape.max_in_flight:
        q["max_in_flight"] = shape.max_in_flight
    if shape.rate_burst:
        q["rate_limit"] = {"per_s": RATE_PER_S, "burst": shape.rate_burst}
    if shape.dead_letter:
        q["max_attempts"] = shape.max_attempts
        q["dead_letter"] = (
            {"group": DEAD_GROUP} if shape.dead_letter == "group" else {"table": dead_table}
        )
    return {"dialects": [dialect], "queues": {"model": q}}


#: one Jinja environment for the process: it compiles each template once, and reloads a
#: template whose file changed (an edited template is rendered as it is on disk)
_ENV = environment()


def render_text(
    shape: Shape, dialect: str, table: str, dead_table: str, renamed: bool = False
) -> str:
    """The rendered file, from the templates as they are on disk now."""
    decl = parse_declaration(declaration(shape, dialect, table, dead_table, renamed))
    return build_unit(decl.queues["model"], dialect, env=_ENV)


def render_queue(
    shape: Shape, dialect: str, table: str, dead_table: str, renamed: bool = False
) -> Queue:
    """The rendered file loaded as the runtime loads one."""
    text = render_text(shape, dialect, table, dead_table, renamed)
    return Queue(parse_rendered(text, f"<{dialect}/{table}.sql>"))
