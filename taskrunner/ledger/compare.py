"""Two runs compared unit by unit: newly failing, recovered, still failing.

Set-based and driven by failed units. The three counts are one statement: still failing
joins the two runs' failed units, newly failing is the rest of this run's, and recovered
walks the other run's failed units to find each key in this run through the unique
(run, key) index. The lists are the first ``limit`` units of each set, read a window of
the driving run's failed units at a time (``group_windows``); the streak of a still
failing unit (for how many runs of the type in a row it failed) is read for those listed
units only, and the new error groups are this run's groups under a reason the other run
has no group for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select
from sqlalchemy.orm import Session, aliased

from database import utcnow
from taskrunner.ledger.errors import ErrorReads
from taskrunner.ledger.group_windows import in_windows
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
    # Every new group, the 50 biggest listed or not.
    new_groups_count: int


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
        """(this run's unit, the other run's unit) pairs, walked from ``driving``'s failures;
        the statement, this run's alias, the other's, and the driving one's."""
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
        return stmt, mine, theirs, base

    def _changed(self, stmt: Any, base: Any, driving: TaskRun, count: int, limit: int) -> Changed:
        """The first ``limit`` pairs of ``stmt`` in the driving run's id order, read a window
        of its failed units at a time: the planner, who cannot tell how many of them pair
        up, would join every failed unit of both runs and sort them to list 50."""
        if not count:
            return Changed()

        def read(after: int, upper: int | None, wanted: int) -> list[Any]:
            window = stmt.where(base.id > after)
            if upper is not None:
                window = window.where(base.id <= upper)
            return self.session.execute(window.order_by(base.id).limit(wanted)).all()

        rows = in_windows(self.session, driving.id, 0, limit, read)
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

    def tally(self, run: TaskRun, other: TaskRun) -> tuple[int, int, int]:
        """(newly failing, still failing, recovered), in one statement.

        Still failing joins the two runs' failed units (a hash of a few thousand keys);
        newly failing is the rest of the run's failed units, so only the recovered walk
        the other run's failures to look up each key in this run.
        """
        mine, theirs = aliased(TaskRunUnit), aliased(TaskRunUnit)
        failed = self._count(
            select(mine.id).where(
                mine.task_run_id == run.id, mine.status == FAILED, not_deleted(mine)
            )
        )
        still = self._count(
            select(mine.id)
            .join(
                theirs,
                and_(
                    theirs.task_run_id == other.id,
                    theirs.unit_key == mine.unit_key,
                    theirs.status == FAILED,
                    not_deleted(theirs),
                ),
            )
            .where(mine.task_run_id == run.id, mine.status == FAILED, not_deleted(mine))
        )
        healed, mine_b, _theirs, _base = self._pairs(run, other, other)
        recovered = self._count(healed.where(mine_b.status == COMPLETED))
        found = self.session.execute(select(failed, still, recovered)).one()
        return found[0] - found[1], found[1], found[2]

    def counts(self, run: TaskRun, other: TaskRun) -> tuple[int, int]:
        """(newly failing, recovered): what the run page says of the comparison."""
        newly, _still, recovered = self.tally(run, other)
        return newly, recovered

    def _count(self, stmt: Any) -> Any:
        return select(func.count()).select_from(stmt.order_by(None).subquery()).scalar_subquery()

    def compare(self, run: TaskRun, other: TaskRun, limit: int = LIST_CAP) -> Comparison:
        newly_n, still_n, recovered_n = self.tally(run, other)
        failing, _mine, theirs, base = self._pairs(run, other, run)
        newly = self._changed(
            failing.where(theirs.status.is_distinct_from(FAILED)), base, run, newly_n, limit
        )
        still = self._changed(failing.where(theirs.status == FAILED), base, run, still_n, limit)
        healed, mine, _theirs, base = self._pairs(run, other, other)
        recovered = self._changed(
            healed.where(mine.status == COMPLETED), base, other, recovered_n, limit
        )
        self._streaks(run, still.units)
        new_groups = self.errors.error_groups(run, new_since=other)
        now = utcnow()
        durations = (_seconds(run, now), _seconds(other, now))
        throughputs = (_per_minute(run, durations[0]), _per_minute(other, durations[1]))
        return Comparison(
            run,
            other,
            newly,
            recovered,
            still,
            new_groups,
            durations,
            throughputs,
            self.errors.count_groups(run, new_since=other),
        )

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
