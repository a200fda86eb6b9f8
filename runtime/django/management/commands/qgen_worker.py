"""``python manage.py qgen_worker``: run the tasks of a runtime.django.QgenBackend, with the
signals, logging and exit codes of ``qgen worker`` (runtime.worker)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from runtime.worker import RETRY_CHOICES


class Command(BaseCommand):
    help = (
        "Run the tasks of a qgen tasks backend until SIGTERM or SIGINT (in-flight tasks "
        "finish), or until the queues are empty with --drain."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--backend", default="default", help="the TASKS alias (default)")
        parser.add_argument(
            "--queue",
            action="append",
            default=[],
            dest="queue_names",
            help="a Django queue name to run (repeat it; default: all of the backend's)",
        )
        parser.add_argument("--concurrency", type=int, default=4)
        parser.add_argument("--batch", type=int, default=10)
        parser.add_argument("--drain", action="store_true", help="stop once nothing is ready")
        parser.add_argument("--log-level", default="INFO")
        parser.add_argument("--retry", choices=RETRY_CHOICES, default=None)
        parser.add_argument("--retry-base", type=float, default=None)
        parser.add_argument("--retry-cap", type=float, default=None)

    def handle(self, *args: Any, **options: Any) -> None:
        from runtime.django.worker import run

        code = run(
            options["backend"],
            options["queue_names"],
            concurrency=options["concurrency"],
            batch=options["batch"],
            drain=options["drain"],
            log_level=options["log_level"],
            retry=options["retry"],
            retry_base=options["retry_base"],
            retry_cap=options["retry_cap"],
        )
        if code:
            raise SystemExit(code)
