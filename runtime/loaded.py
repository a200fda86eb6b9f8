"""What the parts under a Queue or an Outbox read of it: its rendered file, the header's
settings, its steps (typed, checked at load) and its payload codec.

The forms, the settlement's decision, verify, operate, status and apply take a loaded file
typed by these protocols instead of importing ``runtime.queue``: a ``Queue`` (or an
``Outbox``) satisfies them as it is, and the queue imports those parts at the top, so no
import runs back up to it (tests/generator/test_layers.py checks the graph).
"""

from __future__ import annotations

from typing import Any, Protocol

from runtime.contract.dialects import Dialect
from runtime.contract.file_steps import FileSteps, QueueSteps
from runtime.contract.rendered import RenderedFile
from runtime.models import PayloadModel
from runtime.payloads import Decoder, Encoder


class Loaded(Protocol):
    """A loaded rendered file: a queue's or an outbox's."""

    @property
    def rendered(self) -> RenderedFile: ...

    @property
    def steps(self) -> FileSteps:
        """The file's steps, typed and checked at load (runtime.contract.file_steps)."""
        ...

    @property
    def name(self) -> str: ...

    @property
    def dialect(self) -> Dialect: ...

    @property
    def table(self) -> str: ...

    @property
    def columns(self) -> dict[str, str]: ...

    @property
    def encoder(self) -> Encoder | None: ...

    @property
    def decoder(self) -> Decoder | None: ...


class LoadedQueue(Loaded, Protocol):
    """A loaded queue: the settings its claims and settlements bind."""

    @property
    def steps(self) -> QueueSteps: ...

    @property
    def form(self) -> str: ...

    @property
    def max_attempts(self) -> int | None: ...

    @property
    def dead_group(self) -> str | None: ...

    @property
    def default_group(self) -> str | None: ...

    @property
    def lease_s(self) -> float | None: ...

    @property
    def codec(self) -> PayloadModel[Any] | None:
        """The payload model's codec (``Queue(model=…)``), None without one."""
