"""SPEC.md's outcome table in plain Python: what a queue table holds after every operation.

No database and no runtime here. The model states each rule of "Settlement: the outcome
table" once, for every claim form and every table shape (with or without attempt,
retry_after, processed_at and group; dead letter as a group or a table), and the stateful
tests (tests/model/test_model_stateful.py) compare a real table with it after every step.

Times are states, not values: ``retry_after`` is "none" (NULL), "due" (at or before the
database's now) or "future"; a lease is "none" (NULL), "held" (in the future, holding the
token of the delivery in ``holder``) or "expired" (in the past). A delivery is named by its
number in the order the model handed them out (``d1``, ``d2``, …).

The rules, as SPEC.md gives them:

* The attempt column holds the number the row's next delivery reads (1 for a new row);
  ``ctx.attempt`` is the delivery's own number (None without the column).
* Row lock counts in the statement that returns the row (retry, retry_after, dead-letter
  move: +1); lease counts at the claim (+1); advisory at the take (+1), which the claim
  runs for each row whose key it kept.
* Row lock with max_attempts (and retry_after, which render asks for) counts at the claim
  instead, in a statement of its own that commits before the batch's transaction opens
  (+1, and retry_after set to a short "future" mark so no other claim counts the row
  again); ``take`` then locks the counted rows in the batch. So the count survives the
  batch's rollback, and the mark too: a row given back, or whose batch rolled back, returns
  when the mark runs out (the test makes it due). The settlements count nothing more: a
  retry clears the mark ("none"), a retry_after sets it, a move to the dead-letter group
  clears it, a move to the dead-letter table keeps the row as it is (the mark with it), and
  ack and drop leave it. A row returned unstarted (``unclaim``) has its count undone and
  its mark cleared.
* Advisory claim: the first ``scan`` claimable rows by id are candidates; it keeps the
  first ``limit`` whose keys no other delivery holds (the others' keys stay free).
* ack and drop delete the row, or set processed_at when the column exists (and clear a lease).
  A handler that returns None ("none") acks.
* retry: row lock +1 (without an attempt column: nothing, the row returns as it was);
  lease clears the lease; advisory writes nothing (the unlock returns the row).
* retry_after(d): the row is due d seconds from now (plus row lock's +1, lease's clear);
  without a retry_after column it is a retry, with a warning.
* last_error: a retry, a retry_after and a move to the dead letter (group or table) write
  the delivery's error text there; ack and drop leave it as it was.
* result (a table that keeps processed rows): an ack with a result writes it to the row it
  marks processed; without the column the ack is a plain ack, with a warning.
* The cap: a retry or retry_after of a delivery whose attempt has reached max_attempts moves
  the row to its dead letter instead, with a warning: its group becomes the dead-letter group,
  or it moves into the dead-letter table (same columns, payload and count kept, lease NULL).
* Lease: a settlement whose token the row no longer holds raises LeaseLost and changes
  nothing. Dropped unsettled: row lock rolls back (nothing was written), lease releases at
  once, advisory unlocks (the take's count stays).
* Row lock: the claim's transaction holds its rows until the batch ends; its settlements
  become visible together at COMMIT, and a rollback undoes all of them.
* Transactional mode: the handler's write commits with an ack, and only with it.
* priority: the claim takes claimable rows by priority descending, then id (enqueue's None
  stores 0).
* fifo_key: a row with a key is claimable only while no unfinished row of its key (of the
  claim's group) has a smaller id, as the claiming connection sees the table (another
  worker's open row-lock batch shows its rows as they were). Finished rows (deleted,
  processed, dead) never block; NULL keys never block nor are blocked.
* dedupe_key: an enqueue whose key a pending row holds (not processed, not in the dead-letter
  group; in its group) adds nothing and returns that row's id; finished or dead, the key is
  free again. The refused insert still takes the next id (a sequence, AUTOINCREMENT and
  AUTO_INCREMENT all hand it out before the conflict): ids skip one per duplicate.
* cancel: a pending row no delivery holds (no lease held, no key held, in no open row-lock
  batch) finishes as ack finishes it; anything else is left as it is (False).

The limits (docs/howto/limits.md), each counted per bucket (the claim's group):

* concurrency_limit N: a row with a concurrency_key is claimable only while fewer than N
  unfinished rows of its key (of the claim's group) have a smaller id, as the claiming
  connection sees the table (fifo_key is N = 1). NULL keys are not limited.
* max_in_flight M, lease: the claim takes at most M less the leases held in its group (an
  expired lease is not in flight); none when M are held.
* max_in_flight M, row lock: the claim locks min(limit, M less the slots other open batches
  hold) slot rows and claims at most that many rows; its batch holds those slots until it
  ends (even the ones it found no row for). An empty claim holds nothing.
* rate_limit (burst B): the bucket holds B tokens at first; a claim is granted min(limit,
  tokens) and takes at most that many rows; nothing granted: no row, ``contended``. The
  tokens it did not use return (at most B held), except a row-lock batch that claimed rows
  (its transaction is open). Time refills the bucket (``refill``: the test moves the
  bucket's refilled_at back by the clock).

Example::

    m = OutcomeModel(Shape(form="lease", attempt=True, dead_letter="table", max_attempts=2))
    m.enqueue({"n": 1})
    (d,) = m.claim(worker=0, limit=1)
    assert d.attempt == 1 and m.rows[d.id].attempt == 2
    m.settle(d, "retry")
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

FORMS = ("row_lock", "lease", "advisory")
#: "none": the handler returned None, which settles as an ack
OUTCOMES = ("ack", "drop", "retry", "retry_after", "none")

#: the group a claim without group= reads, and the dead-letter group (names used by the tests)
DEFAULT_GROUP = "model"
DEAD_GROUP = "dead"


@dataclass(frozen=True)
class Shape:
    """A queue declaration reduced to what the outcome table depends on."""

    form: str
    attempt: bool = False
    retry_after: bool = False
    processed_at: bool = False
    group: bool = False
    #: None, "group" or "table"; declared together with max_attempts
    dead_letter: str | None = None
    max_attempts: int | None = None
    #: the ordering roles: a priority column, a fifo_key column
    priority: bool = False
    fifo_key: bool = False
    dedupe_key: bool = False
    #: a last_error column: why the last failed delivery failed
    last_error: bool = False
    #: a result column: what an ack with a result keeps (only with processed_at)
    result: bool = False
    #: concurrency_limit N (None: none; a concurrency_key column comes with it)
    concurrency_limit: int | None = None
    #: max_in_flight M (None: none; not on the advisory form)
    max_in_flight: int | None = None
    #: rate_limit's burst B, tokens refilled only by the test (None: no rate limit)
    rate_burst: int | None = None

    def __post_init__(self) -> None:
        assert self.form in FORMS, self.form
        assert not self.result or self.processed_at, "a result column needs processed_at"
        assert (self.dead_letter is None) == (self.max_attempts is None)
        assert self.max_attempts is None or self.attempt, "max_attempts needs an attempt column"
        assert self.dead_letter != "group" or self.group, "a dead-letter group needs a group column"
        assert not (self.max_in_flight and self.form == "advisory"), "render refuses it"
        if self.counts_at_claim:
            assert not self.max_in_flight, "row lock refuses max_in_flight with max_attempts"

    @property
    def counts_at_claim(self) -> bool:
        """Row lock with max_attempts: the claim counts each delivery, committed (``take``).
        The mark needs retry_after, which render asks for; a table without it (the model's
        own examples) counts in the settlements, as row lock does without a cap."""
        return self.form == "row_lock" and self.max_attempts is not None and self.retry_after

    @property
    def lease(self) -> bool:
        """The lease form's locked_until column (the only form whose tables have one here)."""
        return self.form == "lease"


