"""What the console reads and does, apart from HTTP: the queues' stats (cached briefly, and
sampled into a history the server keeps in memory), the dead letter, and the actions.

Every read and write goes through ``runtime.operate`` (the rendered ``stats``, ``dead_list``,
``dead_show``, ``redrive``, ``purge_dead`` and ``cancel`` statements): the console holds no
SQL of its own. A failure is a ``ConsoleError`` with an HTTP status and one line saying what
is wrong.
"""

from __future__ import annotations

import asyncio
import logging
import math
import re
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from typing import Any

import runtime.operate as operate
from runtime.connect import connect
from runtime.contract.errors import (
    BrokerError,
    ConfigurationError,
    InvalidArgument,
    RedriveRefused,
)
from runtime.operate import WINDOW_S
from runtime.queue import Queue

log = logging.getLogger("runtime")

#: the largest page of dead messages one request may ask for
MAX_PAGE_SIZE = 200
#: how deep page numbers may go (page * size rows are read); deeper: follow ``after``
MAX_PAGE_ROWS = 10_000
#: how many dead messages the queue page shows
NEWEST_DEAD = 10
#: the most groups of one table the overview lists beside the declared queues' own
MAX_GROUPS = 50
#: the most fifo keys the queue page lists
FIFO_KEYS = 20
#: how long a read connection is kept idle for the next request
IDLE_S = 60.0
#: how many rows of each kind a queue's counts read at most (``Console.count_cap``)
COUNT_CAP = 1_000
_ID = re.compile(r"-?[0-9]{1,19}")
_MIN_ID, _MAX_ID = -(2**63), 2**63 - 1


