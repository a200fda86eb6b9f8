"""A worker process for one or more queues: load their rendered files, import the handlers,
consume until SIGTERM or SIGINT (``qgen worker`` runs this; it needs neither Jinja2 nor
sqlglot).

Each queue gets its own Consumer, all in one event loop. A signal asks every consumer to
stop: in-flight deliveries settle, claimed rows that never started return at once, and the
process exits 0 with one line of counts per queue. A second signal while they stop ends the
process at once (what it held returns by rollback, lease expiry or the end of its
connections). Anything the worker cannot start with (a file, a handler that does not import,
a URL, a missing table or column) is one line on stderr and exit code 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from runtime.connect import check_url
from runtime.consumer import Consumer
from runtime.contract.errors import BrokerError, ConfigurationError
from runtime.counts import Counts
from runtime.loading import load
from runtime.outcomes import Immediate, RetryPolicy, default_retry_policy
from runtime.queue import Queue

log = logging.getLogger("runtime")

#: where the worker reads the database URL when --db is not given
URL_ENV = "QGEN_DATABASE_URL"
#: the loggers ``--log-level`` sets (the root logger and other libraries' stay as they are)
LOGGERS = ("qgen", "runtime")
#: what ``--retry`` accepts: the default backoff, or retrying at once
RETRY_CHOICES = ("exponential", "immediate")


def _where(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of the service's own code in ``exc``'s traceback
    (not the import machinery's), or ``""``."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{_shown(exc.filename)}:{exc.lineno}"
    frames = [
        f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<frozen")
    ]
    frames = [f for f in frames if Path(f.filename).resolve() != Path(__file__).resolve()]
    return f"{_shown(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""


def _shown(filename: str) -> str:
    """A path relative to the working folder when it is under it."""
    with contextlib.suppress(ValueError):
        return str(Path(filename).resolve().relative_to(Path.cwd().resolve()))
    return filename


def import_handler(spec: str) -> Callable[..., Any]:
    """``package.module:function`` → the function; ConfigurationError naming what is wrong
    (with the file and line of a module that does not import)."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"handler {spec!r} is not module:function; write e.g. --handler myservice.jobs:handle"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the service's own modules
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):  # the module itself
            raise ConfigurationError(
                f"handler {spec!r}: cannot import {module_name!r} (no module named "
                f"{exc.name!r}); run the worker from the service's folder or put the module on "
                "PYTHONPATH"
            ) from None
        raise _import_failed(spec, module_name, exc) from None
    except Exception as exc:  # SyntaxError, ImportError, whatever its top level raised
        raise _import_failed(spec, module_name, exc) from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            where = getattr(module, "__file__", None)
            raise ConfigurationError(
                f"handler {spec!r}: {module_name!r}"
                f"{f' ({_shown(where)})' if where else ''} has no {attr!r}"
            )
    if not callable(target):
        raise ConfigurationError(f"handler {spec!r} is not callable")
    handler: Callable[..., Any] = target
    return handler


def _import_failed(spec: str, module_name: str, exc: BaseException) -> ConfigurationError:
    where = _where(exc)
    text = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    what = f"{where}: {type(exc).__name__}: {text}" if where else f"{type(exc).__name__}: {text}"
    return ConfigurationError(
        f"handler {spec!r}: cannot import {module_name!r}: {' '.join(what.split())}"
    )


def database_url(given: str | None) -> str:
    """The URL from ``--db`` or QGEN_DATABASE_URL, checked (``runtime.connect.check_url``): a
    SQLite file must exist, or the URL say ``?mode=rwc``."""
    url = given or os.environ.get(URL_ENV)
    if not url:
        raise ConfigurationError(f"no database URL: pass --db URL or set {URL_ENV}")
    check_url(url)
    return url


def log_level(name: str) -> int:
    """``"debug"`` → ``logging.DEBUG``; ConfigurationError for a name logging does not know."""
    level = logging.getLevelName(str(name).upper())
    if not isinstance(level, int):
        raise ConfigurationError(
            f"--log-level {name!r} is not a level; use DEBUG, INFO, WARNING, ERROR or CRITICAL"
        )
    return level


def setup_logging(level: int) -> None:
    """Lines on stderr; ``level`` for the ``qgen`` and ``runtime`` loggers only (other
    libraries keep the root logger's WARNING)."""
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for name in LOGGERS:
        logging.getLogger(name).setLevel(level)


