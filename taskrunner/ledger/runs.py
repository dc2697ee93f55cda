"""Reads of runs and of one run: the run list, counts, units, events and actions, and what
the live pages probe.

Every list is keyset-paginated (``id < cursor`` newest first, or ``id > cursor``
within a run), so page 5,000 costs what page 1 costs. Cursors are opaque to
callers: a run list continues after a run uuid, a unit list after a unit key,
never after an internal id.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.orm import Session

from database import iso, utcnow
from taskrunner.delivery import event_dict
from taskrunner.ledger.group_windows import Read, in_windows
from taskrunner.ledger.records import (
    ACTIVE,
    InvalidCursor,
    Page,
    is_uuid,
    not_deleted,
    page_of,
    unit_dict,
)
from taskrunner.ledger.stale_rules import (
    StaleCutoffs,
    paused_type_names,
    stale_cutoffs,
    stale_filter,
    stale_reason,
)
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.registry import registry
from taskrunner.types import Refused, RunStatus, UnitStatus
from taskrunner.unit_rules import key_problem

FAILED_RUN = (str(RunStatus.FAILED), str(RunStatus.COMPLETED_WITH_FAILURES))
ATTENTION_WINDOW = timedelta(hours=24)


def recently_failed(now: datetime | None = None) -> tuple[Any, ...]:
    """The clause of runs that closed with failures in the last 24 h."""
    since = (now or utcnow()) - ATTENTION_WINDOW
    return (TaskRun.status.in_(FAILED_RUN), TaskRun.finished_at >= since, not_deleted(TaskRun))


class RunReads:
    """The run list and one run's pages."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def find_run(self, run_uuid: str) -> TaskRun | None:
        """The run with this uuid (any case); None for a malformed or unknown one."""
        lowered = str(run_uuid).lower()
        if not is_uuid(lowered):
            return None
        return self.session.execute(
            select(TaskRun).where(TaskRun.uuid == lowered, not_deleted(TaskRun))
        ).scalar_one_or_none()

    def get_run(self, run_uuid: str) -> TaskRun:
        run = self.find_run(run_uuid)
        if run is None:
            raise Refused(f"no run {run_uuid}")
        return run

    # -- run list --------------------------------------------------------------------

    def _run_id_for_cursor(self, cursor: str) -> int:
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
        cursor: str | None = None,
        type_: str | None = None,
        status: str | None = None,
        failed_recently: bool = False,
    ) -> Page:
        """Runs newest first; an unknown status or type is simply an empty page.

        Raises ``InvalidCursor``.
        """
        stmt = select(TaskRun).where(not_deleted(TaskRun))
        if failed_recently:
            stmt = stmt.where(*recently_failed())
        if type_:
            stmt = stmt.where(TaskRun.type == type_)
        if status:
            stmt = stmt.where(TaskRun.status == status)
        if cursor:
            stmt = stmt.where(TaskRun.id < self._run_id_for_cursor(cursor))
        rows = list(
            self.session.execute(stmt.order_by(TaskRun.id.desc()).limit(limit + 1)).scalars()
        )
        return page_of(rows, limit, lambda run: run, lambda run: run.uuid)

    @staticmethod
    def run_types(current: str | None = None) -> list[str]:
        """Types for the filter: the registered ones (a DISTINCT over every run would grow)."""
        return sorted(set(registry.types()) | ({current} if current else set()))

    def _cutoffs_of(self, run: TaskRun, now: datetime | None) -> StaleCutoffs:
        """The stale rule's cutoffs for one run's type (known up front: nothing joined)."""
        return stale_cutoffs(run.type, now or utcnow(), paused_type_names(self.session))

    # -- units of one run ------------------------------------------------------------

    def _units_of(self, run: TaskRun, now: datetime | None) -> tuple[Any, StaleCutoffs]:
        """A select of the run's units with their stale reasons (only a running run's are)."""
        cut = self._cutoffs_of(run, now)
        reason = stale_reason(cut) if run.status == RunStatus.RUNNING else literal(None)
        stmt = select(TaskRunUnit, reason.label("stale_reason")).where(
            TaskRunUnit.task_run_id == run.id, not_deleted(TaskRunUnit)
        )
        return stmt, cut

    def run_units_page(
        self,
        run: TaskRun,
        status: str | None = None,
        stale_only: bool = False,
        limit: int = 50,
        cursor: str | None = None,
        now: datetime | None = None,
        reason: str | None = None,
    ) -> Page:
        """Units of a run in id order, as unit dicts, with their stale reasons as of ``now``;
        ``reason``: only the failed units of that error group (its folded reason).

        Raises ``InvalidCursor``.
        """
        stmt, cut = self._units_of(run, now)
        if status:
            stmt = stmt.where(TaskRunUnit.status == status)
        if reason is not None:
            stmt = stmt.where(
                TaskRunUnit.status == UnitStatus.FAILED, TaskRunUnit.reason_fold == reason
            )
        if stale_only:
            if run.status != RunStatus.RUNNING:
                return Page([], None)
            stmt = stmt.where(stale_filter(cut))
        found = None
        if cursor:
            found = self.session.execute(
                select(TaskRunUnit.id).where(
                    TaskRunUnit.task_run_id == run.id,
                    TaskRunUnit.unit_key == cursor[:191],
                    not_deleted(TaskRunUnit),
                )
            ).scalar_one_or_none()
            if found is None:
                raise InvalidCursor("the cursor names no unit of this run")
            stmt = stmt.where(TaskRunUnit.id > found)
        if reason is None:
            rows = self.session.execute(stmt.order_by(TaskRunUnit.id).limit(limit + 1)).all()
        else:
            rows = in_windows(self.session, run.id, found or 0, limit + 1, self._read(stmt))
        return page_of(rows, limit, lambda row: unit_dict(*row), lambda item: item["unit_key"])

    def stale_preview(
        self, run: TaskRun, limit: int, now: datetime | None = None
    ) -> tuple[Page, int]:
        """The run's first ``limit`` stale units and how many it has: the count and the
        first ids come from one pass over the run's active rows, then those rows by id."""
        if run.status != RunStatus.RUNNING:
            return Page([], None), 0
        stmt, cut = self._units_of(run, now)
        # The count runs over the ids alone: a window over whole rows would copy each one.
        first = self.session.execute(
            select(TaskRunUnit.id, func.count().over())
            .where(TaskRunUnit.task_run_id == run.id, not_deleted(TaskRunUnit))
            .where(stale_filter(cut))
            .order_by(TaskRunUnit.id)
            .limit(limit + 1)
        ).all()
        if not first:
            return Page([], None), 0
        rows = self.session.execute(
            stmt.where(TaskRunUnit.id.in_([row[0] for row in first])).order_by(TaskRunUnit.id)
        ).all()
        page = page_of(rows, limit, lambda row: unit_dict(*row), lambda item: item["unit_key"])
        return page, first[0][1]

    def _read(self, stmt: Any) -> Read:
        """``stmt``'s rows in a window of ids (``group_windows``), in id order."""

        def read(after: int, upper: int | None, wanted: int) -> list[Any]:
            bounded = stmt.where(TaskRunUnit.id > after)
            if upper is not None:
                bounded = bounded.where(TaskRunUnit.id <= upper)
            return self.session.execute(bounded.order_by(TaskRunUnit.id).limit(wanted)).all()

        return read

    def find_unit(
        self, run: TaskRun, unit_key: str, now: datetime | None = None
    ) -> dict[str, Any] | None:
        stmt, _cut = self._units_of(run, now)
        row = self.session.execute(stmt.where(TaskRunUnit.unit_key == unit_key[:191])).first()
        if row is None:
            return None
        unit, reason = row
        return unit_dict(
            unit,
            reason,
            queued_at=iso(unit.queued_at),
            heartbeat_at=iso(unit.heartbeat_at),
            stuck_notified_at=iso(unit.stuck_notified_at),
            created_at=iso(unit.created_at),
            stack=list(unit.stack or []) if unit.status == UnitStatus.FAILED else [],
        )

    def unit_id(self, run: TaskRun, unit_key: str) -> int | None:
        """The id of the run's unit with this key (what a consumer names it by)."""
        return self.session.execute(
            select(TaskRunUnit.id).where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.unit_key == unit_key[:191],
                not_deleted(TaskRunUnit),
            )
        ).scalar_one_or_none()

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
        return [event_dict(row) for row in rows]

    def run_events(self, run: TaskRun, limit: int = 50) -> list[dict[str, Any]]:
        """A run's events, newest first."""
        rows = self.session.execute(
            select(OutboxEvent)
            .where(OutboxEvent.task_run_id == run.id)
            .order_by(OutboxEvent.id.desc())
            .limit(limit)
        ).scalars()
        return [event_dict(row) for row in rows]

    def run_actions(self, run: TaskRun, limit: int = 50) -> list[OperatorAction]:
        return list(
            self.session.execute(
                select(OperatorAction)
                .where(OperatorAction.task_run_id == run.id)
                .order_by(OperatorAction.id.desc())
                .limit(limit)
            ).scalars()
        )

    def count_events(self, name: str, run: TaskRun | None = None) -> int:
        stmt = select(func.count()).where(OutboxEvent.name == name)
        if run is not None:
            stmt = stmt.where(OutboxEvent.task_run_id == run.id)
        return self.session.execute(stmt).scalar_one()

    def statuses(self, uuids: Iterable[str]) -> dict[str, str]:
        """The status of each run of ``uuids`` that exists."""
        wanted = sorted(set(uuids))
        if not wanted:
            return {}
        rows = self.session.execute(
            select(TaskRun.uuid, TaskRun.status).where(TaskRun.uuid.in_(wanted))
        )
        return {row.uuid: row.status for row in rows}

    def unit_in_flight(self, type_: str, unit_key: str) -> bool:
        """Whether a unit with this key is pending or running in a running run of ``type_``."""
        if key_problem(unit_key) is not None:
            return False  # no run holds such a key (and PostgreSQL would refuse to compare it)
        found = self.session.execute(
            select(literal(1))
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.unit_key == unit_key,
                TaskRunUnit.status.in_(ACTIVE),
                not_deleted(TaskRunUnit),
                TaskRun.type == type_,
                TaskRun.status == RunStatus.RUNNING,
            )
            .limit(1)
        ).first()
        return found is not None