@dataclass
class Row:
    """One row of the queue table (or of its dead-letter table); None: no such column."""

    id: int
    payload: Any
    group: str | None
    attempt: int | None
    retry_after: str | None  # "none" | "due" | "future"
    lease: str | None  # "none" | "held" | "expired"
    processed: bool | None
    #: the delivery whose token locked_until holds (lease "held" only)
    holder: int | None = None
    priority: int | None = None
    fifo_key: str | None = None
    #: the dedupe_key column (None: NULL, or no such column)
    key: str | None = None
    #: the last_error column (None: NULL, or no such column)
    last_error: str | None = None
    #: the result column, decoded (None: NULL, or no such column)
    result: Any = None
    #: the concurrency_key column (None: NULL, or no such column)
    concurrency_key: str | None = None


@dataclass
class Delivery:
    """One delivery as the handler sees it, and whether it is still open."""

    number: int
    id: int
    payload: Any
    group: str | None
    attempt: int | None  # ctx.attempt
    worker: int
    #: "open", "settled", "lost" (LeaseLost) or "given_back"
    state: str = "open"

    @property
    def name(self) -> str:
        return f"d{self.number}"


@dataclass(frozen=True)
class Settlement:
    """What a settlement did: the decision's label, whether the lease was lost, the warnings."""

    label: str  # "ack" | "drop" | "retry" | "retry_after" | "dead_letter"
    lease_lost: bool = False
    #: "retry_after_without_column", "cap"
    warnings: tuple[str, ...] = ()


