"""`qgen serve`: the operator console (runtime.console) under uvicorn, for the queues of a
declaration, on the rendered files of the database URL's dialect."""

from __future__ import annotations

import argparse
import ipaddress
import logging
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from qgen.declaration import load_declaration
from qgen.targets import loaded_files

if TYPE_CHECKING:
    from starlette.applications import Starlette

log = logging.getLogger("qgen")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "serve",
        help="run the operator console: a web page, a JSON API and /metrics for the queues",
        description="Serve the queues' stats, dead letters and actions over HTTP (pages, "
        "/api/ and /metrics). Read-only unless --allow-writes; writes need the operator "
        "token (QGEN_CONSOLE_TOKEN or --token-file). Needs the console extra: "
        "pip install 'qgen-sql[console]'.",
    )
    p.add_argument("--config", "-c", default="qgen.toml", help="the declaration (qgen.toml)")
    p.add_argument("--db", help="the database URL (default: the QGEN_DATABASE_URL variable)")
    p.add_argument("--read-db", help="read the stats and dead letters here (e.g. a replica)")
    p.add_argument("--host", default="127.0.0.1", help="the address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=8700, help="the port to listen on (8700)")
    p.add_argument(
        "--allow-writes",
        action="store_true",
        help="open redrive, purge and cancel to holders of the token (default: read-only)",
    )
    p.add_argument(
        "--token-file", help="read the operator token from this file (default: QGEN_CONSOLE_TOKEN)"
    )
    p.add_argument(
        "--cache",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long one reading of the stats serves every request and scrape (5)",
    )
    p.add_argument(
        "--count-cap",
        type=int,
        default=None,
        metavar="ROWS",
        help="how many rows of each kind (unfinished, dead, processed) a queue's counts read "
        'at most; a count that stops there shows as "≥" (1000)',
    )
    p.add_argument("--log-level", default="INFO", help="DEBUG, INFO, WARNING or ERROR (INFO)")
    p.set_defaults(fn=cmd_serve)


def build(args: argparse.Namespace) -> Starlette:
    """The console app for ``args`` (what ``qgen serve`` runs), without serving it."""
    import runtime
    from runtime.console import create_app, read_token
    from runtime.contract.dialects import dialect_for_scheme

    url, queues = loaded_files(args, [])
    dialect = dialect_for_scheme(url.split("://", 1)[0])
    if args.read_db:
        other = (
            dialect_for_scheme(args.read_db.split("://", 1)[0]) if "://" in args.read_db else None
        )
        if other is None or dialect is None or other.name != dialect.name:
            raise runtime.ConfigurationError(
                "--read-db must be a URL of the same dialect as --db "
                f"({dialect.name if dialect else '?'})"
            )
    decl = load_declaration(args.config)
    outbox = None
    if decl.outbox is not None and dialect is not None:
        out = Path(args.config).resolve().parent / decl.out / dialect.name
        outbox = runtime.load(out / f"{decl.outbox.name}.sql")
    if args.cache < 0:
        raise runtime.InvalidArgument(f"--cache must be 0 or more seconds, not {args.cache}")
    cap = getattr(args, "count_cap", None)
    if cap is not None and cap < 1:
        raise runtime.InvalidArgument(f"--count-cap must be 1 or more rows, not {cap}")
    token = read_token(args.token_file)
    if token and not args.allow_writes:
        log.info("qgen serve: read-only: the token opens nothing without --allow-writes")
    return create_app(
        queues,
        url,
        read_db=args.read_db,
        outbox=outbox,
        allow_writes=args.allow_writes,
        token=token,
        cache_s=args.cache,
        **({"count_cap": cap} if cap is not None else {}),
    )


def cmd_serve(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536:
        print(f"qgen serve: --port must be from 1 to 65535, not {args.port}", file=sys.stderr)
        return 2
    level = args.log_level.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        print(
            f"qgen serve: --log-level must be DEBUG, INFO, WARNING or ERROR, not {args.log_level!r}",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        import uvicorn

        app = build(args)
    except ImportError as exc:
        if exc.name not in ("starlette", "uvicorn", "jinja2", "markupsafe"):
            raise
        print(
            f"qgen serve: the console needs {exc.name}; install it with: "
            "pip install 'qgen-sql[console]'",
            file=sys.stderr,
        )
        return 2
    if not _loopback(args.host):
        log.warning(
            "qgen serve: listening on %s: anyone who reaches it reads the queues%s",
            args.host,
            "" if not args.allow_writes else " and, with the token, acts on them",
        )
    mode = "writes allowed with the token" if args.allow_writes else "read-only"
    log.info("qgen serve: http://%s:%d/ (%s)", args.host, args.port, mode)
    # uvicorn shuts down gracefully on SIGTERM/SIGINT, then raises the signal again for the
    # handler it found: a no-op handler makes that graceful stop exit 0, as `qgen worker` does
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: None)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=level.lower(),
        server_header=False,
        proxy_headers=False,
    )
    return 0


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
