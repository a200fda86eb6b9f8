"""The qgen command: render, check, init and demo; every failure is one line and an exit code, never a traceback."""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

from qgen.declaration import DeclarationError, load_declaration

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


def _render(args: argparse.Namespace) -> dict[Path, str]:
    from qgen.render import render_declaration

    decl = load_declaration(args.config)
    if args.dialect and args.dialect not in decl.dialects:
        raise DeclarationError(
            args.config,
            "command line",
            "--dialect",
            f"{args.dialect!r} is not in the declaration's dialects",
            f"use one of {', '.join(decl.dialects)} or add it to dialects",
        )
    files = render_declaration(decl, [args.dialect] if args.dialect else None)
    base = Path(args.out) if args.out else Path(args.config).resolve().parent
    if args.out:  # --out replaces the declaration's out folder
        files = {Path(*p.parts[1:]): t for p, t in files.items()}
    return {base / p: t for p, t in files.items()}


def cmd_render(args: argparse.Namespace) -> int:
    files = _render(args)
    for path, text in files.items():
        if args.stdout:
            sys.stdout.write(f"-- file: {path}\n{text}\n")
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path}")
        else:
            print(f"unchanged {path}")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    files = _render(args)
    stale = 0
    for path, text in files.items():
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    text.splitlines(keepends=True),
                    fromfile=f"{path} (on disk)",
                    tofile=f"{path} (rendered)",
                )
            )
    if stale:
        print(
            f"qgen check: {stale} of {len(files)} files differ from what render writes; "
            "run `qgen render` and commit the result",
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


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="qgen",
        description="Render queue-table SQL from qgen.toml, check it is fresh, or run the demo.",
        epilog="Start with `qgen init`, edit qgen.toml, `qgen render`, review the SQL, commit it, "
        "and run `qgen check` in CI.",
    )
    sub = ap.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--config", "-c", default="qgen.toml", help="the declaration (default: qgen.toml)"
        )
        p.add_argument("--dialect", "-d", help="only this dialect (default: every dialect listed)")
        p.add_argument(
            "--out", "-o", help="write under this folder instead of the declaration's out"
        )

    p = sub.add_parser("render", help="write <out>/<dialect>/<queue>.sql for every queue")
    common(p)
    p.add_argument("--stdout", action="store_true", help="print the files instead of writing them")
    p.set_defaults(fn=cmd_render)
    p = sub.add_parser(
        "check", help="exit 1 with a diff when the files on disk are stale or edited"
    )
    common(p)
    p.set_defaults(fn=cmd_check)
    p = sub.add_parser("init", help="write a commented starter qgen.toml")
    p.add_argument("--config", "-c", default="qgen.toml")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(fn=cmd_init)
    p = sub.add_parser("demo", help="render, enqueue and drain a SQLite queue; print every outcome")
    p.add_argument(
        "--keep", action="store_true", help="keep the temporary folder and print its path"
    )
    p.set_defaults(fn=cmd_demo)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.fn(args)
    except DeclarationError as exc:
        print(f"qgen: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"qgen: {exc.filename or ''}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of qgen's own: one line, never a traceback
        print(
            f"qgen: internal error ({type(exc).__name__}: {exc}); please report it with "
            "the qgen.toml that caused it",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    raise SystemExit(main())
