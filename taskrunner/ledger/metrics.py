"""The ledger's reads behind ``GET /metrics``, computed at scrape time.

Every figure is read from the ledger when Prometheus asks, so no process keeps a count
that another would have to add to its own (any number of gunicorn workers and hosts
answer the same). Each is a gauge of what the ledger holds now, never a counter: the
prune deletes old runs, and a count that falls is not a Prometheus counter.

A scrape costs the same at 1,000,000 units as at 1,000 (the cost follows the running
runs' active and failed units, not the ledger's size); no read scans ``task_run_units``:

- **Runs** by type and status, with the newest close per type and closing status and
  the closed runs' unit snapshots: one pass over ``task_runs`` (bounded by retention).
- **Active units**: the pending and running units of running runs, grouped by type,
  status and stale reason (the stale rules of ``stale_rules``, as the pages judge them)
  with the oldest ``queued_at``: one pass over the partial index of active units. The
  stale units per reason and each queue's pending units and oldest pending one come
  from it, so the scrape reads those rows once, not three times.
- **Units** by type and status, of every run the ledger keeps: a closed run's units
  are its snapshot columns (``units_completed/failed/skipped``, reconciled from its unit
  rows at the close), so the units of closed runs cost nothing more. A running run's
  active units are above, its failed and skipped ones are counted on
  ``ix_task_run_units_run_status``, and its completed ones are ``units_total`` less all
  those: a run's units never change in number once it is created (``units_total`` is
  written with them; a close rewrites it with the same count).
- **Run durations** of the runs closed in the last 24 h (``ix_task_runs_finished_at``),
  bucketed in SQL. A duration is from the run's start to its (last) close, so a run an
  operator retried counts the time it waited, closed, for the retry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import Row, case, extract, func, select, union_all
from sqlalchemy.orm import Session

from database import is_sqlite
from taskrunner.ledger.records import ACTIVE, RUN_STATUSES
from taskrunner.ledger.schedule_reads import BY_SCHEDULER
from taskrunner.ledger.stale_rules import (
    NEVER_STARTED,
    RUNNING_TOO_LONG,
    WORKER_LOST,
    joined_cutoffs,
    stale_reason,
)
from taskrunner.models import ScheduleSlot, TaskRun, TaskRunUnit
from taskrunner.types import RunStatus, UnitStatus

STALE_REASONS = (WORKER_LOST, RUNNING_TOO_LONG, NEVER_STARTED)
CLOSED_STATUSES = tuple(s for s in RUN_STATUSES if s != RunStatus.RUNNING)
DURATION_WINDOW = timedelta(hours=24)
# Upper bounds of the run-duration buckets, in seconds: from a one-unit run to a day.
DURATION_BOUNDS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400)


@dataclass(frozen=True, slots=True)
class RunGroup:
    """The runs of one type in one status: how many, their units, their newest close."""

    type: str
    status: str
    runs: int
    last_finished_at: datetime | None
    units_completed: int
    units_failed: int
    units_skipped: int


@dataclass(frozen=True, slots=True)
class Durations:
    """Durations of the runs of one type that closed in one status in the window.

    ``buckets[i]`` counts the runs that took at most ``DURATION_BOUNDS[i]`` seconds
    (cumulative, as Prometheus buckets are); ``count`` is every run, ``+Inf`` included.
    """

    type: str
    status: str
    buckets: tuple[int, ...]
    count: int
    total_seconds: float


@dataclass(frozen=True, slots=True)
class ActiveUnits:
    """Pending or running units of running runs: one type, one status, one stale reason."""

    type: str
    status: str
    stale_reason: str | None
    count: int
    oldest_queued_at: datetime | None


def stale_counts(active: list[ActiveUnits]) -> dict[str, int]:
    """Stale units per reason, every reason present (0 when none)."""
    counts = dict.fromkeys(STALE_REASONS, 0)
    for group in active:
        if group.stale_reason is not None:
            counts[group.stale_reason] += group.count
    return counts


class LedgerMetrics:
    """What a scrape reads of the ledger tables, over one session, as of ``now``."""

    def __init__(self, session: Session, now: datetime) -> None:
        self.session = session
        self.now = now

    def run_groups(self) -> list[RunGroup]:
        """Every (type, status) of the kept runs, with the closed runs' unit snapshots."""
        rows = self.session.execute(
            select(
                TaskRun.type,
                TaskRun.status,
                func.count(),
                func.max(TaskRun.finished_at),
                func.sum(TaskRun.units_completed),
                func.sum(TaskRun.units_failed),
                func.sum(TaskRun.units_skipped),
            )
            .where(TaskRun.deleted_at.is_(None))
            .group_by(TaskRun.type, TaskRun.status)
        ).all()
        return [
            RunGroup(
                type_,
                status,
                runs,
                finished if status != RunStatus.RUNNING else None,
                int(completed or 0),
                int(failed or 0),
                int(skipped or 0),
            )
            for type_, status, runs, finished, completed, failed, skipped in rows
        ]

    def active_units(self) -> list[ActiveUnits]:
        """The active units of running runs by type, status and stale reason (or None)."""
        cut = joined_cutoffs(self.session, self.now)
        reason = stale_reason(cut)
        rows = self.session.execute(
            select(
                TaskRun.type,
                TaskRunUnit.status,
                reason,
                func.count(),
                func.min(TaskRunUnit.queued_at),
            )
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRun.status == RunStatus.RUNNING,
                TaskRun.deleted_at.is_(None),
                TaskRunUnit.deleted_at.is_(None),
                TaskRunUnit.status.in_(ACTIVE),
            )
            .group_by(TaskRun.type, TaskRunUnit.status, reason)
        ).all()
        return [
            ActiveUnits(type_, status, str(why) if why is not None else None, n, oldest)
            for type_, status, why, n, oldest in rows
        ]

    def units(
        self, groups: list[RunGroup], active: list[ActiveUnits]
    ) -> dict[tuple[str, str], int]:
        """Units of the kept runs per (type, unit status), from what was read just before."""
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for group in groups:
            if group.status != RunStatus.RUNNING:
                counts[(group.type, UnitStatus.COMPLETED)] += group.units_completed
                counts[(group.type, UnitStatus.FAILED)] += group.units_failed
                counts[(group.type, UnitStatus.SKIPPED)] += group.units_skipped
        running = {
            run_id: (type_, total)
            for run_id, type_, total in self.session.execute(
                select(TaskRun.id, TaskRun.type, TaskRun.units_total).where(
                    TaskRun.status == RunStatus.RUNNING, TaskRun.deleted_at.is_(None)
                )
            )
        }
        # The rest of a running run's units are its completed ones: start from the total.
        for type_, total in running.values():
            counts[(type_, UnitStatus.COMPLETED)] += total
        for group in active:
            counts[(group.type, group.status)] += group.count
            counts[(group.type, UnitStatus.COMPLETED)] -= group.count
        if running:
            # No ``deleted_at`` test: a unit row is never hidden apart from its run, and
            # without it the count reads the index alone.
            for run_id, status, n in self.session.execute(
                select(TaskRunUnit.task_run_id, TaskRunUnit.status, func.count())
                .where(
                    TaskRunUnit.task_run_id.in_(list(running)),
                    TaskRunUnit.status.in_((UnitStatus.FAILED, UnitStatus.SKIPPED)),
                )
                .group_by(TaskRunUnit.task_run_id, TaskRunUnit.status)
            ):
                type_ = running[run_id][0]
                counts[(type_, status)] += n
                counts[(type_, UnitStatus.COMPLETED)] -= n
        return {(type_, str(status)): max(0, n) for (type_, status), n in counts.items()}

    def run_durations(self) -> list[Durations]:
        """Durations of the runs closed in the last 24 h, per type and closing status."""
        if is_sqlite(self.session):
            seconds = (func.julianday(TaskRun.finished_at) - func.julianday(TaskRun.started_at)) * (
                86400.0
            )
        else:
            seconds = extract("epoch", TaskRun.finished_at - TaskRun.started_at)
        buckets = [func.sum(case((seconds <= bound, 1), else_=0)) for bound in DURATION_BOUNDS]
        rows = self.session.execute(
            select(TaskRun.type, TaskRun.status, func.count(), func.sum(seconds), *buckets)
            .where(
                TaskRun.finished_at >= self.now - DURATION_WINDOW,
                TaskRun.status.in_(CLOSED_STATUSES),
                TaskRun.deleted_at.is_(None),
            )
            .group_by(TaskRun.type, TaskRun.status)
        ).all()
        return [
            Durations(
                type_,
                status,
                tuple(int(n or 0) for n in counts),
                count,
                max(0.0, float(total or 0)),
            )
            for type_, status, count, total, *counts in rows
        ]

    def last_success(self, names: Iterable[str], scheduled: bool = False) -> dict[str, Row]:
        """Each of ``names``' newest slot that ran without raising: ``slot``, ``finished_at``;
        ``scheduled``: the newest a scheduler ran (an operator's run now is none).

        Missed and paused rows are no run, and a slot still running has not succeeded yet.
        """
        scheduler = [BY_SCHEDULER] if scheduled else []
        looks = [
            select(ScheduleSlot.name, ScheduleSlot.slot, ScheduleSlot.finished_at)
            .where(ScheduleSlot.name == name, ScheduleSlot.outcome == "ok", *scheduler)
            .order_by(ScheduleSlot.slot.desc())
            .limit(1)
            .subquery()
            .select()
            for name in names
        ]
        if not looks:
            return {}
        return {row.name: row for row in self.session.execute(union_all(*looks))}
