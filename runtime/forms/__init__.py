"""Claim and settle per claim form: row_lock.py, lease.py, advisory.py, one job each."""

from __future__ import annotations

from runtime.forms.advisory import AdvisoryForm
from runtime.forms.base import Form, Upkeep
from runtime.forms.lease import LeaseForm
from runtime.forms.row_lock import RowLockForm
from runtime.loaded import LoadedQueue

FORMS: dict[str, type[Form]] = {
    "row_lock": RowLockForm,
    "lease": LeaseForm,
    "advisory": AdvisoryForm,
}


def form_for(
    queue: LoadedQueue, transactional: bool = False, keyspace: str = "", spread: int = 4
) -> Form:
    """The form object that claims and settles this queue's rows (``spread``: the workers)."""
    return FORMS[queue.form](queue, transactional=transactional, keyspace=keyspace, spread=spread)


__all__ = ["FORMS", "AdvisoryForm", "Form", "LeaseForm", "RowLockForm", "Upkeep", "form_for"]
