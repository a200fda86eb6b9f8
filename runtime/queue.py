"""A loaded queue: its rendered statements, what its header declares, and enqueue."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property
from typing import Any

from runtime.dialects import Dialect
from runtime.drivers.base import Connection
from runtime.errors import ConfigurationError, DialectMismatch, PayloadError
from runtime.outcomes import delay_seconds
from runtime.payloads import Decoder, Encoder, decode_payload, encode_payload
from runtime.rendered import RenderedFile
from runtime.steps import run_step

__all__ = ["Queue", "check_dialect", "decode_payload", "delay_seconds", "encode_payload"]


def check_dialect(rendered: RenderedFile, conn: Connection) -> None:
    """A file rendered for one dialect runs only on the engines that accept it."""
    d = rendered.dialect
    if conn.dialect.name not in d.runs_on:
        raise DialectMismatch(
            f"{rendered.path} was rendered for {d.name} but the connection reaches "
            f"{conn.dialect.name}; load sql/{conn.dialect.name}/… instead "
            f"(render it with `qgen render --dialect {conn.dialect.name}`)"
        )


@dataclass
class Queue:
    """A queue loaded from its rendered file: ``queue = runtime.load("sql/sqlite/orders.sql")``.

    Its settings are the file's typed header, checked when the file was read. ``encoder`` and
    ``decoder`` widen the payload types (see runtime.payloads): the encoder turns a value
    JSON cannot carry into one it can, the decoder gets every decoded JSON object.
    """

    rendered: RenderedFile
    encoder: Encoder | None = None
    decoder: Decoder | None = None

    @cached_property
    def name(self) -> str:
        return self.rendered.header.name

    @cached_property
    def dialect(self) -> Dialect:
        return self.rendered.dialect

    @cached_property
    def form(self) -> str:
        return self.rendered.header.form or ""

    @cached_property
    def table(self) -> str:
        return self.rendered.header.table

    @cached_property
    def max_attempts(self) -> int | None:
        return self.rendered.header.max_attempts

    @cached_property
    def dead_group(self) -> str | None:
        return self.rendered.header.dead_group

    @cached_property
    def default_group(self) -> str | None:
        return self.rendered.header.default_group

    @cached_property
    def lease_s(self) -> float | None:
        return self.rendered.header.lease_s

    @cached_property
    def columns(self) -> dict[str, str]:
        return self.rendered.columns

    def _enqueue_params(
        self, payload: Any, delay: float | timedelta | None, group: str | None
    ) -> dict[str, Any]:
        cols = self.columns
        if group is not None and "group" not in cols:
            raise ConfigurationError(
                f"queue '{self.name}' has no group column: enqueue without group=, or declare "
                "columns.group and render again"
            )
        if delay is not None and "retry_after" not in cols:
            raise ConfigurationError(
                f"queue '{self.name}' has no retry_after column, so it cannot delay a message: "
                "enqueue without delay=, or declare columns.retry_after and render again"
            )
        return {
            "payload": encode_payload(payload, self.encoder),
            "group": group if group is not None else self.default_group,
            "delay_s": None if delay is None else delay_seconds(delay),
        }

    async def enqueue(
        self,
        db: Connection,
        payload: Any,
        delay: float | timedelta | None = None,
        group: str | None = None,
    ) -> int | None:
        """Add one message, inside the caller's transaction if one is open; returns its id where
        the engine reports it. ``await queue.enqueue(db, {"order": 7}, delay=30)``

        A payload an engine could not keep as it is raises PayloadError, nothing written; a
        delay that is NaN, infinite, negative or past MAX_DELAY_S raises ValueError."""
        check_dialect(self.rendered, db)
        result = await run_step(
            db, self.rendered.require("enqueue"), self._enqueue_params(payload, delay, group)
        )
        return result.rows[0]["id"] if result.rows else None

    async def enqueue_many(
        self,
        db: Connection,
        payloads: Iterable[Any],
        delay: float | timedelta | None = None,
        group: str | None = None,
    ) -> int:
        """Add many messages in one batch; returns how many. ``await queue.enqueue_many(db, items)``

        Every payload is checked first: one that cannot be stored raises PayloadError and
        nothing of the batch is written."""
        check_dialect(self.rendered, db)
        (sql,) = self.rendered.require("enqueue")
        params = []
        for i, p in enumerate(payloads):
            try:
                params.append(self._enqueue_params(p, delay, group))
            except PayloadError as exc:
                raise PayloadError(f"item {i} of the batch: {exc}") from None
        if params:
            await db.executemany(sql, params)
        return len(params)
