"""The qgen command: render, check, init and demo; every failure is one line and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from qgen.declaration import DeclarationError, load_declaration, one_line
from runtime.dialects import DIALECTS
from runtime.errors import BrokerError
from runtime.rendered import is_rendered

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
retry_after = "retry_after"         # retry_after(d) writes it; without it retry_after is a retry
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
    from runtime.dialects import dialect_for_scheme
    from runtime.worker import database_url, run_worker

    file = args.file
    if file is None:
        if not args.queue:
            print("qgen worker: give --file PATH, or --queue NAME with --config", file=sys.stderr)
            return 2
        decl = load_declaration(args.config)
        if args.queue not in decl.queues:
            print(
                f"qgen worker: {args.config} declares no queue {args.queue!r} "
                f"(declared: {', '.join(decl.queues) or 'none'})",
                file=sys.stderr,
            )
            return 2
        try:
            url = database_url(args.db)
        except Exception as exc:
            print(f"qgen worker: {exc}", file=sys.stderr)
            return 2
        dialect = dialect_for_scheme(url.split("://", 1)[0])
        if dialect is None:
            print(
                f"qgen worker: cannot tell the dialect of the database URL {url.split('://', 1)[0]!r}://",
                file=sys.stderr,
            )
            return 2
        file = Path(args.config).resolve().parent / decl.out / dialect.name / f"{args.queue}.sql"
    return run_worker(
        file,
        args.handler,
        db=args.db,
        concurrency=args.concurrency,
        batch=args.batch,
        drain=args.drain,
        transactional=args.transactional,
        log_level=args.log_level,
    )


def cmd_verify(args: argparse.Namespace) -> int:
    import asyncio

    import runtime
    from runtime.dialects import dialect_for_scheme
    from runtime.verify import verify
    from runtime.worker import database_url

    decl = load_declaration(args.config)
    names = args.queues or list(decl.queues)
    unknown = [n for n in names if n not in decl.queues]
    if unknown:
        print(f"qgen verify: no queue {unknown[0]!r} in {args.config}", file=sys.stderr)
        return 2
    url = database_url(args.db)
    dialect = dialect_for_scheme(url.split("://", 1)[0])
    if dialect is None:
        raise runtime.ConfigurationError(f"cannot tell the dialect of {url.split('://', 1)[0]}://")
    out = Path(args.config).resolve().parent / decl.out / dialect.name
    queues = [runtime.load(out / f"{n}.sql") for n in names]

    async def go() -> list[tuple[str, list[object]]]:
        async with await runtime.connect(url) as conn:
            return [(q.name, list(await verify(conn, q))) for q in queues]  # type: ignore[arg-type]

    differs = 0
    for name, findings in asyncio.run(go()):
        if not findings:
            print(f"queue '{name}': matches its declaration")
        for f in findings:
            differs += 1
            print(f"queue '{name}': {f}")
    return 1 if differs else 0


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
        help="consume a queue with a handler until SIGTERM/SIGINT (or until empty with --drain)",
        description="Consume one queue: load its rendered file, import the handler "
        "(module:function, an async or plain function taking (message, ctx)), and run until "
        "SIGTERM or SIGINT, which let in-flight deliveries settle and return unstarted rows.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--file", "-f", help="the queue's rendered file, e.g. sql/postgres/orders.sql"
    )
    where.add_argument(
        "--queue", "-q", help="the queue's name in --config; its file for the URL's dialect is used"
    )
    p.add_argument("--config", "-c", default="qgen.toml", help="the declaration (with --queue)")
    p.add_argument("--handler", required=True, help="module:function, e.g. myservice.jobs:handle")
    p.add_argument("--db", help="the database URL (default: the QGEN_DATABASE_URL variable)")
    p.add_argument("--concurrency", type=int, default=4, help="workers, each with a connection (4)")
    p.add_argument("--batch", type=int, default=10, help="rows a claim takes (10)")
    p.add_argument("--drain", action="store_true", help="stop once nothing is claimable")
    p.add_argument(
        "--transactional",
        action="store_true",
        help="hand the handler ctx.db in the settlement's transaction",
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (INFO)")
    p.set_defaults(fn=cmd_worker)
    p = sub.add_parser(
        "verify",
        help="compare the live tables with the declaration; exit 1 with the fixes if they differ",
        description="Compare each queue's live table with its rendered file: the columns each "
        "role needs and their types, the attempt column's default (1), the id generated by the "
        "database, the claim's index, NOT NULL columns the enqueue would leave empty, and the "
        "dead-letter table. Prints one line per difference with its fix; exit 1 if any.",
    )
    p.add_argument("queues", nargs="*", metavar="QUEUE", help="only these queues (default: all)")
    p.add_argument(
        "--config", "-c", default="qgen.toml", help="the declaration (default: qgen.toml)"
    )
    p.add_argument("--db", help="the database URL (default: the QGEN_DATABASE_URL variable)")
    p.set_defaults(fn=cmd_verify)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except DeclarationError as exc:
        print(f"qgen: {exc}", file=sys.stderr)
        return 2
    except BrokerError as exc:  # a rendered file, a URL or a database the command cannot use
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
