"""A worker process for one queue: load its rendered file, import the handler, consume until
SIGTERM or SIGINT (``qgen worker`` runs this; it needs neither Jinja2 nor sqlglot).

A signal asks the consumer to stop: in-flight deliveries settle, claimed rows that never
started return at once, and the process exits 0 with one line of counts. A second signal
while it stops ends the process at once (what it held returns by rollback, lease expiry or
the end of its connections).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from runtime.consumer import Consumer
from runtime.errors import BrokerError, ConfigurationError

log = logging.getLogger("runtime")

#: where the worker reads the database URL when --db is not given
URL_ENV = "QGEN_DATABASE_URL"


def import_handler(spec: str) -> Callable[..., Any]:
    """``package.module:function`` → the function; ConfigurationError naming what is wrong."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigurationError(
            f"handler {spec!r} is not module:function; write e.g. --handler myservice.jobs:handle"
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())  # as `python -m` would: the service's own modules
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigurationError(
            f"handler {spec!r}: cannot import {module_name!r} ({exc}); run the worker from "
            "the service's folder or put the module on PYTHONPATH"
        ) from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
        if target is None:
            raise ConfigurationError(f"handler {spec!r}: {module_name!r} has no {attr!r}")
    if not callable(target):
        raise ConfigurationError(f"handler {spec!r} is not callable")
    return target


def database_url(given: str | None) -> str:
    url = given or os.environ.get(URL_ENV)
    if not url:
        raise ConfigurationError(f"no database URL: pass --db URL or set {URL_ENV}")
    return url


async def serve(consumer: Consumer, drain: bool) -> dict[str, int]:
    """Run the consumer until it drains (``drain``) or a signal stops it; return its counts."""
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(consumer.drain() if drain else consumer.run())
    signals = 0

    def on_signal(signum: int) -> None:
        nonlocal signals
        signals += 1
        if signals == 1:
            log.warning(
                "%s: stopping; in-flight deliveries settle, unstarted rows return",
                signal.Signals(signum).name,
            )
            consumer.stop()
        else:
            log.warning("%s again: stopping now", signal.Signals(signum).name)
            task.cancel()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    try:
        return await task
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(signum)


def run_worker(
    file: str | Path,
    handler: str,
    db: str | None = None,
    concurrency: int = 4,
    batch: int = 10,
    drain: bool = False,
    transactional: bool = False,
    log_level: str = "INFO",
) -> int:
    """The worker's whole life; returns the process's exit code (messages go to the log)."""
    import runtime

    logging.basicConfig(
        level=log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        queue = runtime.load(file)
        if not isinstance(queue, runtime.Queue):
            raise ConfigurationError(f"{file} is an outbox file; a worker consumes a queue")
        consumer = Consumer(
            database_url(db),
            queue,
            import_handler(handler),
            transactional=transactional,
            concurrency=concurrency,
            batch=batch,
        )
        counts = asyncio.run(serve(consumer, drain))
    except (BrokerError, ValueError) as exc:
        print(f"qgen worker: {exc}", file=sys.stderr)
        return 2
    except asyncio.CancelledError:
        print("qgen worker: stopped at once by a second signal", file=sys.stderr)
        return 1
    shown = ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "nothing"
    print(f"qgen worker: {queue.name}: {shown}")
    return 0
