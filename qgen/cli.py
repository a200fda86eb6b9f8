"""The qgen command: render, check, init and demo; every failure is one line and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from qgen.declaration import DeclarationError, GeneratorBug, load_declaration, one_line
from qgen.targets import loaded_files
from runtime.contract.dialects import DIALECTS
from runtime.contract.errors import BrokerError
from runtime.contract.rendered import is_rendered

T = TypeVar("T")

STARTER = """\
# qgen.toml: the queues this service keeps in its database.
# `qgen render` writes one SQL file per queue and dialect to <out>/<dialect>/<queue>.sql;
# review them, check them in, and load them with runtime.load(...).

dialects = ["postgres", "sqlite"]   # any of: postgres, mysql, mariadb, sqlite
out = "sql"                         # rendered files go to sql/<dialect>/

[queues.orders]
table = "orders_queue"
form = "lease"                      # row_lock | lease | advisory
lease_s = 30                        # lease form: seconds a claim holds a row (extended while it runs)
max_attempts = 5                    # at the cap a retry moves the row to its dead letter...
dead_letter = { group = "orders_dead" }   # ...a group of this table, or { table = "orders_dead" }

# The table's real column names; omit a role the table does not have.
[queues.orders.columns]
id = "id"
payload = "payload"
group = "queue"                     # the dead-letter group lives here; queues may share a table by it
attempt = "attempt"                 # the delivery number the next claim reads (ctx.attempt)
retry_after = "retry_after"         # failed messages wait here: backoff from 1 s doubling to 1 h
locked_until = "locked_until"       # the lease, and its token
processed_at = "processed_at"       # present: ack/drop mark the row; absent: they delete it

# Optional: the table's own statement for an outcome (ack, drop, retry, retry_after, dead_letter).
# [queues.orders.statements]
# drop = "UPDATE orders_queue SET queue = 'orders_poison', locked_until = NULL WHERE id = :id AND locked_until = :token"

# Optional: an event of the service's own; a handler returns runtime.custom("park").
# [queues.orders.custom.park]
# default = "UPDATE orders_queue SET queue = 'orders_parked', locked_until = NULL WHERE id = :id AND locked_until = :token"
"""


def _render(args: argparse.Namespace) -> tuple[Path, dict[Path, str], list[str]]:
    """The out folder, every file the declaration renders there (path → text), and the
    dialect folders whose files it owns."""
    from qgen.build import render_declaration

    decl = load_declaration(args.config)
    if args.dialect and args.dialect not in decl.dialects:
        raise DeclarationError(
            args.config,
            "command line",
            "--dialect",
            f"{args.dialect!r} is not in the declaration's dialects",
            f"use one of {', '.join(decl.dialects)} or add it to dialects",
        )
    dialects = [args.dialect] if args.dialect else list(decl.dialects)
    # --out replaces the declaration's out folder; either way files go to <out>/<dialect>/
    out = Path(args.out) if args.out else Path(args.config).resolve().parent / decl.out
    files = render_declaration(decl, dialects, out)
    # a dialect dropped from the declaration leaves files behind: they are orphans too
    owned = [args.dialect] if args.dialect else list(DIALECTS)
    return out, files, owned


def _orphans(out: Path, dialects: list[str], files: dict[Path, str]) -> list[Path]:
    """Files under out/<dialect>/ that carry qgen's header but that no declared queue renders."""
    found = []
    for dialect in dialects:
        folder = out / dialect
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.sql")):
            if path not in files and path.is_file() and _ours(path):
                found.append(path)
    return found


def _ours(path: Path) -> bool:
    with path.open("rb") as f:
        return is_rendered(f.read(200).decode("utf-8", "replace"))


