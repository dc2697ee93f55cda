"""Read queries of the operator pages, part of the ledger (``TaskRunLedger`` inherits them).

Every list is keyset-paginated (``id < cursor`` newest first, or ``id > cursor``
within a run), so page 5,000 costs what page 1 costs. Cursors are opaque to
callers: a run list continues after a run uuid, a unit list after a unit key,
never after an internal id.

Stale predicates are built from the run's type known up front (or joined),
never from a correlated sub-select per unit row, so the planner can use the
per-run status index and the partial index of active units.
"""

from __future__ import annotations

import re
import uuid as uuid_lib
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import and_, case, func, literal, or_, select, text
from sqlalchemy.orm import Session

from database import utcnow
from taskrunner.contract import RunStatus, UnitStatus
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.registry import registry

ACTIVE_STATUSES = (str(UnitStatus.PENDING), str(UnitStatus.RUNNING))
RUN_STATUSES = tuple(str(s) for s in RunStatus)
UNIT_STATUSES = tuple(str(s) for s in UnitStatus)
# Digits vary between otherwise identical reasons ("probe unit 7 failed").
_NUMBERS = re.compile(r"\d+")
TENANT_SAMPLE = 12


class InvalidCursor(ValueError):
    """A cursor that does not name a row of this list."""


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Any]
    next_cursor: str | None


@dataclass(frozen=True, slots=True)
class StaleCutoffs:
    lost: datetime
    too_long: datetime
    never_started: datetime


@dataclass(slots=True)
class ErrorGroup:
    reason: str
    example: str
    count: int
    tenants: int
    tenant_sample: list[int] = field(default_factory=list)
    first_key: str | None = None


def normalize_reason(reason: str | None) -> str:
    return _NUMBERS.sub("#", reason or "")


def is_uuid(value: Any) -> bool:
    try:
        return str(uuid_lib.UUID(str(value))) == str(value).lower()
    except (ValueError, AttributeError, TypeError):
        return False


def _iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") + "Z" if value else None


