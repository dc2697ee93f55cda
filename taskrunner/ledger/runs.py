"""Reads of runs and of one run: the run list, counts, units, events and actions.

Every list is keyset-paginated (``id < cursor`` newest first, or ``id > cursor``
within a run), so page 5,000 costs what page 1 costs. Cursors are opaque to
callers: a run list continues after a run uuid, a unit list after a unit key,
never after an internal id.
"""

from __future__ import annotations

import uuid as uuid_lib
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, select

from database import iso, utcnow
from taskrunner.ledger.base import LedgerBase
from taskrunner.ledger.records import ACTIVE
from taskrunner.ledger.stale_rules import (
    StaleCutoffs,
    paused_type_names,
    stale_cutoffs,
    stale_filter,
    stale_reason,
)
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.registry import registry
from taskrunner.types import RunStatus, UnitStatus

RUN_STATUSES = tuple(str(s) for s in RunStatus)
UNIT_STATUSES = tuple(str(s) for s in UnitStatus)


class InvalidCursor(ValueError):
    """A cursor that does not name a row of this list."""


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Any]
    next_cursor: str | None


def is_uuid(value: Any) -> bool:
    try:
        return str(uuid_lib.UUID(str(value))) == str(value).lower()
    except (ValueError, AttributeError, TypeError):
        return False