class ConsoleError(Exception):
    """A request the console cannot serve: ``status`` (4xx, or 503 when the database is
    unreachable) and a one-line ``message`` naming what is wrong."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = " ".join(str(message).split())


def parse_id(text: str | int, what: str = "message id") -> int:
    """A message id from a path or form: a whole number in the 64-bit range, or a 400."""
    s = str(text).strip()
    if not _ID.fullmatch(s) or not _MIN_ID <= int(s) <= _MAX_ID:
        shown = s if len(s) <= 40 else s[:40] + "…"
        raise ConsoleError(400, f"the {what} must be a whole number, not {shown!r}")
    return int(s)


def parse_int(text: str | None, name: str, default: int, low: int, high: int) -> int:
    """A whole-number query parameter between ``low`` and ``high``, or a 400 saying so."""
    if text is None or text == "":
        return default
    s = str(text).strip()
    if not re.fullmatch(r"[0-9]{1,9}", s) or not low <= int(s) <= high:
        shown = s if len(s) <= 40 else s[:40] + "…"
        raise ConsoleError(
            400, f"{name} must be a whole number from {low} to {high}, not {shown!r}"
        )
    return int(s)


def plain(value: Any) -> Any:
    """A database value as JSON can carry it: times as ISO text, decimals as numbers."""
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # NaN and infinities: JSON has no such numbers
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)  # a value a service's decoder made: shown as its text


@dataclass
class QueueStats:
    """One queue (or the outbox) of the overview: its counts (its default group's), a line
    per group of its table it owns, and its per-minute counts; or why there are none."""

    name: str
    kind: str  # "queue" or "outbox"
    group: str | None
    stats: dict[str, Any] | None
    error: str | None = None
    #: [{"group", "stats"}]: the queue's own group first, then the table's groups no other
    #: declared queue claims (their "dead" is None: the dead letter is the queue's)
    groups: list[dict[str, Any]] = field(default_factory=list)
    #: {"finished": [per minute, newest first] or None, "enqueued": … or None}
    per_minute: dict[str, list[int] | None] | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "group": self.group,
            "stats": self.stats,
            "error": self.error,
            "groups": self.groups,
            "per_minute": self.per_minute,
        }


@dataclass
class Snapshot:
    """The stats of every queue, read at ``taken_at`` (seconds since the epoch)."""

    taken_at: float
    queues: list[QueueStats]


@dataclass
class Console:
    """The console's state: the loaded queues, where it reads and writes, and its caches.

    ``db`` takes the writes (and the reads unless ``read_db`` is given); ``cache_s`` is how
    long one reading of the stats serves every page, API call and /metrics scrape;
    ``sample_s`` is how often a reading is kept in the in-memory history the charts draw
    (at most ``history`` samples: an hour at the defaults).
    """

    queues: dict[str, Queue]
    db: str
    read_db: str | None = None
    outbox: Any | None = None
    cache_s: float = 5.0
    #: how long one reading of the per-minute counts serves (they change by the minute)
    minutes_s: float = 30.0
    #: how many connections one reading of the stats uses at once
    read_connections: int = 4
    #: how many rows of each kind (unfinished, dead, processed) one queue's counts read at
    #: most: a count that stopped there is listed in its stats' "capped" and shown as "≥"
    count_cap: int = COUNT_CAP
    sample_s: float = 10.0
    history_size: int = 360
    _snapshot: Snapshot | None = field(default=None, repr=False)
    _lock: asyncio.Lock | None = field(default=None, repr=False)
    history: deque[Snapshot] = field(default_factory=deque, repr=False)
    _minutes: dict[str, tuple[float, dict[str, list[int] | None]]] = field(
        default_factory=dict, repr=False
    )
    _groups: dict[str, tuple[float, list[str]]] = field(default_factory=dict, repr=False)
    #: read connections kept open between requests (opening one costs more than the
    #: overview's statements: tens of ms on PostgreSQL, hundreds on a loaded MariaDB)
    _idle: list[tuple[Any, float, Any]] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        self.history = deque(maxlen=self.history_size)

    @property
    def reader(self) -> str:
        return self.read_db or self.db

    async def _read_conn(self) -> _Opened:
        """A read connection: one kept from an earlier request (of this event loop, idle
        less than IDLE_S), else a new one; it goes back to the keep when its user is done
        without an error (at most ``read_connections`` are kept)."""
        loop, now = asyncio.get_running_loop(), time.monotonic()
        while self._idle:
            kept_loop, since, conn = self._idle.pop()
            if kept_loop is loop and now - since < IDLE_S:
                return _Opened(conn, self._keep)
            if kept_loop is loop:
                await _Opened(conn).__aexit__(None, None, None)
        opened = await _open(self.reader)
        opened.keep = self._keep
        return opened

    def _keep(self, conn: Any) -> bool:
        if len(self._idle) >= self.read_connections:
            return False
        self._idle.append((asyncio.get_running_loop(), time.monotonic(), conn))
        return True

    async def close(self) -> None:
        """Close the kept read connections (the app's shutdown does)."""
        idle, self._idle = self._idle, []
        loop = asyncio.get_running_loop()
        for kept_loop, _, conn in idle:
            if kept_loop is loop:
                await _Opened(conn).__aexit__(None, None, None)

    # -- reading -----------------------------------------------------------------------

    def queue(self, name: str) -> Queue:
        """The declared queue ``name``, or a 404 naming the declared ones."""
        q = self.queues.get(name)
        if q is None:
            shown = name if len(name) <= 60 else name[:60] + "…"
            known = ", ".join(self.queues) or "none"
            raise ConsoleError(404, f"no queue {shown!r} here (declared: {known})")
        return q

    def dead_queue(self, name: str) -> Queue:
        q = self.queue(name)
        if not has_dead_letter(q):
            raise ConsoleError(
                404, f"queue '{q.name}' declares no dead letter (max_attempts and dead_letter)"
            )
        return q

    async def snapshot(self, fresh: bool = False) -> Snapshot:
        """Every queue's stats, read at most once per ``cache_s`` however many ask."""
        if self._lock is None:
            self._lock = asyncio.Lock()
        now = time.time()
        if not fresh and self._snapshot and now - self._snapshot.taken_at < self.cache_s:
            return self._snapshot
        async with self._lock:
            now = time.time()
            if not fresh and self._snapshot and now - self._snapshot.taken_at < self.cache_s:
                return self._snapshot
            snap = Snapshot(taken_at=now, queues=await self._read_all())
            self._snapshot = snap
            if not self.history or snap.taken_at - self.history[-1].taken_at >= self.sample_s:
                self.history.append(snap)
            return snap

    async def _read_all(self) -> list[QueueStats]:
        """Every line, read over up to ``read_connections`` connections at once (the queues
        dealt round-robin), so the overview waits for the slowest share, not the sum."""
        units: list[tuple[Any, str]] = [(q, "queue") for q in self.queues.values()]
        if self.outbox is not None:
            units.append((self.outbox, "outbox"))
        shares = max(1, min(self.read_connections, len(units)))
        opened = await asyncio.gather(
            *(self._read_conn() for _ in range(shares)), return_exceptions=True
        )
        lines: list[tuple[int, QueueStats]] = []
        try:
            for o in opened:
                if isinstance(o, BaseException):
                    raise o
            conns = [o.conn for o in opened if isinstance(o, _Opened)]
            extra = await self._extra_groups(conns[0])

            async def share(i: int) -> list[tuple[int, QueueStats]]:
                return [
                    (n, await self._read_one(conns[i], u, kind, extra.get(u.name, [])))
                    for n, (u, kind) in enumerate(units)
                    if n % shares == i
                ]

            lines = [x for part in await asyncio.gather(*map(share, range(shares))) for x in part]
        except BaseException:
            for o in opened:
                if isinstance(o, _Opened):
                    o.keep = None
            raise
        finally:
            # a line that failed (its table missing, the connection broken): its share's
            # connection is closed, not kept
            spoiled = {n % shares for n, line in lines if line.error}
            for i, o in enumerate(opened):
                if isinstance(o, _Opened):
                    if i in spoiled:
                        o.keep = None
                    await o.__aexit__(None, None, None)
        return [line for _, line in sorted(lines, key=lambda x: x[0])]

    async def _read_one(self, conn: Any, q: Any, kind: str, extra: list[str]) -> QueueStats:
        """One queue's (or the outbox's) line: stats of its own group and of ``extra``
        groups, and its per-minute counts; a failure (its table missing, say) spoils only
        this line."""
        group = q.default_group if kind == "queue" else None
        if q.steps.stats is None:
            why = "its rendered file has no stats statement: render it again with `qgen render`"
            return QueueStats(q.name, kind, group, None, why)
        try:
            cap = self.count_cap
            own = await operate.stats(q, conn, processed_cap=cap, count_cap=cap)
            groups = [{"group": group, "stats": own}]
            for g in extra:
                counts = await operate.stats(q, conn, g, processed_cap=cap, count_cap=cap)
                groups.append({"group": g, "stats": {**counts, "dead": None}})
            minutes = await self._per_minute(conn, q, kind)
        except BrokerError as exc:
            log.warning("console: %s %s: stats failed: %s", kind, q.name, exc)
            return QueueStats(q.name, kind, group, None, _one_line(exc))
        return QueueStats(q.name, kind, group, own, groups=groups, per_minute=minutes)

    async def _per_minute(self, conn: Any, q: Any, kind: str) -> dict[str, list[int] | None]:
        """The per-minute counts, read at most once per ``minutes_s``."""
        key, now = f"{kind}:{q.name}", time.time()
        kept = self._minutes.get(key)
        if kept is not None and now - kept[0] < self.minutes_s:
            return kept[1]
        counts = await operate.per_minute(q, conn, WINDOW_S)
        self._minutes[key] = (now, counts)
        return counts

    async def _extra_groups(self, conn: Any) -> dict[str, list[str]]:
        """The groups of each queue table that no declared queue claims (as its own or its
        dead-letter group), read once per table (``groups``): they go to the table's first
        queue without a default_group, else its first queue. At most MAX_GROUPS a table."""
        tables: dict[str, list[Queue]] = {}
        for q in self.queues.values():
            if q.steps.groups is not None:
                tables.setdefault(q.table, []).append(q)
        out: dict[str, list[str]] = {}
        for qs in tables.values():
            # one index probe per group of the table: kept for minutes_s, as the
            # per-minute counts are (a group appears or goes rarely)
            key, now = f"groups:{qs[0].table}", time.time()
            kept = self._groups.get(key)
            if kept is not None and now - kept[0] < self.minutes_s:
                present = kept[1]
            else:
                try:
                    present = await operate.group_names(qs[0], conn)
                except BrokerError:  # the table missing: its queues' stats say so
                    continue
                self._groups[key] = (now, present)
            claimed = {g for q in qs for g in (q.default_group, q.dead_group) if g is not None}
            owner = next((q for q in qs if q.default_group is None), qs[0])
            out[owner.name] = [g for g in present if g not in claimed][:MAX_GROUPS]
        return out

    async def queue_stats(self, name: str) -> tuple[QueueStats, float]:
        """The queue's line of the (cached) snapshot, and when that was read."""
        q = self.queue(name)
        snap = await self.snapshot()
        for line in snap.queues:
            if line.kind == "queue" and line.name == q.name:
                return line, snap.taken_at
        raise ConsoleError(404, f"no queue {name!r} here")  # pragma: no cover - declared above

    async def queue_detail(self, name: str) -> dict[str, Any]:
        """What the queue page adds to the overview's line: its ready messages by priority
        and the fifo keys with messages waiting behind their head (empty lists when the
        queue has no such column)."""
        q = self.queue(name)
        async with await self._read_conn() as conn:
            priorities = await _call(operate.ready_by_priority, q, conn)
            waiting = await _call(operate.fifo_waiting, q, conn, FIFO_KEYS)
        return {
            "priorities": priorities if "priority" in q.columns else None,
            "fifo_waiting": plain(waiting) if "fifo_key" in q.columns else None,
        }

    async def dead_page(
        self, name: str, page: int = 1, size: int = 50, after: int | None = None
    ) -> dict[str, Any]:
        """A page of dead messages, newest first: by ``page`` number (at most MAX_PAGE_ROWS
        deep), or the ``size`` messages below id ``after`` (``next_after`` of the last page)."""
        q = self.dead_queue(name)
        if not 1 <= size <= MAX_PAGE_SIZE:
            raise ConsoleError(400, f"size must be a whole number from 1 to {MAX_PAGE_SIZE}")
        if after is None and page * size > MAX_PAGE_ROWS:
            raise ConsoleError(
                400,
                f"page {page} of size {size} reaches past {MAX_PAGE_ROWS} messages: "
                "follow next_after (?after=ID) to page deeper",
            )
        async with await self._read_conn() as conn:
            if after is not None:
                rows = await _call(operate.dead_list, q, conn, size + 1, after, True)
            else:
                rows = await _call(operate.dead_list, q, conn, page * size + 1, None, True)
                rows = rows[(page - 1) * size :]
        more = len(rows) > size
        rows = rows[:size]
        return {
            "queue": q.name,
            "page": None if after is not None else page,
            "size": size,
            "after": after,
            "items": [plain(r) for r in rows],
            "next_page": page + 1 if more and after is None else None,
            "next_after": rows[-1]["id"] if more and rows else None,
        }

    async def dead_message(self, name: str, id: int) -> dict[str, Any]:
        q = self.dead_queue(name)
        async with await self._read_conn() as conn:
            row = await _call(operate.dead_show, q, conn, id)
        if row is None:
            raise ConsoleError(404, f"queue '{q.name}' has no dead message {id}")
        shown: dict[str, Any] = plain(row)
        return shown

    # -- writing -----------------------------------------------------------------------

    async def redrive(self, name: str, ids: Iterable[int] | None, group: str | None = None) -> int:
        """Send dead messages (``ids``, or all) back to the queue; the count sent back."""
        q = self.dead_queue(name)
        wanted = None if ids is None else list(ids)
        async with await _open(self.db) as conn:
            n: int = await _call(operate.redrive, q, conn, wanted, group)
        if wanted is not None and len(wanted) == 1 and n == 0:
            raise ConsoleError(404, f"queue '{q.name}' has no dead message {wanted[0]}")
        self._snapshot = None
        log.info(
            "console: queue %s: %d dead message(s) sent back (ids: %s)", q.name, n, _ids(wanted)
        )
        return n

    async def redrive_group(self, name: str, group: str) -> int:
        """Send every dead message of ``group`` back (a dead-letter table shared by several
        queues or groups: the others stay); the count sent back."""
        q = self.dead_queue(name)
        async with await _open(self.db) as conn:
            n: int = await _call(operate.redrive_group, q, conn, group)
        self._snapshot = None
        log.info("console: queue %s: %d dead message(s) of group %r sent back", q.name, n, group)
        return n

    async def purge(self, name: str, ids: Iterable[int] | None) -> int:
        """Delete dead messages (``ids``, or all) for good; the count deleted."""
        q = self.dead_queue(name)
        wanted = None if ids is None else list(ids)
        async with await _open(self.db) as conn:
            n: int = await _call(operate.purge_dead, q, conn, wanted)
        if wanted is not None and len(wanted) == 1 and n == 0:
            raise ConsoleError(404, f"queue '{q.name}' has no dead message {wanted[0]}")
        self._snapshot = None
        log.info("console: queue %s: %d dead message(s) purged (ids: %s)", q.name, n, _ids(wanted))
        return n

    async def cancel(self, name: str, id: int) -> None:
        """Finish a pending message nobody holds, as ack would; a 409 when it was not."""
        q = self.queue(name)
        async with await _open(self.db) as conn:
            done = await _call(operate.cancel, q, conn, id)
        if not done:
            raise ConsoleError(
                409,
                f"queue '{q.name}': message {id} not cancelled: a consumer holds it now, or it "
                "is already finished, dead or unknown",
            )
        self._snapshot = None
        log.info("console: queue %s: message %d cancelled", q.name, id)

    async def pause(self, name: str, group: str | None, on: bool) -> list[str | None]:
        """Pause (``on``) or resume the queue, or one group of it; the paused scopes after."""
        q = self.queue(name)
        async with await _open(self.db) as conn:
            changed = await _call(operate.pause if on else operate.resume, q, conn, group)
            scopes: list[str | None] = await _call(operate.paused, q, conn)
        self._snapshot = None
        if changed:
            log.info(
                "console: queue %s: %s %s",
                q.name,
                "paused" if on else "resumed",
                "the whole queue" if group is None else f"group {group!r}",
            )
        return scopes

    async def paused(self, name: str) -> list[str | None] | None:
        """The paused scopes (None: the queue cannot be paused, or they cannot be read)."""
        q = self.queue(name)
        if q.rendered.header.pause_table is None:
            return None
        try:
            async with await self._read_conn() as conn:
                scopes: list[str | None] = await _call(operate.paused, q, conn)
            return scopes
        except ConsoleError:
            return None


def has_dead_letter(q: Queue) -> bool:
    return q.rendered.header.dead_group is not None or q.rendered.header.dead_table is not None


def _ids(ids: list[int] | None) -> str:
    if ids is None:
        return "all"
    return ", ".join(map(str, ids[:20])) + (" …" if len(ids) > 20 else "")


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


class _Opened:
    """``async with await _open(url) as conn``: a connection, or a 503 naming why not. With
    ``keep``, a use that ends without an error hands the connection to it instead of closing
    it (``keep`` returns False to have it closed)."""

    def __init__(self, conn: Any, keep: Callable[[Any], bool] | None = None) -> None:
        self.conn = conn
        self.keep = keep

    async def __aenter__(self) -> Any:
        return self.conn

    async def __aexit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None and self.keep is not None and self.keep(self.conn):
            return
        try:
            await self.conn.close()
        except Exception:  # the answer is already known; a close that fails changes nothing
            log.debug("console: closing a connection failed", exc_info=True)


async def _open(url: str) -> _Opened:
    try:
        return _Opened(await connect(url))
    except BrokerError as exc:
        raise ConsoleError(503, f"the database cannot be reached: {_one_line(exc)}") from None


async def _call(fn: Any, *args: Any) -> Any:
    """Run one runtime.operate function, its errors as ConsoleErrors."""
    try:
        return await fn(*args)
    except InvalidArgument as exc:
        raise ConsoleError(400, _one_line(exc)) from None
    except (ConfigurationError, RedriveRefused) as exc:
        raise ConsoleError(409, _one_line(exc)) from None
    except BrokerError as exc:
        raise ConsoleError(503, f"the database refused: {_one_line(exc)}") from None