def retry_policy(
    retry: str | None, base: float | None = None, cap: float | None = None
) -> RetryPolicy | None:
    """``--retry`` as a policy: None (the Consumer's default: exponential backoff where the
    queue has retry_after, else at once), ``exponential`` (``--retry-base``, ``--retry-cap``)
    or ``immediate``."""
    if retry not in (None, *RETRY_CHOICES):
        raise ConfigurationError(f"--retry {retry!r}: use {' or '.join(RETRY_CHOICES)}")
    if retry == "immediate":
        if base is not None or cap is not None:
            raise ConfigurationError("--retry-base and --retry-cap go with --retry exponential")
        return Immediate()
    if retry is None and base is None and cap is None:
        return None
    policy = default_retry_policy()
    return default_retry_policy(
        policy.base if base is None else base, policy.cap if cap is None else cap
    )


def where_url(url: str) -> str:
    """Where a URL points, without its password: ``user@host:port/database``, or the
    SQLite file."""
    parts = urlsplit(url)
    if parts.scheme.split("+", 1)[0] == "sqlite":
        return unquote(parts.path[1:] if parts.path.startswith("/") else parts.path)
    user = f"{unquote(parts.username)}@" if parts.username else ""
    port = f":{parts.port}" if parts.port else ""
    return f"{user}{parts.hostname or 'localhost'}{port}/{unquote(parts.path.lstrip('/'))}"


def _policy_text(policy: RetryPolicy) -> str:
    if isinstance(policy, Immediate):
        return "immediate"
    base, cap = getattr(policy, "base", None), getattr(policy, "cap", None)
    if base is not None and cap is not None:
        return f"exponential {base:g} s to {cap:g} s"
    return type(policy).__name__


async def serve(consumers: Consumer | Sequence[Consumer], drain: bool) -> list[Counts]:
    """Run the consumers until each drains (``drain``) or a signal stops them all; return
    their counts. One that fails stops the others and its error is raised."""
    group = [consumers] if isinstance(consumers, Consumer) else list(consumers)
    loop = asyncio.get_running_loop()
    tasks = [asyncio.ensure_future(c.drain() if drain else c.run()) for c in group]
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.warning(
                "%s: stopping; in-flight deliveries settle, unstarted rows return",
                signal.Signals(signum).name,
            )
            for c in group:
                c.stop()
        else:
            log.warning("%s again: stopping now", signal.Signals(signum).name)
            for t in tasks:
                t.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [
            exc
            for t in tasks
            if t.done() and not t.cancelled() and (exc := t.exception()) is not None
        ]
        if failed:
            for c in group:
                c.stop()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise failed[0]
        return [await t for t in tasks]
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)


def run_worker(
    file: str | Path | None,
    handler: str | None,
    db: str | None = None,
    concurrency: int = 4,
    batch: int = 10,
    drain: bool = False,
    transactional: bool = False,
    log_level: str = "INFO",
    *,
    queues: Sequence[tuple[str | Path, str]] = (),
    retry: str | None = None,
    retry_base: float | None = None,
    retry_cap: float | None = None,
    **options: Any,
) -> int:
    """The worker's whole life; returns the process's exit code (messages go to the log).

    ``file`` and ``handler`` name one queue; ``queues`` lists (file, handler) pairs for
    more. ``options`` go to each Consumer (``group``, ``handler_timeout``,
    ``poll_interval``, ``max_poll_interval``, ``settle_window``).
    """
    targets = [*([(file, handler)] if file is not None else []), *queues]
    try:
        setup_logging(_level(log_level))
        policy = retry_policy(retry, retry_base, retry_cap)
        loaded = []
        for path, spec in targets:
            if spec is None:
                raise ConfigurationError("give the queue's handler: --handler module:function")
            queue = load(path)
            if not isinstance(queue, Queue):
                raise ConfigurationError(f"{path} is an outbox file; a worker consumes a queue")
            loaded.append((queue, import_handler(spec)))
        url = database_url(db)
        consumers = []
        for queue, handle in loaded:
            consumers.append(
                Consumer(
                    url,
                    queue,
                    handle,
                    transactional=transactional,
                    concurrency=concurrency,
                    batch=batch,
                    retry_policy=policy,
                    **options,
                )
            )
        for c in consumers:
            log.info(
                "queue %s: consuming %s on %s at %s (form %s, concurrency %d, batch %d, retry %s)",
                c.queue.name,
                c.queue.table,
                c.queue.dialect.name,
                where_url(url),
                c.queue.rendered.header.form,
                c.concurrency,
                c.batch,
                _policy_text(c.retry_policy),
            )
        counts = asyncio.run(serve(consumers, drain))
    except (BrokerError, ValueError) as exc:
        print(f"qgen worker: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except asyncio.CancelledError:
        print("qgen worker: stopped at once by a second signal", file=sys.stderr)
        return 1
    for c, got in zip(consumers, counts, strict=True):
        shown = ", ".join(f"{k}={v}" for k, v in sorted(got.items())) or "nothing"
        print(f"qgen worker: {c.queue.name}: {shown}")
    return 0


def _level(name: str | int) -> int:
    return name if isinstance(name, int) else log_level(name)