@dataclass
class _Batch:
    """A row-lock claim's open transaction: the rows it locks and what to restore on rollback."""

    deliveries: list[Delivery]
    #: row id → the queue row and dead-letter row as they were before the batch (None: absent)
    before: dict[int, tuple[Row | None, Row | None]]
    #: handler writes made in this batch, committed only with it
    writes: list[int] = field(default_factory=list)
    #: max_in_flight: the claim's bucket, and the slot rows the batch holds in it
    bucket: str = DEFAULT_GROUP
    slots: int = 0

    @property
    def ids(self) -> set[int]:
        return set(self.before)


class OutcomeModel:
    """The queue table, its dead letter and the handler's committed writes, as SPEC.md says."""

    def __init__(self, shape: Shape) -> None:
        self.shape = shape
        #: the queue table by id, as the worker's own connection sees it
        self.rows: dict[int, Row] = {}
        #: the dead-letter table by id (dead letter as a table only)
        self.dead: dict[int, Row] = {}
        #: delivery numbers whose handler write committed (transactional mode)
        self.writes: list[int] = []
        self._next_id = 1
        self._next_delivery = 1
        #: row lock: the open batch of each worker
        self._batches: dict[int, _Batch] = {}
        #: advisory: row id → the delivery holding its key
        self._keys: dict[int, Delivery] = {}
        #: advisory: the last claim found ready rows but every key was held
        self.contended = False
        #: the last enqueue found its key held and returned the pending row's id
        self.duplicate = False
        #: rate_limit: the tokens each bucket holds (a bucket not there yet is full)
        self.tokens: dict[str, int] = {}
        #: the paused scopes: "" the whole queue (every group of its table), else a group
        self.paused: set[str] = set()

    # ------------------------------------------------------------------ reading

    def committed(self) -> tuple[dict[int, Row], dict[int, Row], list[int]]:
        """The queue table, the dead-letter table and the handler writes as another connection
        reads them: an open row-lock batch shows none of its changes before its COMMIT."""
        rows, dead, writes = dict(self.rows), dict(self.dead), list(self.writes)
        for batch in self._batches.values():
            for row_id, (row, dead_row) in batch.before.items():
                _put(rows, row_id, row)
                _put(dead, row_id, dead_row)
        return rows, dead, writes

    @property
    def next_id(self) -> int:
        """The id the next enqueue gets (ids start at 1 and are never reused)."""
        return self._next_id

    @property
    def batches_open(self) -> bool:
        """Whether any row-lock batch is open (its transaction not yet ended)."""
        return bool(self._batches)

    def open_batch(self, worker: int) -> bool:
        return worker in self._batches

    def locked_by_batch(self, row_id: int) -> bool:
        return any(row_id in b.ids for b in self._batches.values())

    def claimable(self, row: Row, group: str | None, worker: int | None = None) -> bool:
        """Whether a claim (for ``group``; None: the default) would take ``row`` now."""
        s = self.shape
        if s.group and row.group != (group or DEFAULT_GROUP):
            return False
        if row.processed or row.retry_after == "future":
            return False
        if row.lease == "held":
            return False
        # FOR UPDATE SKIP LOCKED: another open batch's rows are skipped
        if any(w != worker and row.id in b.ids for w, b in self._batches.items()):
            return False
        return not self.waits_for_its_key(row, group)

    def waits_for_its_key(self, row: Row, group: str | None) -> bool:
        """fifo_key (concurrency_limit N): an unfinished row (N of them) of the same key and
        the claim's group with a smaller id, as a claim sees the table (another batch's
        changes not yet committed)."""
        fifo = self.shape.fifo_key and row.fifo_key is not None
        limit = self.shape.concurrency_limit if row.concurrency_key is not None else None
        if not fifo and not limit:
            return False
        seen, _, _ = self.committed()
        before = [
            e
            for e in seen.values()
            if e.id < row.id
            and not e.processed
            and (not self.shape.group or e.group == (group or DEFAULT_GROUP))
        ]
        if fifo and any(e.fifo_key == row.fifo_key for e in before):
            return True
        return bool(limit) and sum(e.concurrency_key == row.concurrency_key for e in before) >= (
            limit or 0
        )

    def held(self) -> list[Row]:
        """The rows a delivery holds now (row lock: every row of an open batch, as it was
        before the batch)."""
        if self.shape.form == "row_lock":
            return [row for b in self._batches.values() for row, _ in b.before.values() if row]
        if self.shape.form == "advisory":
            return [self.rows[i] for i in self._keys if i in self.rows]
        return [r for r in self.rows.values() if r.lease == "held"]

    def in_flight(self, bucket: str) -> int:
        """max_in_flight's count for a bucket: leases held in it (lease), slot rows its open
        batches hold (row lock)."""
        if self.shape.form == "row_lock":
            return sum(b.slots for b in self._batches.values() if b.bucket == bucket)
        return sum(
            1
            for r in self.rows.values()
            if r.lease == "held" and (not self.shape.group or r.group == bucket)
        )

    def pause(self, group: str | None) -> None:
        """Pause the whole queue (None) or one group: its claims find nothing ready."""
        self.paused.add(group or "")

    def resume(self, group: str | None) -> None:
        """Lift the queue's pause (None) or one group's; the other pause stays."""
        self.paused.discard(group or "")

    def is_paused(self, group: str | None) -> bool:
        """A claim of ``group`` (None: the queue's own) waits: the queue or that group is
        paused. Deliveries already held settle as ever."""
        scope = (group or DEFAULT_GROUP) if self.shape.group else ""
        return "" in self.paused or scope in self.paused

    def _ready(self, limit: int, group: str | None, worker: int | None) -> list[Row]:
        if self.is_paused(group):
            return []
        ready = [r for r in self.claim_order() if self.claimable(r, group, worker)]
        return ready[:limit]

    def claim_order(self) -> list[Row]:
        """The rows in the order a claim reads them: priority descending, then id."""
        return sorted(self.rows.values(), key=lambda r: (-(r.priority or 0), r.id))

    # ------------------------------------------------------------------ enqueue

    def pending_with(self, key: str, group: str | None = None) -> Row | None:
        """The pending row that holds ``key`` (in ``group``, where the table has groups)."""
        want = (group or DEFAULT_GROUP) if self.shape.group else None
        for row in self.rows.values():
            if row.key == key and not row.processed and row.group == want != DEAD_GROUP:
                return row
        return None

    def enqueue(
        self,
        payload: Any,
        group: str | None = None,
        delay: str | None = None,
        priority: int | None = None,
        fifo_key: str | None = None,
        key: str | None = None,
        concurrency_key: str | None = None,
    ) -> int:
        """A new row: attempt 1, due at once (delay None or "due") or later ("future"). With a
        ``key`` a pending row holds: nothing added, that row's id (see ``duplicate``)."""
        s = self.shape
        assert group is None or s.group
        assert delay is None or s.retry_after
        assert priority is None or s.priority
        assert fifo_key is None or s.fifo_key
        assert key is None or s.dedupe_key
        assert concurrency_key is None or s.concurrency_limit
        held = self.pending_with(key, group) if key is not None else None
        self.duplicate = held is not None
        if held is not None:
            self._next_id += 1  # the refused insert took an id from the sequence all the same
            return held.id
        row = Row(
            id=self._next_id,
            payload=payload,
            group=(group or DEFAULT_GROUP) if s.group else None,
            attempt=1 if s.attempt else None,
            retry_after=(delay or "none") if s.retry_after else None,
            lease="none" if s.lease else None,
            processed=False if s.processed_at else None,
            priority=(priority or 0) if s.priority else None,
            fifo_key=fifo_key,
            key=key,
            concurrency_key=concurrency_key,
        )
        self.rows[row.id] = row
        self._next_id += 1
        return row.id

    def cancel(self, row_id: int) -> bool:
        """Finish a pending row that no delivery holds, as ack does; False: left as it is."""
        row = self.rows.get(row_id)
        if row is None or row.processed or row.group == DEAD_GROUP:
            return False
        if row.lease == "held" or row_id in self._keys or self.locked_by_batch(row_id):
            return False
        self._apply(row, "ack", "due")
        return True

    # ------------------------------------------------------------------ claims

    def _deliver(self, row: Row, worker: int, counted: bool) -> Delivery:
        """A delivery of ``row``; ``counted``: the claim/take counts the attempt now (+1)."""
        d = Delivery(
            number=self._next_delivery,
            id=row.id,
            payload=row.payload,
            group=row.group,
            attempt=row.attempt,
            worker=worker,
        )
        self._next_delivery += 1
        if counted and row.attempt is not None:
            row.attempt += 1
        return d

    def claim(
        self,
        worker: int,
        limit: int,
        group: str | None = None,
        scan: int | None = None,
        spread: int | None = None,
    ) -> list[Delivery]:
        """Row lock (opens the worker's batch) or lease (writes each row's lease): the first
        ``limit`` claimable rows in claim order. Advisory: of the first ``scan`` (or ``limit``
        times ``spread``) claimable rows, the first ``limit`` whose keys are free, each taken
        (counted) under its key. With a rate limit the bucket first grants at most ``limit``
        tokens, and the claim takes at most the grant."""
        burst = self.shape.rate_burst
        if burst is None:
            return self._claim(worker, limit, group, scan, spread)
        bucket = group or DEFAULT_GROUP
        granted = min(limit, self.tokens.get(bucket, burst))
        if granted <= 0:
            self.contended = True  # nothing granted: others took the tokens for now
            return []
        self.tokens[bucket] = self.tokens.get(bucket, burst) - granted
        out = self._claim(worker, granted, group, scan, spread)
        unused = granted - len(out)
        if unused and not (self.shape.form == "row_lock" and out):
            self.tokens[bucket] = min(burst, self.tokens[bucket] + unused)
        return out

    def refill(self, bucket: str, tokens: int) -> None:
        """Time passes: the bucket gains ``tokens``, holding at most its burst."""
        assert self.shape.rate_burst is not None
        self.tokens[bucket] = min(
            self.shape.rate_burst, self.tokens.get(bucket, self.shape.rate_burst) + tokens
        )

    def _claim(
        self, worker: int, limit: int, group: str | None, scan: int | None, spread: int | None
    ) -> list[Delivery]:
        form = self.shape.form
        if form == "advisory":
            assert all(d.worker != worker for d in self._keys.values()), "claims hold nothing"
            listed = self._ready(scan or limit * (spread or 1), group, worker)
            out = []
            for r in listed:
                if r.id not in self._keys and len(out) < limit:
                    d = self._deliver(r, worker, counted=True)
                    self._keys[r.id] = d
                    out.append(d)
            self.contended = bool(listed) and not out
            return out
        bucket = group or DEFAULT_GROUP
        most = self.shape.max_in_flight
        if most is not None:  # row lock: the slots it locks; lease: the room left
            limit = min(limit, most - self.in_flight(bucket))
            if limit <= 0:
                return []
        rows = self._ready(limit, group, worker)
        if form == "row_lock":
            assert worker not in self._batches, "a worker holds one batch at a time"
            counted = self.shape.counts_at_claim
            out = [self._deliver(r, worker, counted=counted) for r in rows]
            if counted:  # committed before the batch: its rollback keeps the count and mark
                for r in rows:
                    r.retry_after = "future"
            if out:  # an empty claim rolls its transaction back at once
                before = {r.id: (copy.copy(r), _copy(self.dead.get(r.id))) for r in rows}
                slots = limit if most is not None else 0
                self._batches[worker] = _Batch(out, before, bucket=bucket, slots=slots)
            return out
        out = []
        for r in rows:
            d = self._deliver(r, worker, counted=True)
            r.lease, r.holder = "held", d.number
            out.append(d)
        return out

    # ------------------------------------------------------------------ settling

    def decide(self, d: Delivery, outcome: str, result: Any = None) -> Settlement:
        """The statement an outcome settles with: the missing-column fallback, then the cap."""
        s = self.shape
        assert outcome in OUTCOMES, outcome
        warnings: list[str] = []
        kind = "ack" if outcome == "none" else outcome
        if kind == "ack" and result is not None and not s.result:
            warnings.append("result_without_column")
        if kind == "retry_after" and not s.retry_after:
            warnings.append("retry_after_without_column")
            kind = "retry"
        if (
            kind in ("retry", "retry_after")
            and s.max_attempts is not None
            and d.attempt is not None
            and d.attempt >= s.max_attempts
        ):
            warnings.append("cap")
            kind = "dead_letter"
        return Settlement(kind, warnings=tuple(warnings))

    def settle(
        self,
        d: Delivery,
        outcome: str,
        delay: str = "due",
        handler_wrote: bool = False,
        error: str | None = None,
        result: Any = None,
    ) -> Settlement:
        """Settle an open delivery with ``outcome`` (retry_after: ``delay`` "due" or "future").

        ``handler_wrote``: in transactional mode the handler wrote one row, kept only by an ack.
        ``error``: why the delivery failed, which a retry (or dead letter) writes to last_error.
        ``result``: what an ack keeps in a result column.
        """
        assert d.state == "open", d
        decision = self.decide(d, outcome, result)
        form = self.shape.form
        row = self.rows.get(d.id)
        if form == "lease" and (row is None or row.lease != "held" or row.holder != d.number):
            d.state = "lost"  # LeaseLost: another token (or none) is in the row; nothing changes
            return Settlement(decision.label, lease_lost=True, warnings=decision.warnings)
        assert row is not None, f"{d.name}: its row is held, so it is still there"
        self._apply(row, decision.label, delay)
        if self.shape.last_error and decision.label not in ("ack", "drop"):
            (self.dead if d.id in self.dead else self.rows)[d.id].last_error = error
        if self.shape.result and decision.label == "ack" and result is not None:
            self.rows[d.id].result = result
        d.state = "settled"
        if handler_wrote and decision.label == "ack":
            if form == "row_lock":
                self._batches[d.worker].writes.append(d.number)
            else:
                self.writes.append(d.number)
        if form == "advisory":
            del self._keys[d.id]
        return decision

    def _apply(self, row: Row, label: str, delay: str) -> None:
        s = self.shape
        form = s.form
        counts_here = form == "row_lock" and row.attempt is not None and not s.counts_at_claim
        # row lock's count at the claim: a retry and a move to the dead-letter group clear
        # the claim's mark (a move to the table keeps the row as it is)
        if s.counts_at_claim and (
            label == "retry" or (label, s.dead_letter) == ("dead_letter", "group")
        ):
            row.retry_after = "none"
        if label in ("ack", "drop"):
            if s.processed_at:
                row.processed = True
                if s.lease:
                    row.lease, row.holder = "none", None
            else:
                del self.rows[row.id]
        elif label == "retry":
            if counts_here:
                row.attempt += 1  # type: ignore[operator]
            if s.lease:
                row.lease, row.holder = "none", None
        elif label == "retry_after":
            row.retry_after = delay
            if counts_here:
                row.attempt += 1  # type: ignore[operator]
            if s.lease:
                row.lease, row.holder = "none", None
        elif label == "dead_letter":
            if counts_here:
                row.attempt += 1  # type: ignore[operator]
            if s.lease:
                row.lease, row.holder = "none", None
            if s.dead_letter == "group":
                row.group = DEAD_GROUP
            else:
                self.dead[row.id] = row  # the same columns: payload and count kept
                del self.rows[row.id]
        else:
            raise AssertionError(label)

    def give_back(self, d: Delivery) -> None:
        """Dropped unsettled: row lock writes nothing (the batch's COMMIT returns the row as it
        was); lease releases at once (if this delivery still holds it); advisory unlocks."""
        assert d.state == "open", d
        d.state = "given_back"
        form = self.shape.form
        row = self.rows.get(d.id)
        if form == "lease" and row is not None and row.holder == d.number:
            row.lease, row.holder = "none", None
        elif form == "advisory":
            del self._keys[d.id]

    def return_unstarted(self, d: Delivery) -> None:
        """A delivery whose handler never started (a stopping consumer): returned as by
        give_back, and the count its claim (lease, while it still holds the row; row lock
        with max_attempts, in the batch, its mark cleared too) or its take (advisory, under
        its key) made is undone; row lock without max_attempts never counted it."""
        form = self.shape.form
        row = self.rows.get(d.id)
        undo = row is not None and (
            (form == "lease" and row.holder == d.number)
            or form == "advisory"
            or self.shape.counts_at_claim
        )
        self.give_back(d)
        if undo and row is not None and row.attempt is not None:
            row.attempt -= 1
            if self.shape.counts_at_claim:
                row.retry_after = "none"

    def extend(self, d: Delivery) -> bool:
        """Lease: move a held lease forward (a new token); False once the row holds another."""
        assert self.shape.form == "lease"
        row = self.rows.get(d.id)
        return row is not None and row.lease == "held" and row.holder == d.number

    def end_batch(self, worker: int) -> None:
        """Row lock: COMMIT; unsettled deliveries were given back, their rows return unchanged."""
        batch = self._batches.pop(worker)
        for d in batch.deliveries:
            if d.state == "open":
                d.state = "given_back"
        self.writes.extend(batch.writes)

    def abort_batch(self, worker: int) -> None:
        """Row lock: ROLLBACK; every settlement of the batch is undone and its rows return."""
        batch = self._batches.pop(worker)
        for row_id, (row, dead_row) in batch.before.items():
            _put(self.rows, row_id, row)
            _put(self.dead, row_id, dead_row)
        for d in batch.deliveries:
            if d.state == "open":
                d.state = "given_back"

    # ------------------------------------------------------------------ the test's own SQL

    def expire_lease(self, row_id: int) -> None:
        """Time passes beyond a held lease (the test moves locked_until into the past).

        Moving locked_until rewrites the token, so the delivery that held it loses it at once
        (its settlement raises LeaseLost) even before another claim takes the row; a lease
        that really ran out keeps its token until then. The model follows the test.
        """
        row = self.rows[row_id]
        assert row.lease == "held"
        row.lease, row.holder = "expired", None

    def make_due(self, row_id: int) -> None:
        """Time passes beyond a row's retry_after (the test moves it into the past)."""
        row = self.rows[row_id]
        assert row.retry_after == "future"
        row.retry_after = "due"


def _copy(row: Row | None) -> Row | None:
    return copy.copy(row) if row is not None else None


def _put(table: dict[int, Row], row_id: int, row: Row | None) -> None:
    if row is None:
        table.pop(row_id, None)
    else:
        table[row_id] = copy.copy(row)


def lifecycle(shape: Shape, outcomes: list[str]) -> tuple[str, int]:
    """Where one message ends if its deliveries return ``outcomes`` in turn, and how many
    deliveries it takes: ("finished" | "dead_letter" | "pending", deliveries).

    The concurrency test predicts each message's fate with it (retry_after due at once).
    """
    m = OutcomeModel(shape)
    m.enqueue({})
    for n, outcome in enumerate(outcomes, start=1):
        (d,) = m.claim(0, 1)
        label = m.settle(d, outcome).label
        if shape.form == "row_lock":
            m.end_batch(0)
        if label in ("ack", "drop"):
            return "finished", n
        if label == "dead_letter":
            return "dead_letter", n
    return "pending", len(outcomes)