class LedgerQueries:
    """Page-specific reads over the ledger tables; only the ledger class uses this mixin."""

    session: Session

    # -- stale thresholds ------------------------------------------------------------

    def stale_cutoffs(self, type_: str, now: datetime) -> StaleCutoffs:
        """The one place stale thresholds are computed (SPEC §10), per task type."""
        config = current_app.config
        default_minutes = config["TASK_RUNNER_STUCK_AFTER_MINUTES"]
        minutes = default_minutes
        throttled = False
        definition = registry.find(type_)
        if definition is not None:
            options = definition.options()
            minutes = options.stuck_after_minutes or default_minutes
            throttled = bool(options.rate_per_minute)
        if throttled:
            # A throttled fleet legitimately waits up to its drain horizon.
            never_after = timedelta(
                minutes=max(minutes, config["TASK_RUNNER_RETRY_HORIZON_HOURS"] * 60)
            )
        elif config.get("TASK_RUNNER_NEVER_STARTED_SECONDS"):
            # A deployment may flag lost queued jobs sooner than running ones.
            never_after = timedelta(seconds=config["TASK_RUNNER_NEVER_STARTED_SECONDS"])
        else:
            never_after = timedelta(minutes=minutes)
        return StaleCutoffs(
            lost=now - timedelta(seconds=3 * config["TASK_RUNNER_HEARTBEAT_SECONDS"]),
            too_long=now - timedelta(minutes=minutes),
            never_started=now - never_after,
        )

    def _stale_reason_for(self, cut: StaleCutoffs):
        """The stale reason of a unit of one known type, or NULL."""
        unit = TaskRunUnit
        running = unit.status == UnitStatus.RUNNING
        return case(
            (and_(running, unit.heartbeat_at < cut.lost), literal("worker lost")),
            (and_(running, unit.started_at < cut.too_long), literal("running too long")),
            (
                and_(unit.status == UnitStatus.PENDING, unit.queued_at < cut.never_started),
                literal("never started"),
            ),
            else_=None,
        )

    @staticmethod
    def _stale_filter_for(cut: StaleCutoffs):
        unit = TaskRunUnit
        return or_(
            and_(
                unit.status == UnitStatus.RUNNING,
                or_(unit.heartbeat_at < cut.lost, unit.started_at < cut.too_long),
            ),
            and_(unit.status == UnitStatus.PENDING, unit.queued_at < cut.never_started),
        )

    def _stale_reason_by_type(self, type_column: Any, now: datetime):
        """The stale reason when units of several types are read at once (type joined)."""
        cuts = {d.type(): self.stale_cutoffs(d.type(), now) for d in registry.definitions()}
        default = self.stale_cutoffs("", now)

        def per_type(attr: str):
            whens = [(type_column == t, getattr(c, attr)) for t, c in cuts.items()]
            return case(*whens, else_=getattr(default, attr)) if whens else getattr(default, attr)

        unit = TaskRunUnit
        running = unit.status == UnitStatus.RUNNING
        return case(
            (and_(running, unit.heartbeat_at < default.lost), literal("worker lost")),
            (and_(running, unit.started_at < per_type("too_long")), literal("running too long")),
            (
                and_(unit.status == UnitStatus.PENDING, unit.queued_at < per_type("never_started")),
                literal("never started"),
            ),
            else_=None,
        )

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
    ) -> Page:
        """Runs newest first; an unknown status or type is simply an empty page."""
        stmt = select(TaskRun).where(TaskRun.deleted_at.is_(None))
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

    def run_counts(self, run: TaskRun) -> dict[str, int]:
        """Counts of one run, with its stale units (only a running run has any)."""
        counts = self.live_counts([run])[run.id]
        stale = 0
        if run.status == RunStatus.RUNNING:
            cut = self.stale_cutoffs(run.type, utcnow())
            stale = self.session.execute(
                select(func.count()).where(
                    TaskRunUnit.task_run_id == run.id,
                    TaskRunUnit.deleted_at.is_(None),
                    self._stale_filter_for(cut),
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
    ) -> Page:
        """Units of a run in id order, as unit dicts, with their stale reasons."""
        cut = self.stale_cutoffs(run.type, utcnow())
        reason = self._stale_reason_for(cut) if run.status == RunStatus.RUNNING else literal(None)
        stmt = select(TaskRunUnit, reason.label("stale_reason")).where(
            TaskRunUnit.task_run_id == run.id, TaskRunUnit.deleted_at.is_(None)
        )
        if status:
            stmt = stmt.where(TaskRunUnit.status == status)
        if stale_only:
            if run.status != RunStatus.RUNNING:
                return Page([], None)
            stmt = stmt.where(self._stale_filter_for(cut))
        if cursor:
            stmt = stmt.where(TaskRunUnit.id > self.unit_id_for_cursor(run, cursor))
        rows = self.session.execute(stmt.order_by(TaskRunUnit.id).limit(limit + 1)).all()
        more = len(rows) > limit
        items = [self.unit_dict(unit, stale_reason) for unit, stale_reason in rows[:limit]]
        return Page(items, items[-1]["unit_key"] if more and items else None)

    def find_unit(self, run: TaskRun, unit_key: str) -> dict[str, Any] | None:
        cut = self.stale_cutoffs(run.type, utcnow())
        reason = self._stale_reason_for(cut) if run.status == RunStatus.RUNNING else literal(None)
        row = self.session.execute(
            select(TaskRunUnit, reason.label("stale_reason")).where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.unit_key == unit_key[:191],
                TaskRunUnit.deleted_at.is_(None),
            )
        ).first()
        if row is None:
            return None
        unit, stale_reason = row
        return {
            **self.unit_dict(unit, stale_reason),
            "queued_at": _iso(unit.queued_at),
            "heartbeat_at": _iso(unit.heartbeat_at),
            "stuck_notified_at": _iso(unit.stuck_notified_at),
            "created_at": _iso(unit.created_at),
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

    # -- error groups ----------------------------------------------------------------

    def error_groups(self, run: TaskRun, limit: int = 50) -> list[ErrorGroup]:
        """Failed units grouped by their redacted reason (numbers folded), biggest first."""
        failed = and_(
            TaskRunUnit.task_run_id == run.id,
            TaskRunUnit.status == UnitStatus.FAILED,
            TaskRunUnit.deleted_at.is_(None),
        )
        if self.session.get_bind().dialect.name != "postgresql":
            return self._error_groups_in_python(failed, limit)
        # Grouping tens of thousands of reasons sorts on disk with the default work_mem.
        self.session.execute(text("SET LOCAL work_mem = '32MB'"))
        reason = func.regexp_replace(func.coalesce(TaskRunUnit.last_error, ""), r"\d+", "#", "g")
        grouped = (
            select(
                reason.label("reason"),
                func.min(TaskRunUnit.last_error).label("example"),
                func.count().label("n"),
                func.count(TaskRunUnit.tenant_id.distinct()).label("tenants"),
                func.min(TaskRunUnit.unit_key).label("first_key"),
                func.array_agg(TaskRunUnit.tenant_id.distinct()).label("sample"),
            )
            .where(failed)
            .group_by(reason)
            .order_by(func.count().desc(), reason)
            .limit(limit)
        )
        return [
            ErrorGroup(
                row.reason,
                row.example or "",
                row.n,
                row.tenants,
                [t for t in row.sample if t is not None][:TENANT_SAMPLE],
                row.first_key,
            )
            for row in self.session.execute(grouped)
        ]

    def _error_groups_in_python(self, failed: Any, limit: int) -> list[ErrorGroup]:
        # SQLite has no regexp_replace; the embedded database holds small fleets.
        groups: dict[str, ErrorGroup] = {}
        tenants: dict[str, set[int]] = defaultdict(set)
        rows = self.session.execute(
            select(TaskRunUnit.last_error, TaskRunUnit.tenant_id, TaskRunUnit.unit_key)
            .where(failed)
            .order_by(TaskRunUnit.id)
        )
        for last_error, tenant_id, unit_key in rows:
            key = normalize_reason(last_error)
            group = groups.get(key)
            if group is None:
                group = groups[key] = ErrorGroup(key, last_error or "", 0, 0, [], unit_key)
            group.count += 1
            group.example = min(group.example, last_error or "")
            group.first_key = min(group.first_key or unit_key, unit_key)
            if tenant_id is not None:
                tenants[key].add(tenant_id)
        for key, group in groups.items():
            group.tenants = len(tenants[key])
            group.tenant_sample = sorted(tenants[key])[:TENANT_SAMPLE]
        ordered = sorted(groups.values(), key=lambda g: (-g.count, g.reason))
        return ordered[:limit]

    # -- stale units across runs -------------------------------------------------------

    def stale_units_page(self, limit: int = 100, cursor: str | None = None) -> Page:
        """Stale units of running runs, oldest unit first; the cursor is ``run-uuid/unit-key``."""
        now = utcnow()
        reason = self._stale_reason_by_type(TaskRun.type, now)
        stmt = (
            select(TaskRunUnit, TaskRun.uuid, TaskRun.type, reason.label("stale_reason"))
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRun.status == RunStatus.RUNNING,
                TaskRun.deleted_at.is_(None),
                TaskRunUnit.status.in_(ACTIVE_STATUSES),
                TaskRunUnit.deleted_at.is_(None),
                reason.is_not(None),
            )
        )
        if cursor:
            stmt = stmt.where(TaskRunUnit.id > self._stale_cursor_id(cursor))
        rows = self.session.execute(stmt.order_by(TaskRunUnit.id).limit(limit + 1)).all()
        more = len(rows) > limit
        items = [
            {
                **self.unit_dict(unit, stale_reason),
                "run_uuid": run_uuid,
                "type": type_,
                "heartbeat_at": _iso(unit.heartbeat_at),
                "queued_at": _iso(unit.queued_at),
            }
            for unit, run_uuid, type_, stale_reason in rows[:limit]
        ]
        last = items[-1] if more and items else None
        return Page(items, f"{last['run_uuid']}/{last['unit_key']}" if last else None)

    def _stale_cursor_id(self, cursor: str) -> int:
        run_uuid, _, unit_key = cursor.partition("/")
        if not is_uuid(run_uuid) or not unit_key:
            raise InvalidCursor("not a stale-units cursor")
        found = self.session.execute(
            select(TaskRunUnit.id)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(TaskRun.uuid == run_uuid, TaskRunUnit.unit_key == unit_key[:191])
        ).scalar_one_or_none()
        if found is None:
            raise InvalidCursor("the cursor names no unit")
        return found

    def stale_counts_by_run(self) -> list[tuple[str, str, int]]:
        """(run uuid, type, stale units) of every running run with stale units."""
        now = utcnow()
        reason = self._stale_reason_by_type(TaskRun.type, now)
        rows = self.session.execute(
            select(TaskRun.uuid, TaskRun.type, func.count())
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRun.status == RunStatus.RUNNING,
                TaskRun.deleted_at.is_(None),
                TaskRunUnit.status.in_(ACTIVE_STATUSES),
                TaskRunUnit.deleted_at.is_(None),
                reason.is_not(None),
            )
            .group_by(TaskRun.uuid, TaskRun.type)
            .order_by(TaskRun.uuid)
        ).all()
        return [(row[0], row[1], row[2]) for row in rows]

    # -- history across runs ---------------------------------------------------------

    def unit_history(
        self,
        unit_key: str | None = None,
        tenant_id: int | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page:
        """One unit key's or one tenant's units across runs, newest first."""
        if (unit_key is None) == (tenant_id is None):
            raise ValueError("give exactly one of unit_key and tenant_id")
        stmt = (
            select(TaskRunUnit, TaskRun.uuid, TaskRun.type, TaskRun.status)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(TaskRunUnit.deleted_at.is_(None), TaskRun.deleted_at.is_(None))
        )
        if unit_key is not None:
            stmt = stmt.where(TaskRunUnit.unit_key == unit_key[:191])
        else:
            stmt = stmt.where(TaskRunUnit.tenant_id == tenant_id)
        if cursor:
            stmt = stmt.where(TaskRunUnit.id < self._history_cursor_id(cursor))
        rows = self.session.execute(stmt.order_by(TaskRunUnit.id.desc()).limit(limit + 1)).all()
        more = len(rows) > limit
        items = [
            {
                **self.unit_dict(unit, None),
                "run_uuid": run_uuid,
                "type": type_,
                "run_status": run_status,
            }
            for unit, run_uuid, type_, run_status in rows[:limit]
        ]
        last = items[-1] if more and items else None
        return Page(items, f"{last['run_uuid']}/{last['unit_key']}" if last else None)

    def _history_cursor_id(self, cursor: str) -> int:
        return self._stale_cursor_id(cursor)

    @staticmethod
    def failure_streak(history: list[dict[str, Any]]) -> int:
        """How many of the most recent terminal outcomes in a history are failures in a row."""
        streak = 0
        for item in history:
            if item["status"] in ACTIVE_STATUSES:
                continue
            if item["status"] != UnitStatus.FAILED:
                break
            streak += 1
        return streak