def cmd_render(args: argparse.Namespace) -> int:
    out, files, owned = _render(args)
    for path, text in files.items():
        if args.stdout:
            sys.stdout.write(f"-- file: {path}\n{text}\n")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        data = text.encode("utf-8")
        if not path.exists() or path.read_bytes() != data:
            path.write_bytes(data)
            print(f"wrote {path}")
        else:
            print(f"unchanged {path}")
    if not args.stdout:
        for path in _orphans(out, owned, files):
            path.unlink()
            print(f"removed {path} (no declared queue renders it)")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    out, files, owned = _render(args)
    problems = 0
    for path, text in files.items():
        data = path.read_bytes() if path.exists() else b""
        if data == text.encode("utf-8"):
            continue
        problems += 1
        try:
            current = data.decode("utf-8")
        except UnicodeDecodeError:
            print(f"qgen check: {path}: not UTF-8 text (re-encoded)", file=sys.stderr)
            continue
        if "\r" in current and current.replace("\r\n", "\n") == text:
            print(
                f"qgen check: {path}: CRLF line ends (converted after rendering)", file=sys.stderr
            )
            continue
        what = "differs from what render writes" if path.exists() else "missing"
        print(f"qgen check: {path}: {what}", file=sys.stderr)
        sys.stdout.writelines(
            difflib.unified_diff(
                current.splitlines(keepends=True),
                text.splitlines(keepends=True),
                fromfile=f"{path} (on disk)",
                tofile=f"{path} (rendered)",
            )
        )
    orphans = _orphans(out, owned, files)
    for path in orphans:
        print(f"qgen check: {path}: orphaned (no declared queue renders it)", file=sys.stderr)
    if problems or orphans:
        orphaned = f" and {len(orphans)} orphaned" if orphans else ""
        print(
            f"qgen check: {problems} of {len(files)} files are stale, edited or re-encoded"
            f"{orphaned}; run `qgen render` and commit the result",
            file=sys.stderr,
        )
        return 1
    print(f"qgen check: {len(files)} files up to date")
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    path = Path(args.config)
    if path.exists() and not args.force:
        print(f"qgen init: {path} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    path.write_text(STARTER, encoding="utf-8")
    print(f"wrote {path}; next: qgen render")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from qgen.demo import main as demo_main

    return demo_main(keep=args.keep)


def cmd_worker(args: argparse.Namespace) -> int:
    from runtime.contract.dialects import dialect_for_scheme
    from runtime.worker import database_url, log_level, run_worker

    def fail(message: str) -> int:
        print(f"qgen worker: {message}", file=sys.stderr)
        return 2

    try:
        log_level(args.log_level)
    except BrokerError as exc:
        return fail(str(exc))
    options: dict[str, Any] = {
        k: getattr(args, k)
        for k in ("group", "handler_timeout", "poll_interval", "max_poll_interval", "settle_window")
        if getattr(args, k) is not None
    }
    if args.schedules:
        options["schedules"] = True
    common = dict(
        db=args.db,
        concurrency=args.concurrency,
        batch=args.batch,
        drain=args.drain,
        transactional=args.transactional,
        log_level=args.log_level,
        retry=args.retry,
        retry_base=args.retry_base,
        retry_cap=args.retry_cap,
        **options,
    )
    if args.file is not None:
        if args.handler is None:
            return fail("--file needs --handler module:function")
        return run_worker(args.file, args.handler, **common)
    if not args.queue:
        return fail(
            "give --file PATH with --handler, or --queue NAME (with --handler) or --queue "
            "NAME=module:function, repeatable, with --config"
        )
    # each --queue is NAME (its handler is --handler) or NAME=module:function
    wanted = [(q.partition("=")[0], q.partition("=")[2] or args.handler) for q in args.queue]
    if any(h is None for _, h in wanted):
        name = next(n for n, h in wanted if h is None)
        return fail(f"--queue {name} needs --handler module:function (or --queue {name}=mod:fn)")
    if args.handler is not None and all("=" in q for q in args.queue):
        return fail("--handler is for a --queue NAME without =module:function; none is given")
    decl = load_declaration(args.config)
    for name, _ in wanted:
        if name not in decl.queues:
            return fail(
                f"{args.config} declares no queue {name!r} "
                f"(declared: {', '.join(decl.queues) or 'none'})"
            )
    url = database_url(args.db)
    dialect = dialect_for_scheme(url.split("://", 1)[0])
    if dialect is None:
        return fail(f"cannot tell the dialect of the database URL {url.split('://', 1)[0]!r}://")
    folder = Path(args.config).resolve().parent / decl.out / dialect.name
    targets = [(folder / f"{name}.sql", handler) for name, handler in wanted]
    return run_worker(None, None, queues=targets, **common)


def _on_db(url: str, work: Callable[[Any], Awaitable[T]], read_only: bool = False) -> T:
    import asyncio

    import runtime

    async def go() -> T:
        async with await runtime.connect(url, read_only=read_only) as conn:
            return await work(conn)

    return asyncio.run(go())


def cmd_verify(args: argparse.Namespace) -> int:
    from runtime.verify import verify

    url, queues = loaded_files(args, args.queues)
    decl = load_declaration(args.config)
    tables: dict[str, Any] = {}  # one queue per table with a group column reads its groups
    for q in queues:
        if q.steps.groups is not None:
            tables.setdefault(q.table.casefold(), q)

    async def work(conn: Any) -> dict[str, list[Any]]:
        found = {q.name: list(await verify(conn, q)) for q in queues}
        for q in tables.values():
            if not any(f.problem == "the table does not exist" for f in found[q.name]):
                found[q.name] += _unclaimed(decl, q, await q.groups(conn))
        return found

    differs = 0
    for name, findings in _on_db(url, work).items():
        if not any(not f.note for f in findings):
            print(f"queue '{name}': matches its declaration")
        for f in findings:
            differs += not f.note
            print(f"queue '{name}': {f}")
    return 1 if differs else 0


def _label(target: Any) -> str:
    kind = "outbox" if target.rendered.header.kind == "outbox" else "queue"
    return f"{kind} '{target.name}'"


def cmd_apply(args: argparse.Namespace) -> int:
    from runtime.apply import SchemaDiffers, apply, plain_sql, plan

    url, targets = loaded_files(args, args.queues, outbox=True)
    differs: list[str] = []

    def report(target: Any, label: str, result: Any) -> None:
        if args.dry_run:
            made = ", ".join(map(str, result.missing)) or "nothing (every table and index exists)"
            print(f"-- {label}: would create {made}")
            for st in result.statements:
                print(f"{plain_sql(st, target.dialect)};")
            return
        for obj in result:
            print(f"{label}: created {obj}")
        if not result:
            print(f"{label}: nothing to create (every table and index exists)")

    async def work(conn: Any) -> None:
        for target in targets:  # each reported as it is done: an error later keeps the lines
            label = _label(target)
            result: Any
            try:
                if args.dry_run:
                    result = await plan(conn, target)
                    findings = result.findings
                else:
                    result, findings = await apply(conn, target), []
            except SchemaDiffers as exc:  # the others are still applied
                result, findings = None, exc.findings
            if findings:
                differs.append(label)
                for f in findings:
                    print(f"{'-- ' if args.dry_run else ''}{label}: {f}")
            else:
                report(target, label, result)

    _on_db(url, work)
    if differs:
        print(
            f"qgen apply: {', '.join(differs)}: the live tables differ from the declaration and "
            "apply never alters a table; nothing was created for them: make the changes "
            "listed (or drop the tables) and apply again",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from qgen.build import build_unit
    from runtime.apply import plain_sql
    from runtime.contract.dialects import DIALECTS
    from runtime.contract.file_steps import steps_of
    from runtime.contract.rendered import parse_rendered

    decl = load_declaration(args.config)
    units = {u.name: u for u in decl.units()}
    if args.queue not in units:
        print(
            f"qgen schema: {args.config} declares no queue or outbox {args.queue!r} "
            f"(declared: {', '.join(units) or 'none'})",
            file=sys.stderr,
        )
        return 2
    dialect = args.dialect or (decl.dialects[0] if len(decl.dialects) == 1 else None)
    if dialect not in decl.dialects:
        what = f"--dialect {dialect} is not one" if dialect else "give --dialect, one"
        print(
            f"qgen schema: {what} of the declaration's dialects ({', '.join(decl.dialects)})",
            file=sys.stderr,
        )
        return 2
    rendered = parse_rendered(build_unit(units[args.queue], dialect, decl.path))
    for st in steps_of(rendered).schema:
        print(f"{plain_sql(st, DIALECTS[dialect])};")
    return 0


def _unclaimed(decl: Any, queue: Any, groups: dict[str, int]) -> list[Any]:
    """The groups of a queue's table that hold unfinished rows but that no declared queue of
    that table claims (its default_group) or dead-letters into: a renamed queue's old group."""
    import shlex

    from runtime.verify import Finding

    claimed = set()
    for q in decl.queues.values():
        if q.table.casefold() == queue.table.casefold():
            claimed.add(q.default_group)
            claimed.add(q.dead_letter.group if q.dead_letter else None)
    return [
        Finding(
            queue.table,
            f"{count} unfinished row(s) in group {one_line(repr(group))}, which no declared queue "
            "claims (a queue renamed? a queue's group defaults to its name)",
            f"move them to a queue's group: qgen regroup {queue.name} --from "
            f"{one_line(shlex.quote(group))} (or declare default_group = {json.dumps(group)} "
            "on the queue that should claim them)",
        )
        for group, count in groups.items()
        if group not in claimed
    ]


def _cell(value: Any, at_least: bool = False) -> str:
    if at_least:  # a count stats stopped at: there are more
        return f">={value}"
    if value is None:
        return "-"
    return f"{value:.1f}" if isinstance(value, float) else str(value)


def cmd_stats(args: argparse.Namespace) -> int:
    from runtime.operate import STATS_KEYS

    if args.count_cap is not None and args.count_cap < 1:
        print(
            f"qgen stats: --count-cap must be 1 or more rows, not {args.count_cap}", file=sys.stderr
        )
        return 2
    url, queues = loaded_files(args, args.queues)

    async def work(conn: Any) -> list[tuple[str, dict[str, Any]]]:
        found = []
        for q in queues:
            stats = await q.stats(conn, count_cap=args.count_cap)
            if q.rendered.header.pause_table is not None:  # every paused scope of its table
                stats["paused_scopes"] = await q.paused(conn)
            found.append((q.name, stats))
        return found

    found = _on_db(args.read_db or url, work, read_only=bool(args.read_db))
    if args.json:
        print(json.dumps({name: stats for name, stats in found}, sort_keys=True))
        return 0
    rows = [["queue", *STATS_KEYS]] + [
        [
            n,
            *(_cell(s[k], at_least=k in s.get("capped", ())) for k in STATS_KEYS),
        ]
        for n, s in found
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print(
            "  ".join(
                v.ljust(w) if i == 0 else v.rjust(w)
                for i, (v, w) in enumerate(zip(r, widths, strict=True))
            ).rstrip()
        )
    print("(- : not known in this queue's form or columns; see docs/howto/operate.md)")
    for name, stats in found:
        for key, what in (("last_error", "last error"), ("dead_last_error", "last dead error")):
            if stats.get(key):
                print(f"queue '{name}': {what}: {one_line(stats[key])}")
        if stats.get("paused_scopes"):
            print(f"queue '{name}': PAUSED: {_scopes(stats['paused_scopes'])} (qgen resume)")
    return 0


def _scopes(scopes: list[str | None]) -> str:
    """``[None, "eu"]`` → ``the whole queue, group 'eu'``"""
    return ", ".join("the whole queue" if s is None else f"group {s!r}" for s in scopes)


def cmd_pause(args: argparse.Namespace) -> int:
    """qgen pause / qgen resume: one scope of one queue, then what is paused now."""
    url, (queue,) = loaded_files(args, [args.queue])
    resume = args.fn is cmd_resume

    async def work(conn: Any) -> tuple[bool, list[str | None]]:
        act = queue.resume if resume else queue.pause
        changed: bool = await act(conn, args.group)
        return changed, await queue.paused(conn)

    changed, now = _on_db(url, work)
    scope = _scopes([args.group])
    if resume:
        said = "resumed" if changed else "was not paused"
    else:
        said = "paused" if changed else "was paused already"
    print(one_line(f"queue '{queue.name}': {scope} {said}"))
    print(one_line(f"queue '{queue.name}': paused now: {_scopes(now) if now else 'nothing'}"))
    return 0


def cmd_resume(args: argparse.Namespace) -> int:
    return cmd_pause(args)


def _dead_line(row: dict[str, Any]) -> str:
    """``7 deliveries=3 group=orders_dead enqueued_at=… payload={…} last_error=KeyError: 'x'``"""
    extra = "".join(
        f" {k}={row[k]}" for k in ("deliveries", "group", "enqueued_at") if row.get(k) is not None
    )
    payload = json.dumps(row["payload"], sort_keys=True, default=str)
    error = f" last_error={json.dumps(row['last_error'])}" if row.get("last_error") else ""
    return f"{row['id']}{extra} payload={payload}{error}"


def _dead_usage_error(args: argparse.Namespace, queue_name: str) -> str | None:
    """What is wrong with ``qgen dead``'s arguments (one line), or None."""
    action = args.action
    if action in ("redrive", "purge") and bool(args.ids) == bool(args.all):
        return f"qgen dead {action}: give the message ids, or --all"
    if action == "show" and len(args.ids) != 1:
        return "qgen dead show: give exactly one message id"
    if action == "show" and args.all:
        return "qgen dead show: --all is for redrive and purge: give exactly one message id"
    if args.of_group is not None and (action != "redrive" or not args.all):
        return (
            "qgen dead: --of-group goes with redrive --all: "
            f"qgen dead redrive {queue_name} --all --of-group GROUP"
        )
    if args.of_group is not None and args.group is not None:
        return (
            "qgen dead redrive: --of-group sends that group's messages back to their own group: "
            "drop --group"
        )
    return None


def cmd_dead(args: argparse.Namespace) -> int:
    url, (queue,) = loaded_files(args, [args.queue])
    action = args.action
    problem = _dead_usage_error(args, queue.name)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    ids = None if getattr(args, "all", False) else args.ids

    async def work(conn: Any) -> Any:
        if action == "list":
            return await queue.dead_list(
                conn, limit=args.limit, after_id=args.after_id, newest_first=args.newest
            )
        if action == "show":
            return await queue.dead_show(conn, args.ids[0])
        if action == "redrive" and args.of_group is not None:
            return await queue.redrive_group(conn, args.of_group)
        if action == "redrive":
            return await queue.redrive(conn, ids, group=args.group)
        return await queue.purge_dead(conn, ids)

    reads = action in ("list", "show") and bool(args.read_db)  # writes never go to a replica
    result = _on_db(args.read_db if reads else url, work, read_only=reads)
    if action == "list":
        if args.json:
            print(json.dumps(result, default=str))
        for row in [] if args.json else result:
            print(_dead_line(row))
    elif action == "show":
        if result is None:
            print(
                f"qgen dead show: queue '{queue.name}' has no dead message {args.ids[0]}",
                file=sys.stderr,
            )
            return 1
        print(json.dumps(result, default=str) if args.json else _dead_line(result))
    else:
        done = "sent back" if action == "redrive" else "deleted"
        print(f"queue '{queue.name}': {result} dead message(s) {done}")
    return 0


def cmd_prune(args: argparse.Namespace) -> int:
    url, queues = loaded_files(args, args.queues)
    if not args.queues:  # every queue that keeps processed rows
        queues = [q for q in queues if "processed_at" in q.columns]

    async def work(conn: Any) -> list[tuple[str, int]]:
        return [(q.name, await q.prune(conn, args.older_than, batch=args.batch)) for q in queues]

    for name, deleted in _on_db(url, work):
        print(f"queue '{name}': {deleted} processed row(s) deleted")
    return 0


def cmd_regroup(args: argparse.Namespace) -> int:
    url, (queue,) = loaded_files(args, [args.queue])
    decl = load_declaration(args.config)
    for other in decl.queues.values():
        dead = other.dead_letter.group if other.dead_letter else None
        if other.table.casefold() == queue.table.casefold() and args.from_group in (
            other.default_group,
            dead,
        ):
            print(
                one_line(
                    f"qgen regroup: group {args.from_group!r} is claimed by queue '{other.name}'"
                    f"{' (its dead letter)' if args.from_group == dead else ''}: name the group "
                    "the rows were left in (`qgen verify` lists them)"
                ),
                file=sys.stderr,
            )
            return 2

    async def work(conn: Any) -> int:
        moved: int = await queue.regroup(conn, args.from_group, args.to)
        return moved

    moved = _on_db(url, work)
    to = args.to if args.to is not None else queue.default_group
    print(
        one_line(
            f"queue '{queue.name}': {moved} row(s) moved from group {args.from_group!r} to {to!r}"
        )
    )
    return 0


def cmd_cancel(args: argparse.Namespace) -> int:
    url, (queue,) = loaded_files(args, [args.queue])

    async def work(conn: Any) -> bool:
        cancelled: bool = await queue.cancel(conn, args.id)
        return cancelled

    if _on_db(url, work):
        print(f"queue '{queue.name}': message {args.id} cancelled")
        return 0
    print(
        f"qgen cancel: queue '{queue.name}': message {args.id} not cancelled: a consumer holds "
        "it now, or it is already finished, dead or unknown",
        file=sys.stderr,
    )
    return 1


def _status_line(status: Any) -> str:
    """``42 state=done attempts=1 result={"rows": 3} progress=100 last_error=null
    enqueued_at=2026-… processed_at=2026-…``: every field, JSON for values, null for none."""
    fields = [f"state={status.state}"]
    for name in ("attempts", "result", "progress", "last_error", "enqueued_at", "processed_at"):
        value = getattr(status, name)
        if hasattr(value, "isoformat"):
            value = value.isoformat()
        fields.append(f"{name}={json.dumps(value, sort_keys=True, ensure_ascii=False)}")
    return f"{status.id} {' '.join(fields)}"


def cmd_status(args: argparse.Namespace) -> int:
    url, (queue,) = loaded_files(args, [args.queue])

    async def work(conn: Any) -> Any:
        return await queue.status(conn, args.id)

    status = _on_db(url, work)
    if status is None:
        print(
            f"qgen status: queue '{queue.name}': no message {args.id} (never enqueued, "
            "deleted by its ack, pruned or purged)",
            file=sys.stderr,
        )
        return 1
    print(_status_line(status))
    return 0


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("qgen-sql")
    except PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown (not installed)"


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="qgen",
        description="Render queue-table SQL from qgen.toml, check it is fresh, or run the demo.",
        epilog="Start with `qgen init`, edit qgen.toml, `qgen render`, review the SQL, commit it, "
        "and run `qgen check` in CI.",
    )
    ap.add_argument("--version", action="version", version=f"qgen {_version()}")
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config", "-c", default="qgen.toml", help="the declaration (default: qgen.toml)"
        )
        p.add_argument("--dialect", "-d", help="only this dialect (default: every dialect listed)")
        p.add_argument(
            "--out", "-o", help="write under this folder instead of the declaration's out"
        )

    p = sub.add_parser(
        "render",
        help="write <out>/<dialect>/<queue>.sql for every queue",
        description="Render every queue (and the outbox) of the declaration for each dialect "
        "it lists into <out>/<dialect>/<queue>.sql, validated and sealed; files it once wrote "
        "that no declared queue renders any more are removed.",
    )
    common(p)
    p.add_argument("--stdout", action="store_true", help="print the files instead of writing them")
    p.set_defaults(fn=cmd_render)
    p = sub.add_parser(
        "check",
        help="exit 1 with a diff when the files on disk are stale or edited",
        description="Exit 1 when a rendered file on disk is stale, hand-edited, CRLF-converted "
        "or not UTF-8 (with a diff), or orphaned (no declared queue renders it); 0 when all "
        "are as `qgen render` would write them.",
    )
    common(p)
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser(
        "init",
        help="write a commented starter qgen.toml",
        description="Write a commented starter declaration to edit, then `qgen render`.",
    )
    p.add_argument("--config", "-c", default="qgen.toml", help="where to write it (qgen.toml)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(fn=cmd_init)
    p = sub.add_parser(
        "demo",
        help="render, enqueue and drain a SQLite queue; print every outcome",
        description="Render a SQLite lease queue in a temporary folder, enqueue a few "
        "messages and drain them with a handler that returns every outcome; print a table.",
    )
    p.add_argument(
        "--keep", action="store_true", help="keep the temporary folder and print its path"
    )
    p.set_defaults(fn=cmd_demo)
    p = sub.add_parser(
        "worker",
        help="consume queues with handlers until SIGTERM/SIGINT (or until empty with --drain)",
        description="Consume one or more queues, each with its own consumer in one process: "
        "load the rendered files, import the handlers (module:function, an async or plain "
        "function taking (message, ctx); returning None acks), and run until SIGTERM or "
        "SIGINT, which let in-flight deliveries settle and return unstarted rows. A missing "
        "table or column, a handler that does not import or a SQLite file that does not "
        "exist is one line and exit 2.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--file", "-f", help="the queue's rendered file, e.g. sql/postgres/orders.sql"
    )
    where.add_argument(
        "--queue",
        "-q",
        action="append",
        metavar="NAME[=MODULE:FUNCTION]",
        help="a queue of --config (its file for the URL's dialect is used), with its own "
        "handler after '='; repeat it for more queues in this process",
    )
    p.add_argument("--config", "-c", default="qgen.toml", help="the declaration (with --queue)")
    p.add_argument(
        "--handler",
        help="module:function, e.g. myservice.jobs:handle (with --file or --queue NAME)",
    )
    p.add_argument("--db", help="the database URL (default: the QGEN_DATABASE_URL variable)")
    p.add_argument(
        "--concurrency", type=int, default=4, help="workers per queue, each with a connection (4)"
    )
    p.add_argument("--batch", type=int, default=10, help="rows a claim takes (10)")
    p.add_argument("--group", help="claim only this group's messages (default: the queue's)")
    p.add_argument(
        "--retry",
        choices=["exponential", "immediate"],
        help="how a failed message comes back: exponential backoff with jitter (the default "
        "where the table has retry_after) or immediate (the only choice without it)",
    )
    p.add_argument(
        "--retry-base",
        type=float,
        metavar="S",
        help="exponential: the first retry's delay in seconds, doubling per delivery (1)",
    )
    p.add_argument(
        "--retry-cap", type=float, metavar="S", help="exponential: the longest delay (3600)"
    )
    p.add_argument(
        "--handler-timeout",
        type=float,
        metavar="S",
        help="a handler running longer is cancelled and taken as a retry (default: none)",
    )
    p.add_argument(
        "--poll-interval",
        type=float,
        metavar="S",
        help="an idle worker's first sleep, doubling while idle (0.05)",
    )
    p.add_argument(
        "--max-poll-interval", type=float, metavar="S", help="an idle worker's longest sleep (2)"
    )
    p.add_argument(
        "--settle-window",
        type=float,
        metavar="S",
        help="settlements of handlers finishing within this window commit together (0.02)",
    )
    p.add_argument(
        "--schedules",
        action="store_true",
        help="also fire the queues' schedules (each slot once, whatever runs them)",
    )
    p.add_argument("--drain", action="store_true", help="stop once nothing is claimable")
    p.add_argument(
        "--transactional",
        action="store_true",
        help="hand the handler ctx.db in the settlement's transaction",
    )
    p.add_argument(
        "--log-level",
        default="INFO",
        help="the qgen and runtime loggers' level: DEBUG, INFO, WARNING or ERROR (INFO)",
    )
    p.set_defaults(fn=cmd_worker)
    p = sub.add_parser(
        "verify",
        help="compare the live tables with the declaration; exit 1 with the fixes if they differ",
        description="Compare each queue's live table with its rendered file: the columns each "
        "role needs and their types, the attempt column's default (1), the id generated by the "
        "database, the claim's index, NOT NULL columns the enqueue would leave empty, and the "
        "dead-letter table (its columns' types against the queue table's), and unfinished rows in "
        "groups no declared queue claims (a renamed queue's old group). Prints one line per "
        "difference with its fix (exit 1 if any), and notes such as a NOT NULL column of "
        "other_columns every enqueue must give.",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE", help="only these queues (default: all)")
    p.add_argument(
        "--config", "-c", default="qgen.toml", help="the declaration (default: qgen.toml)"
    )
    p.add_argument("--db", help="the database URL (default: the QGEN_DATABASE_URL variable)")
    p.set_defaults(fn=cmd_verify)

    p = sub.add_parser(
        "apply",
        help="create the queues' tables and indexes where missing (never alters a table)",
        description="Create what each queue's (and the outbox's) rendered schema block "
        "declares for the URL's dialect (the files under the declaration's out folder): the "
        "queue table, its dead-letter table and indexes, those missing only, and print one "
        "line per object created. Safe to run again and from several processes at once. A "
        "live table that differs from the declaration is never altered: its `qgen verify` "
        "findings are printed and the exit code is 1. On MySQL and MariaDB each CREATE "
        "commits on its own.",
    )
    p.add_argument(
        "queues", nargs="*", metavar="QUEUE", help="only these (default: all, and the outbox)"
    )
    p.add_argument(
        "--config", "-c", default="qgen.toml", help="the declaration (default: qgen.toml)"
    )
    p.add_argument("--db", help="the database URL (default: the QGEN_DATABASE_URL variable)")
    p.add_argument(
        "--dry-run", action="store_true", help="print the SQL it would run, create nothing"
    )
    p.set_defaults(fn=cmd_apply)
    p = sub.add_parser(
        "schema",
        help="print a queue's DDL for a dialect, to paste into a migration",
        description="Print the CREATE statements of a queue's (or the outbox's) schema "
        "block for one dialect, each ending with ';', rendered from the declaration (no "
        "database, no rendered files needed), e.g. for an Alembic or Django migration.",
    )
    p.add_argument("queue", metavar="QUEUE", help="the queue (or the outbox's name)")
    p.add_argument(
        "--config", "-c", default="qgen.toml", help="the declaration (default: qgen.toml)"
    )
    p.add_argument(
        "--dialect", "-d", help="postgres, mysql, mariadb or sqlite (default: the only one listed)"
    )
    p.set_defaults(fn=cmd_schema)

    def on_db(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config", "-c", default="qgen.toml", help="the declaration (default: qgen.toml)"
        )
        p.add_argument("--db", help="the database URL (default: the QGEN_DATABASE_URL variable)")

    def read_db(p: argparse.ArgumentParser, what: str) -> None:
        p.add_argument(
            "--read-db",
            metavar="URL",
            help=f"read {what} from this database instead, e.g. a replica (a read-only "
            "session; nothing that writes goes there)",
        )

    p = sub.add_parser(
        "stats",
        help="print each queue's counts: ready, delayed, in flight, dead, processed, oldest age",
        description="Run each queue's rendered stats statement (the files under the "
        "declaration's out folder for the URL's dialect) and print a table; '-' marks a count "
        "the queue's form or columns cannot give.",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE", help="only these queues (default: all)")
    on_db(p)
    read_db(p, "the counts")
    p.add_argument("--json", action="store_true", help="print one JSON object instead")
    p.add_argument(
        "--count-cap",
        type=int,
        metavar="ROWS",
        help="read at most this many unfinished and dead rows per queue (the oldest; default: "
        "all); a count that stops there prints as >=N and is listed in capped",
    )
    p.set_defaults(fn=cmd_stats)

    p = sub.add_parser(
        "dead",
        help="list, show, redrive or purge a queue's dead messages",
        description="Work on the dead letter of a queue that declares one: list (paged), show "
        "one, redrive (back to the queue as first deliveries, in one transaction) or purge.",
    )
    p.add_argument("action", choices=["list", "show", "redrive", "purge"], help="what to do")
    p.add_argument("queue", metavar="QUEUE", help="the queue")
    p.add_argument(
        "ids", nargs="*", type=int, metavar="ID", help="message ids (show, redrive, purge)"
    )
    on_db(p)
    read_db(p, "list and show")
    p.add_argument("--all", action="store_true", help="redrive or purge every dead message")
    p.add_argument("--limit", type=int, default=50, help="list: messages per page (50)")
    p.add_argument("--after-id", type=int, help="list: the page after this id")
    p.add_argument("--newest", action="store_true", help="list: newest first")
    p.add_argument("--group", help="redrive to this group (default: the queue's default_group)")
    p.add_argument(
        "--of-group",
        metavar="GROUP",
        help="redrive --all: only the dead messages of this group (a dead-letter table with a "
        "group column, shared by several queues or groups: the others stay)",
    )
    p.add_argument("--json", action="store_true", help="list, show: print JSON")
    p.set_defaults(fn=cmd_dead)

    p = sub.add_parser(
        "prune",
        help="delete processed rows older than an age, in bounded batches",
        description="Delete the rows marked processed more than --older-than seconds ago (the "
        "database's clock), --batch rows per statement, each committed on its own; unprocessed "
        "rows stay. Without QUEUE: every queue that keeps processed rows.",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE", help="only these queues")
    on_db(p)
    p.add_argument(
        "--older-than", type=float, required=True, metavar="SECONDS", help="the age, in seconds"
    )
    p.add_argument("--batch", type=int, default=1000, help="rows per statement (1000)")
    p.set_defaults(fn=cmd_prune)

    p = sub.add_parser(
        "cancel",
        help="finish a pending message that no consumer holds, as ack would",
        description="Finish message ID of QUEUE as ack would (delete it, or mark it processed) "
        "if it is pending and not in flight. Exit 1 when it was not cancelled (a consumer "
        "holds it, or it is finished, dead or unknown).",
    )
    p.add_argument("queue", metavar="QUEUE", help="the queue")
    p.add_argument("id", type=int, metavar="ID", help="the message id")
    on_db(p)
    p.set_defaults(fn=cmd_cancel)

    p = sub.add_parser(
        "status",
        help="print one message's state, attempts, result and progress",
        description="Read message ID of QUEUE by its rendered status statement and print one "
        "line: its state (pending, running, done, dead or cancelled), attempts, result, "
        "progress, last_error, enqueued_at and processed_at (JSON values, null where the "
        "table has no such column). Exit 1 when no row has the id.",
    )
    p.add_argument("queue", metavar="QUEUE", help="the queue")
    p.add_argument("id", type=int, metavar="ID", help="the message id")
    on_db(p)
    p.set_defaults(fn=cmd_status)
    for name, fn, what in (
        ("pause", cmd_pause, "stop every consumer claiming from a queue, or one group of it"),
        ("resume", cmd_resume, "let consumers claim from a paused queue, or group, again"),
    ):
        p = sub.add_parser(
            name,
            help=what,
            description=f"{what[0].upper()}{what[1:]}: a row of the queue's pause table, which "
            "every consumer's claim reads, on every host; deliveries in flight settle as usual. "
            "Idempotent. Prints what is paused afterwards.",
        )
        p.add_argument("queue", metavar="QUEUE", help="the queue")
        p.add_argument(
            "--group",
            help="only this group (a queue with a group column; default: the whole queue)",
        )
        on_db(p)
        p.set_defaults(fn=fn)

    from qgen.serve import add_parser as add_serve

    add_serve(sub)

    p = sub.add_parser(
        "regroup",
        help="move the unfinished rows of a group no queue claims into a queue's group",
        description="Move the unfinished rows of group --from on QUEUE's table into QUEUE's "
        "default_group (or --to), in one statement with bound parameters: the rows a renamed "
        "queue left in its old group, which `qgen verify` lists. Refuses a group a declared "
        "queue claims or dead-letters into.",
    )
    p.add_argument("queue", metavar="QUEUE", help="the queue whose group receives the rows")
    p.add_argument("--from", dest="from_group", required=True, help="the group to move from")
    p.add_argument("--to", help="the group to move to (default: the queue's default_group)")
    on_db(p)
    p.set_defaults(fn=cmd_regroup)

    p = sub.add_parser(
        "schedules",
        help="run, list, pause or resume the queues' schedules",
        description="run: fire the schedules of the queues (default: every queue that declares "
        "some) until SIGTERM or SIGINT, each slot once however many run them; list: each "
        "schedule's next and last slot (UTC) and whether it is paused; pause/resume NAME (or "
        "QUEUE.NAME): stop and restart one schedule everywhere (the slots it is paused through "
        "never fire).",
    )
    p.add_argument("action", choices=["run", "list", "pause", "resume"], help="what to do")
    p.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="run/list: only these queues; pause/resume: the schedule, as NAME or QUEUE.NAME",
    )
    on_db(p)
    p.add_argument("--json", action="store_true", help="list: print one JSON object instead")
    p.add_argument(
        "--log-level", default="INFO", help="run: the qgen and runtime loggers' level (INFO)"
    )
    p.set_defaults(fn=cmd_schedules)
    return ap


def _schedule_cell(value: Any) -> str:
    if value is None:
        return "-"
    return ("yes" if value else "no") if isinstance(value, bool) else str(value)


def cmd_schedules(args: argparse.Namespace) -> int:
    import asyncio

    import runtime
    from runtime import schedules as sched

    if args.action in ("pause", "resume"):
        if len(args.names) != 1:
            raise runtime.ConfigurationError(
                f"schedules {args.action} takes one schedule: NAME or QUEUE.NAME"
            )
        queue_name, dot, name = args.names[0].rpartition(".")
        url, queues = loaded_files(args, [queue_name] if dot else [])
        owners = [q for q in queues if any(s.name == name for s in sched.schedules_of(q))]
        if len(owners) != 1:
            found = "several queues have it: write QUEUE.NAME" if owners else "no queue has it"
            raise runtime.ConfigurationError(f"schedule {name!r}: {found}")
        act = sched.pause if args.action == "pause" else sched.resume
        changed = asyncio.run(act(url, owners[0], name))
        state = "paused" if args.action == "pause" else "resumed"
        print(f"{owners[0].name}.{name}: {state}" + ("" if changed else " already"))
        return 0
    url, queues = loaded_files(args, args.names)
    queues = [q for q in queues if sched.schedules_of(q)]
    if args.action == "list":

        async def work(conn: Any) -> list[Any]:
            return [s for q in queues for s in await sched.status(conn, q)]

        listed: list[Any] = _on_db(url, work) if queues else []
        if args.json:
            print(json.dumps([s.as_dict() for s in listed], sort_keys=True))
            return 0
        keys = ("schedule", "every", "timezone", "catch_up", "next_slot", "last_slot", "paused")
        rows = [list(keys)]
        for s in listed:
            shown = s.as_dict() | {"schedule": f"{s.queue}.{s.name}"}
            rows.append([_schedule_cell(shown[k]) for k in keys])
        widths = [max(len(r[i]) for r in rows) for i in range(len(keys))]
        for r in rows:
            print("  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip())
        return 0
    from runtime.worker import log_level, setup_logging

    setup_logging(log_level(args.log_level))
    scheduler = sched.Scheduler(url, queues)

    async def run() -> dict[str, int]:
        import signal

        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, scheduler.stop)
        return await scheduler.run()

    fired = asyncio.run(run())
    shown = ", ".join(f"{k}={v}" for k, v in sorted(fired.items())) or "nothing"
    print(f"qgen schedules: fired {shown}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        code: int = args.fn(args)
        return code
    except GeneratorBug as exc:  # qgen refused SQL it wrote itself: a bug of qgen's own
        print(f"qgen: {exc}", file=sys.stderr)
        return 3
    except DeclarationError as exc:
        print(f"qgen: {exc}", file=sys.stderr)
        return 2
    except BrokerError as exc:  # a file, URL, database or value it cannot use
        print(one_line(f"qgen {args.command}: {exc}"), file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if exc.name not in ("jinja2", "sqlglot"):
            raise
        print(
            f"qgen: {args.command} needs the generator ({exc.name} is not installed); "
            "install it with: pip install 'qgen-sql[generator]'",
            file=sys.stderr,
        )
        return 2
    except OSError as exc:
        print(one_line(f"qgen: {exc.filename or ''}: {exc.strerror or exc}"), file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of qgen's own: one line, never a traceback
        print(
            one_line(
                f"qgen: internal error ({type(exc).__name__}: {exc}); please report it with "
                "the qgen.toml that caused it"
            ),
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