class RunReads(LedgerBase):
    """The run list and one run's pages."""

    # -- run list --------------------------------------------------------------------

    def run_id_for_cursor(self, cursor: str) -> int:
        if not is_uuid(cursor):
            raise InvalidCursor("not a run cursor")
        found = self.session.execute(
            select(TaskRun.id).where(TaskRun.uuid == cursor)
        ).scalar_one_or_none()
        if found is None:
            raise InvalidCursor("the cursor names no run")
        return found

    def runs_page(
        self,
        limit: int = 50,
        type_: str | None = None,
        status: str | None = None,
        cursor: str | None = None,
        failed_recently: bool = False,
    ) -> Page:
        """Runs newest first; an unknown status or type is simply an empty page."""
        stmt = select(TaskRun).where(TaskRun.deleted_at.is_(None))
        if failed_recently:
            stmt = stmt.where(*self.recently_failed_runs())
        if type_:
            stmt = stmt.where(TaskRun.type == type_)
        if status:
            stmt = stmt.where(TaskRun.status == status)
        if cursor:
            stmt = stmt.where(TaskRun.id < self.run_id_for_cursor(cursor))
        rows = list(
            self.session.execute(stmt.order_by(TaskRun.id.desc()).limit(limit + 1)).scalars()
        )
        more = len(rows) > limit
        rows = rows[:limit]
        return Page(rows, rows[-1].uuid if more and rows else None)

    def run_types(self, current: str | None = None) -> list[str]:
        """Types for the filter: the registered ones (a DISTINCT over every run would grow)."""
        return sorted(set(registry.types()) | ({current} if current else set()))

    def live_counts(self, runs: list[TaskRun]) -> dict[int, dict[str, int]]:
        """Unit counts per run: one grouped query for the running ones, snapshots otherwise."""
        counts: dict[int, dict[str, int]] = {}
        running = [run.id for run in runs if run.status == RunStatus.RUNNING]
        live: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(UNIT_STATUSES, 0))
        if running:
            rows = self.session.execute(
                select(TaskRunUnit.task_run_id, TaskRunUnit.status, func.count())
                .where(TaskRunUnit.task_run_id.in_(running), TaskRunUnit.deleted_at.is_(None))
                .group_by(TaskRunUnit.task_run_id, TaskRunUnit.status)
            ).all()
            for run_id, status, n in rows:
                live[run_id][status] = n
        for run in runs:
            if run.status == RunStatus.RUNNING:
                by_status = live[run.id]
                total = sum(by_status.values())
                counts[run.id] = {"total": total, **by_status}
            else:
                counts[run.id] = {
                    "total": run.units_total,
                    "pending": 0,
                    "running": 0,
                    "completed": run.units_completed,
                    "failed": run.units_failed,
                    "skipped": run.units_skipped,
                }
        return counts

    def _cutoffs_of(self, run: TaskRun, now: datetime | None) -> StaleCutoffs:
        """The stale rule's cutoffs for one run's type (known up front: nothing joined)."""
        return stale_cutoffs(run.type, now or utcnow(), paused_type_names(self.session))

    def run_counts(self, run: TaskRun, now: datetime | None = None) -> dict[str, int]:
        """Counts of one run, with its stale units (only a running run has any)."""
        counts = self.live_counts([run])[run.id]
        stale = 0
        if run.status == RunStatus.RUNNING:
            stale = self.session.execute(
                select(func.count()).where(
                    TaskRunUnit.task_run_id == run.id,
                    TaskRunUnit.deleted_at.is_(None),
                    stale_filter(self._cutoffs_of(run, now)),
                )
            ).scalar_one()
        return {**counts, "stale": stale}

    # -- units of one run ------------------------------------------------------------

    def unit_id_for_cursor(self, run: TaskRun, cursor: str) -> int:
        found = self.session.execute(
            select(TaskRunUnit.id).where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.unit_key == cursor[:191],
                TaskRunUnit.deleted_at.is_(None),
            )
        ).scalar_one_or_none()
        if found is None:
            raise InvalidCursor("the cursor names no unit of this run")
        return found

    def run_units_page(
        self,
        run: TaskRun,
        status: str | None = None,
        stale_only: bool = False,
        limit: int = 50,
        cursor: str | None = None,
        now: datetime | None = None,
    ) -> Page:
        """Units of a run in id order, as unit dicts, with their stale reasons as of ``now``."""
        cut = self._cutoffs_of(run, now)
        reason = stale_reason(cut) if run.status == RunStatus.RUNNING else literal(None)
        stmt = select(TaskRunUnit, reason.label("stale_reason")).where(
            TaskRunUnit.task_run_id == run.id, TaskRunUnit.deleted_at.is_(None)
        )
        if status:
            stmt = stmt.where(TaskRunUnit.status == status)
        if stale_only:
            if run.status != RunStatus.RUNNING:
                return Page([], None)
            stmt = stmt.where(stale_filter(cut))
        if cursor:
            stmt = stmt.where(TaskRunUnit.id > self.unit_id_for_cursor(run, cursor))
        rows = self.session.execute(stmt.order_by(TaskRunUnit.id).limit(limit + 1)).all()
        more = len(rows) > limit
        items = [self.unit_dict(unit, stale_reason) for unit, stale_reason in rows[:limit]]
        return Page(items, items[-1]["unit_key"] if more and items else None)

    def find_unit(
        self, run: TaskRun, unit_key: str, now: datetime | None = None
    ) -> dict[str, Any] | None:
        cut = self._cutoffs_of(run, now)
        reason = stale_reason(cut) if run.status == RunStatus.RUNNING else literal(None)
        row = self.session.execute(
            select(TaskRunUnit, reason.label("stale_reason")).where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.unit_key == unit_key[:191],
                TaskRunUnit.deleted_at.is_(None),
            )
        ).first()
        if row is None:
            return None
        unit, reason_text = row
        return {
            **self.unit_dict(unit, reason_text),
            "queued_at": iso(unit.queued_at),
            "heartbeat_at": iso(unit.heartbeat_at),
            "stuck_notified_at": iso(unit.stuck_notified_at),
            "created_at": iso(unit.created_at),
        }

    def unit_events(self, run: TaskRun, unit_key: str, limit: int = 50) -> list[dict[str, Any]]:
        """Events of the run that name this unit (failures and stuck notices), newest first."""
        rows = self.session.execute(
            select(OutboxEvent)
            .where(
                OutboxEvent.task_run_id == run.id,
                OutboxEvent.name.in_(("tasks.unit.failed", "tasks.unit.stuck")),
                OutboxEvent.payload["unit_key"].as_string() == unit_key,
            )
            .order_by(OutboxEvent.id.desc())
            .limit(limit)
        ).scalars()
        return [self._event_dict(row) for row in rows]

    def run_events(
        self,
        run: TaskRun,
        limit: int = 50,
        cursor: int | None = None,
        names: tuple[str, ...] | None = None,
    ) -> list[dict[str, Any]]:
        stmt = select(OutboxEvent).where(OutboxEvent.task_run_id == run.id)
        if names:
            stmt = stmt.where(OutboxEvent.name.in_(names))
        rows = self.session.execute(stmt.order_by(OutboxEvent.id.desc()).limit(limit)).scalars()
        return [self._event_dict(row) for row in rows]

    def run_actions(self, run: TaskRun, limit: int = 50) -> list[OperatorAction]:
        return list(
            self.session.execute(
                select(OperatorAction)
                .where(OperatorAction.task_run_id == run.id)
                .order_by(OperatorAction.id.desc())
                .limit(limit)
            ).scalars()
        )

    @staticmethod
    def unit_dict(unit: TaskRunUnit, stale_reason: str | None) -> dict[str, Any]:
        return {
            "unit_key": unit.unit_key,
            "tenant_id": unit.tenant_id,
            "status": unit.status,
            "attempts": unit.attempts,
            "last_error": unit.last_error,
            "started_at": iso(unit.started_at),
            "finished_at": iso(unit.finished_at),
            "stale": stale_reason is not None,
            "stale_reason": stale_reason,
        }

    def count_events(self, name: str, run: TaskRun | None = None) -> int:
        stmt = select(func.count()).where(OutboxEvent.name == name)
        if run is not None:
            stmt = stmt.where(OutboxEvent.task_run_id == run.id)
        return self.session.execute(stmt).scalar_one()

    # -- consumers' questions (through the contract) ------------------------------------

    def unit_in_flight(self, type_: str, unit_key: str) -> bool:
        """Whether a unit with this key is pending or running in a running run of this type."""
        found = self.session.execute(
            select(literal(1))
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.unit_key == unit_key,
                TaskRunUnit.status.in_(ACTIVE),
                TaskRunUnit.deleted_at.is_(None),
                TaskRun.type == type_,
                TaskRun.status == RunStatus.RUNNING,
            )
            .limit(1)
        ).first()
        return found is not None


# The worker's hot connection: a process worker's (its main thread's) is checked out
# once (one pre-ping) and kept across units, so the two statements of a unit cost two
