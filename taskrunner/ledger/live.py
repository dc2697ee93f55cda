"""What the live pages probe: a marker that moves when their runs move, a run's state.

Cheap reads on primary keys and an index-only count, made on every poll of every open
stream; nothing on the hot path writes for them.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from taskrunner.ledger.records import ACTIVE, not_deleted
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.types import RunStatus


class LiveProbes:
    """The live pages' probes of runs."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def live_marker(self, run_ids: list[int]) -> str:
        """What a live page compares to know that its runs moved: statuses and active units.

        One query on the runs' primary keys and one index-only count over the active
        units of the running ones (``ix_task_run_units_run_status``): a unit starting
        or finishing changes it, without the hot path writing anything for the pages.
        """
        if not run_ids:
            return "-"
        runs = self.session.execute(
            select(TaskRun.id, TaskRun.status, TaskRun.updated_at)
            .where(TaskRun.id.in_(run_ids))
            .order_by(TaskRun.id)
        ).all()
        running = [row.id for row in runs if row.status == RunStatus.RUNNING]
        active: list[Any] = []
        if running:
            active = self.session.execute(
                select(TaskRunUnit.task_run_id, TaskRunUnit.status, func.count())
                .where(
                    TaskRunUnit.task_run_id.in_(running),
                    TaskRunUnit.status.in_(ACTIVE),
                    not_deleted(TaskRunUnit),
                )
                .group_by(TaskRunUnit.task_run_id, TaskRunUnit.status)
                .order_by(TaskRunUnit.task_run_id, TaskRunUnit.status)
            ).all()
        parts = [f"{row.id}:{row.status}:{row.updated_at.isoformat()}" for row in runs]
        parts += [f"{run_id}/{status}={n}" for run_id, status, n in active]
        return ";".join(parts)

    def newest_run_id(self) -> int:
        return self.session.execute(select(func.max(TaskRun.id))).scalar_one() or 0

    def run_ids_of(self, uuids: list[str]) -> list[int]:
        if not uuids:
            return []
        return list(
            self.session.execute(
                select(TaskRun.id).where(TaskRun.uuid.in_([u.lower() for u in uuids]))
            ).scalars()
        )

    def run_state(self, run_id: int) -> tuple[str, datetime | None]:
        """A run's status and finish time ("gone" once it is pruned)."""
        row = self.session.execute(
            select(TaskRun.status, TaskRun.finished_at).where(TaskRun.id == run_id)
        ).one_or_none()
        return (row.status, row.finished_at) if row else ("gone", None)
