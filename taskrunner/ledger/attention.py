"""Reads of the on-call console's attention signals.

Attention signals (stale units, runs failed in the last 24 h), the run list's stale
and "retried" columns and a run's idle time. They are shown on every page (the
navigation badges) or on the busiest one (the run list), so each is one indexed
query whose cost does not grow with the ledger: the badges read only active units (a
partial index) and recently finished runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from database import utcnow
from taskrunner.ledger.records import not_deleted
from taskrunner.ledger.runs import recently_failed
from taskrunner.ledger.stale_rules import joined_cutoffs, stale_filter, stale_in_running_runs
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.types import RunStatus

CLOSING_EVENTS = ("tasks.run.completed", "tasks.run.failed")


@dataclass(frozen=True, slots=True)
class Attention:
    stale_units: int
    failed_runs: int


class AttentionReads:
    """Badges, the run list's extra columns, idle time."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def attention(self, now: datetime | None = None) -> Attention:
        """What the navigation badges count: stale units, runs failed in the last 24 h."""
        now = now or utcnow()
        stale = self.session.execute(
            select(func.count())
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(*stale_in_running_runs(joined_cutoffs(self.session, now)))
        ).scalar_one()
        failed = self.session.execute(
            select(func.count()).select_from(TaskRun).where(*recently_failed(now))
        ).scalar_one()
        return Attention(stale_units=stale, failed_runs=failed)

    def stale_per_run(self, runs: list[TaskRun], now: datetime | None = None) -> dict[int, int]:
        """Stale units of the running runs among ``runs`` (a closed run has none)."""
        running = [run.id for run in runs if run.status == RunStatus.RUNNING]
        if not running:
            return {}
        cut = joined_cutoffs(self.session, now or utcnow())
        rows = self.session.execute(
            select(TaskRunUnit.task_run_id, func.count())
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.task_run_id.in_(running), not_deleted(TaskRunUnit), stale_filter(cut)
            )
            .group_by(TaskRunUnit.task_run_id)
        ).all()
        return {run_id: n for run_id, n in rows}

    def retried_runs(self, runs: list[TaskRun]) -> dict[int, int]:
        """How many times each of ``runs`` was retried by an operator (absent: never)."""
        if not runs:
            return {}
        rows = self.session.execute(
            select(OperatorAction.task_run_id, func.count())
            .where(
                OperatorAction.task_run_id.in_([run.id for run in runs]),
                OperatorAction.action == "retry",
            )
            .group_by(OperatorAction.task_run_id)
        ).all()
        return {run_id: n for run_id, n in rows}

    def idle_seconds(self, run: TaskRun) -> float:
        """Time a run spent closed before an operator retried it (not part of its duration).

        A retry reopens a closed run; the gap from the close (its closing event) to
        the retry is idle time, however long the operator took to look.
        """
        return self.idle_by_run([run.id]).get(run.id, 0.0)

    def idle_by_run(self, run_ids: list[int]) -> dict[int, float]:
        """``idle_seconds`` of several runs in two queries (only retried runs have any)."""
        if not run_ids:
            return {}
        retries: dict[int, list[datetime]] = {}
        for run_id, at in self.session.execute(
            select(OperatorAction.task_run_id, OperatorAction.created_at)
            .where(OperatorAction.task_run_id.in_(run_ids), OperatorAction.action == "retry")
            .order_by(OperatorAction.id)
        ):
            retries.setdefault(run_id, []).append(at)
        if not retries:
            return {}
        closes: dict[int, list[datetime]] = {}
        for run_id, at in self.session.execute(
            select(OutboxEvent.task_run_id, OutboxEvent.created_at)
            .where(
                OutboxEvent.task_run_id.in_(list(retries)),
                OutboxEvent.name.in_(CLOSING_EVENTS),
            )
            .order_by(OutboxEvent.id)
        ):
            closes.setdefault(run_id, []).append(at)
        idle: dict[int, float] = {}
        for run_id, retried_at in retries.items():
            left, total = closes.get(run_id, []), 0.0
            for at in retried_at:
                before = [c for c in left if c <= at]
                if before:
                    # A stale retry of a running run follows no close: it adds nothing.
                    total += (at - before[-1]).total_seconds()
                    left = [c for c in left if c > at]
            idle[run_id] = total
        return idle
