"""One error group's units of a run, read a window of failed units at a time, in id order.

An error group is a fold of each failed unit's reason (``reason_fold``): no index
finds it, and the planner, who cannot tell how many failed units a group holds, reads
every failed unit of the run and sorts them to show one page (25,000 rows of a
100,000-unit run). Walking the failed units in id order instead, a
window at a time (its bound read from the index, each window four times the last),
stops as soon as the page is full: a big group costs a window, a rare one a few.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from taskrunner.ledger.records import not_deleted
from taskrunner.models import TaskRunUnit
from taskrunner.types import UnitStatus

FIRST_WINDOW = 1_000

# read(after, upper, wanted): at most ``wanted`` rows with after < id <= upper (upper
# None: to the end), in id order.
Read = Callable[[int, int | None, int], list[Any]]


def in_windows(session: Session, run_id: int, after: int, wanted: int, read: Read) -> list[Any]:
    """Up to ``wanted`` rows of ``read`` past id ``after``, window by window."""
    rows: list[Any] = []
    window = FIRST_WINDOW
    while len(rows) < wanted:
        upper = session.execute(
            select(TaskRunUnit.id)
            .where(
                TaskRunUnit.task_run_id == run_id,
                TaskRunUnit.status == UnitStatus.FAILED,
                not_deleted(TaskRunUnit),
                TaskRunUnit.id > after,
            )
            .order_by(TaskRunUnit.id)
            .offset(window - 1)
            .limit(1)
        ).scalar_one_or_none()
        rows += read(after, upper, wanted - len(rows))
        if upper is None:
            break
        after, window = upper, window * 4
    return rows
