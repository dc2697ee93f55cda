"""Reads of the on-call console's attention signals, part of the ledger.

Attention signals (stale units, runs failed in the last 24 h), the run list's stale
and "retried" columns, the throughput strip and a run's active duration. They are
shown on every page (the navigation badges) or on the busiest one (the run list), so
each is one indexed query whose cost does not grow with the ledger: the badges read
only active units (a partial index) and recently finished runs, the strip reads
the per-minute roll-up (``unit_throughput``) plus the units finished since its last
minute (``ix_task_run_units_finished``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, select

from database import is_sqlite, utcnow
from taskrunner.ledger.base import LedgerBase
from taskrunner.ledger.records import ACTIVE
from taskrunner.ledger.stale_rules import (
    joined_cutoffs,
    stale_filter,
    stale_in_running_runs,
)
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit, UnitThroughput
from taskrunner.types import RunStatus, UnitStatus

FAILED_RUN = (str(RunStatus.FAILED), str(RunStatus.COMPLETED_WITH_FAILURES))
CLOSING_EVENTS = ("tasks.run.completed", "tasks.run.failed")
ATTENTION_WINDOW = timedelta(hours=24)
# A roll-up this far behind is caught up by the page that finds it (once), rather
# than counting hours of units live on every read.
ROLL_BEHIND = timedelta(minutes=5)
logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Attention:
    stale_units: int
    failed_runs: int


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class Throughput:
    """Units finished per minute over the last hour and per hour over the last 24 h."""

    now: datetime
    minutes: list[Bucket]
    hours: list[Bucket]

    @property
    def last_hour(self) -> tuple[int, int]:
        return sum(b.completed for b in self.minutes), sum(b.failed for b in self.minutes)

    @property
    def last_day(self) -> tuple[int, int]:
        return sum(b.completed for b in self.hours), sum(b.failed for b in self.hours)


def _floor_minute(moment: datetime) -> datetime:
    return moment.replace(second=0, microsecond=0)


class AttentionReads(LedgerBase):
    """Badges, the run list's extra columns, the throughput strip, active durations.

    The strip catches up the roll-up through ``ThroughputRollup`` (the composed ledger).
    """

    def recently_failed_runs(self, now: datetime | None = None):
        """The clause of runs that closed with failures in the last 24 h."""
        since = (now or utcnow()) - ATTENTION_WINDOW
        return (
            TaskRun.status.in_(FAILED_RUN),
            TaskRun.finished_at >= since,
            TaskRun.deleted_at.is_(None),
        )

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
            select(func.count()).select_from(TaskRun).where(*self.recently_failed_runs(now))
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
                TaskRunUnit.task_run_id.in_(running),
                TaskRunUnit.deleted_at.is_(None),
                stale_filter(cut),
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

    def throughput(self, now: datetime | None = None) -> Throughput:
        """Units completed and failed per minute (last hour) and per hour (last 24 h).

        Rolled minutes come from the per-minute roll-up (``unit_throughput``, which the
        periodic ``taskrunner.roll_throughput`` keeps current); the minutes after the
        last roll are counted live from the units. A roll that is behind (no consumer
        ran the periodic task) is caught up here first, once, so a read costs at most
        1,440 summary rows and a few minutes of units, whatever the ledger's size.
        """
        now = _floor_minute(now or utcnow())
        end = now + timedelta(minutes=1)
        day_start = end - timedelta(hours=24)
        rolled_to = self.last_rolled_minute()
        if rolled_to is None or rolled_to < now - ROLL_BEHIND:
            try:
                self.roll_throughput(now)
            except Exception:  # a page never fails for its summary: it counts live
                self.session.rollback()
                logger.warning("Could not catch up the throughput roll-up", exc_info=True)
            rolled_to = self.last_rolled_minute()
        per_minute: dict[datetime, list[int]] = {}
        if rolled_to is not None:
            stored = self.session.execute(
                select(
                    UnitThroughput.minute,
                    func.sum(UnitThroughput.completed),
                    func.sum(UnitThroughput.failed),
                )
                .where(UnitThroughput.minute >= day_start, UnitThroughput.minute <= rolled_to)
                .group_by(UnitThroughput.minute)
            ).all()
            for minute, completed, failed in stored:
                per_minute[minute] = [int(completed), int(failed)]
        live_from = max(day_start, rolled_to + timedelta(minutes=1)) if rolled_to else day_start
        per_minute.update(self._finished_per_minute(live_from, end))
        minutes = []
        for i in range(60):
            start = now - timedelta(minutes=59 - i)
            done, failed = per_minute.get(start, (0, 0))
            minutes.append(Bucket(start, done, failed))
        hour_now = now.replace(minute=0)
        by_hour: dict[datetime, list[int]] = {}
        for at, (done, failed) in per_minute.items():
            slot = by_hour.setdefault(at.replace(minute=0), [0, 0])
            slot[0] += done
            slot[1] += failed
        hours = []
        for i in range(24):
            start = hour_now - timedelta(hours=23 - i)
            done, failed = by_hour.get(start, (0, 0))
            hours.append(Bucket(start, done, failed))
        return Throughput(now=now, minutes=minutes, hours=hours)

    def _finished_per_minute(self, start: datetime, end: datetime) -> dict[datetime, list[int]]:
        """Units completed and failed per minute in [start, end), from the unit rows."""
        if start >= end:
            return {}
        finished = TaskRunUnit.finished_at
        if is_sqlite(self.session):
            minute = func.strftime("%Y-%m-%d %H:%M", finished)
        else:
            minute = func.to_char(func.date_trunc("minute", finished), "YYYY-MM-DD HH24:MI")
        rows = self.session.execute(
            select(minute, TaskRunUnit.status, func.count())
            .where(
                finished >= start,
                finished < end,
                TaskRunUnit.status.in_((UnitStatus.COMPLETED, UnitStatus.FAILED)),
            )
            .group_by(minute, TaskRunUnit.status)
        ).all()
        per_minute: dict[datetime, list[int]] = {}
        for label, status, n in rows:
            slot = per_minute.setdefault(datetime.strptime(label, "%Y-%m-%d %H:%M"), [0, 0])
            slot[0 if status == UnitStatus.COMPLETED else 1] += n
        return per_minute

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
                    TaskRunUnit.deleted_at.is_(None),
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
            self.session.execute(select(TaskRun.id).where(TaskRun.uuid.in_(uuids))).scalars()
        )

    def run_state(self, run_id: int) -> tuple[str, datetime | None]:
        """A run's status and finish time ("gone" once it is pruned)."""
        row = self.session.execute(
            select(TaskRun.status, TaskRun.finished_at).where(TaskRun.id == run_id)
        ).one_or_none()
        return (row.status, row.finished_at) if row else ("gone", None)
