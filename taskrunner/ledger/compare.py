"""Two runs compared unit by unit: newly failing, recovered, still failing.

Set-based and driven by failed units: each count is one statement that walks the failed
units of one run (``ix_task_run_units_run_status``) and finds the same key in the other
run through the unique (run, key) index. The lists are the first ``limit`` units of
each set, and the streak of a still failing unit (for how many runs of the type in a row
it failed) is read for those listed units only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session, aliased

from database import utcnow
from taskrunner.ledger.errors import ErrorReads
from taskrunner.ledger.records import not_deleted, unit_dict
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.types import ACTIVE_UNIT, UnitStatus

LIST_CAP = 50
# How far back a still failing unit's streak is followed (older runs are not read).
STREAK_RUNS = 30
FAILED, COMPLETED = str(UnitStatus.FAILED), str(UnitStatus.COMPLETED)


@dataclass(slots=True)
class Changed:
    """One set of units: how many, and the first of them."""

    count: int = 0
    units: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True)
class Comparison:
    run: TaskRun
    other: TaskRun
    newly_failing: Changed
    recovered: Changed
    still_failing: Changed
    new_groups: list[Any]
    # Seconds each run took (so far, for a running one) and units settled per minute.
    durations: tuple[float, float]
    throughputs: tuple[float | None, float | None]


def _seconds(run: TaskRun, now: datetime) -> float:
    return max(0.0, ((run.finished_at or now) - run.started_at).total_seconds())


def _per_minute(run: TaskRun, seconds: float) -> float | None:
    settled = run.units_completed + run.units_failed + run.units_skipped
    return round(settled * 60 / seconds, 1) if seconds > 0 and settled else None


class CompareReads:
    """A run against another of the same type (by default the one before it)."""

    def __init__(self, session: Session, errors: ErrorReads) -> None:
        self.session = session
        self.errors = errors

    def previous_run(self, run: TaskRun) -> TaskRun | None:
        """The newest run of the same type started before this one (``ix_task_runs_type_id``)."""
        return self.session.execute(
            select(TaskRun)
            .where(TaskRun.type == run.type, TaskRun.id < run.id, not_deleted(TaskRun))
            .order_by(TaskRun.id.desc())
            .limit(1)
        ).scalar_one_or_none()

    def _pairs(self, run: TaskRun, other: TaskRun, driving: TaskRun):
        """(this run's unit, the other run's unit) pairs, walked from ``driving``'s failures."""
        mine, theirs = aliased(TaskRunUnit), aliased(TaskRunUnit)
        if driving is run:
            base, joined, join_on = mine, theirs, theirs.task_run_id == other.id
        else:
            base, joined, join_on = theirs, mine, mine.task_run_id == run.id
        stmt = (
            select(mine, theirs.status.label("before"), theirs.last_error.label("before_error"))
            .select_from(base)
            .outerjoin(
                joined,
                and_(join_on, joined.unit_key == base.unit_key, not_deleted(joined)),
            )
            .where(
                base.task_run_id == driving.id,
                base.status == FAILED,
                not_deleted(base),
            )
        )
        return stmt, mine, theirs

    def _changed(self, stmt: Any, order: Any, limit: int) -> Changed:
        count = self._count(stmt)
        if not count:
            return Changed()
        rows = self.session.execute(stmt.order_by(order).limit(limit)).all()
        return Changed(
            count,
            [
                unit_dict(
                    unit,
                    None,
                    previous_status=before,
                    previous_error=before_error,
                    failing_runs=None,
                )
                for unit, before, before_error in rows
            ],
        )

    def counts(self, run: TaskRun, other: TaskRun) -> tuple[int, int]:
        """(newly failing, recovered): what the run page says of the comparison."""
        failing, _mine, theirs = self._pairs(run, other, run)
        healed, mine, _theirs = self._pairs(run, other, other)
        return (
            self._count(failing.where(theirs.status.is_distinct_from(FAILED))),
            self._count(healed.where(mine.status == COMPLETED)),
        )

    def _count(self, stmt: Any) -> int:
        return self.session.execute(
            select(func.count()).select_from(stmt.order_by(None).subquery())
        ).scalar_one()

    def compare(self, run: TaskRun, other: TaskRun, limit: int = LIST_CAP) -> Comparison:
        failing, mine, theirs = self._pairs(run, other, run)
        newly = self._changed(failing.where(theirs.status.is_distinct_from(FAILED)), mine.id, limit)
        still = self._changed(failing.where(theirs.status == FAILED), mine.id, limit)
        healed, mine_b, theirs_b = self._pairs(run, other, other)
        recovered = self._changed(healed.where(mine_b.status == COMPLETED), theirs_b.id, limit)
        self._streaks(run, still.units)
        before = {g.reason for g in self.errors.error_groups(other, limit=500)}
        new_groups = [g for g in self.errors.error_groups(run) if g.reason not in before]
        now = utcnow()
        durations = (_seconds(run, now), _seconds(other, now))
        throughputs = (_per_minute(run, durations[0]), _per_minute(other, durations[1]))
        return Comparison(run, other, newly, recovered, still, new_groups, durations, throughputs)

    def _streaks(self, run: TaskRun, units: list[dict[str, Any]]) -> None:
        """Set ``failing_runs``: how many runs of the type in a row, up to this one, each
        listed unit failed in (followed back ``STREAK_RUNS`` runs at most)."""
        if not units:
            return
        recent = (
            select(TaskRun.id)
            .where(TaskRun.type == run.type, TaskRun.id <= run.id, not_deleted(TaskRun))
            .order_by(TaskRun.id.desc())
            .limit(STREAK_RUNS)
        ).subquery()
        rows = self.session.execute(
            select(TaskRunUnit.unit_key, TaskRunUnit.task_run_id, TaskRunUnit.status)
            .where(
                TaskRunUnit.unit_key.in_([u["unit_key"] for u in units]),
                TaskRunUnit.task_run_id.in_(select(recent.c.id)),
                not_deleted(TaskRunUnit),
            )
            .order_by(TaskRunUnit.task_run_id.desc())
        ).all()
        runs = [
            row[0] for row in self.session.execute(select(recent.c.id).order_by(recent.c.id.desc()))
        ]
        outcome: dict[tuple[str, int], str] = {(key, rid): status for key, rid, status in rows}
        for unit in units:
            streak = 0
            for run_id in runs:
                status = outcome.get((unit["unit_key"], run_id))
                if status in ACTIVE_UNIT:
                    continue  # not settled there yet: neither breaks nor extends the streak
                if status != FAILED:
                    break
                streak += 1
            unit["failing_runs"] = streak
