"""The stats in the Prometheus text exposition format (version 0.0.4)."""

from __future__ import annotations

from runtime.console.core import Snapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: stats key -> (metric name, help)
METRICS = {
    "ready": ("qgen_queue_ready", "Messages claimable now."),
    "delayed": ("qgen_queue_delayed", "Messages waiting for their retry_after."),
    "in_flight": ("qgen_queue_in_flight", "Messages a consumer holds now."),
    "dead": ("qgen_queue_dead", "Messages in the dead letter."),
    "processed": (
        "qgen_queue_processed",
        "Finished rows the table keeps (processed_at).",
    ),
    "oldest_ready_s": (
        "qgen_queue_oldest_ready_seconds",
        "Age of the oldest ready message, by the database's clock.",
    ),
    "paused": ("qgen_queue_paused", "1 while a pause holds the queue or its group, else 0."),
}


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def exposition(snap: Snapshot) -> str:
    """Every queue's (and the outbox's) counts as gauges labelled ``queue`` and ``group``, a
    series per group the overview lists (the queue's own group, empty when it has none, and
    the groups of its table no declared queue claims); a count the queue's form or columns
    cannot give is left out, a count that stopped at the console's count_cap is exported as
    what it read (at least that many) and named by ``qgen_queue_capped``, and
    ``qgen_queue_up`` is 0 for a queue whose stats could not be
    read."""
    lines: list[str] = []
    queues = snap.queues
    for key, (name, text) in METRICS.items():
        lines += [f"# HELP {name} {text}", f"# TYPE {name} gauge"]
        for q in queues:
            for g in q.groups:
                value = (g["stats"] or {}).get(key)
                if value is None:
                    continue
                if isinstance(value, bool):  # paused
                    value = int(value)
                labels = f'queue="{_label(q.name)}",group="{_label(g["group"] or "")}"'
                lines.append(
                    f"{name}{{{labels}}} {float(value):g}"
                    if isinstance(value, float)
                    else f"{name}{{{labels}}} {value}"
                )
    lines += [
        "# HELP qgen_queue_capped 1 for a count that stopped at the console's count_cap: "
        "at least its value.",
        "# TYPE qgen_queue_capped gauge",
    ]
    for q in queues:
        for g in q.groups:
            for key in (g["stats"] or {}).get("capped", ()):
                labels = f'queue="{_label(q.name)}",group="{_label(g["group"] or "")}"'
                lines.append(f'qgen_queue_capped{{{labels},count="{key}"}} 1')
    lines += [
        "# HELP qgen_queue_up 1 when the queue's stats were read, 0 when reading them failed.",
        "# TYPE qgen_queue_up gauge",
    ]
    for q in queues:
        lines.append(f'qgen_queue_up{{queue="{_label(q.name)}"}} {0 if q.stats is None else 1}')
    lines += [
        "# HELP qgen_console_stats_timestamp_seconds When the stats shown were read.",
        "# TYPE qgen_console_stats_timestamp_seconds gauge",
        f"qgen_console_stats_timestamp_seconds {snap.taken_at:.3f}",
    ]
    return "\n".join(lines) + "\n"
