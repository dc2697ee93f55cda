"""Reads across runs: stale units, one key's or tenant's history, and the on-call
console's units, active counts and search.
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import datetime
from typing import Any

from sqlalchemy import func, literal, select
from sqlalchemy.orm import Session

from database import iso, lowered, utcnow
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
    joined_cutoffs,
    stale_in_running_runs,
    stale_reason,
)
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.types import RunStatus, UnitStatus

SEARCH_RECENT_RUNS = 500
# A search counts its matches up to this many ("20 of 1,000+ matches").
SEARCH_COUNT_CAP = 1000


def _with_run(row: Any) -> dict[str, Any]:
    """A unit of a history or a search, with its run: (unit, run uuid, type, run status)."""
    unit, run_uuid, type_, run_status = row
    return unit_dict(unit, None, run_uuid=run_uuid, type=type_, run_status=run_status)


def _run_and_key(item: dict[str, Any]) -> str:
    return f"{item['run_uuid']}/{item['unit_key']}"


class FleetReads:
    """What operators read across every run."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # -- stale units across runs -------------------------------------------------------

    def stale_units_page(
        self,
        limit: int = 100,
        cursor: str | None = None,
        now: datetime | None = None,
        run_id: int | None = None,
    ) -> Page:
        """Stale units of running runs (``run_id``: of that run), oldest unit first; the
        cursor is ``run-uuid/unit-key``."""
        cut = joined_cutoffs(self.session, now or utcnow())
        stmt = (
            select(TaskRunUnit, TaskRun.uuid, TaskRun.type, stale_reason(cut).label("stale_reason"))
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(*stale_in_running_runs(cut))
        )
        if run_id is not None:
            stmt = stmt.where(TaskRunUnit.task_run_id == run_id)
        if cursor:
            stmt = stmt.where(TaskRunUnit.id > self._unit_id_for_cursor(cursor))
        rows = self.session.execute(stmt.order_by(TaskRunUnit.id).limit(limit + 1)).all()

        def item(row: Any) -> dict[str, Any]:
            unit, run_uuid, type_, reason = row
            return unit_dict(
                unit,
                reason,
                run_uuid=run_uuid,
                type=type_,
                heartbeat_at=iso(unit.heartbeat_at),
                queued_at=iso(unit.queued_at),
            )

        return page_of(rows, limit, item, _run_and_key)

    def _unit_id_for_cursor(self, cursor: str) -> int:
        """The unit a ``run-uuid/unit-key`` cursor names."""
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

    def stale_counts_by_run(self, now: datetime | None = None) -> list[tuple[str, str, int]]:
        """(run uuid, type, stale units) of every running run with stale units."""
        rows = self.session.execute(
            select(TaskRun.uuid, TaskRun.type, func.count())
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(*stale_in_running_runs(joined_cutoffs(self.session, now or utcnow())))
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
            .where(not_deleted(TaskRunUnit, TaskRun))
        )
        if unit_key is not None:
            stmt = stmt.where(TaskRunUnit.unit_key == unit_key[:191])
        else:
            stmt = stmt.where(TaskRunUnit.tenant_id == tenant_id)
        if cursor:
            stmt = stmt.where(TaskRunUnit.id < self._unit_id_for_cursor(cursor))
        rows = self.session.execute(stmt.order_by(TaskRunUnit.id.desc()).limit(limit + 1)).all()
        return page_of(rows, limit, _with_run, _run_and_key)

    @staticmethod
    def failure_streak(history: list[dict[str, Any]]) -> int:
        """How many of the most recent terminal outcomes in a history are failures in a row."""
        streak = 0
        for item in history:
            if item["status"] in ACTIVE:
                continue
            if item["status"] != UnitStatus.FAILED:
                break
            streak += 1
        return streak

    def units_by_ids(self, unit_ids: list[int]) -> dict[int, dict[str, Any]]:
        """Units named by their ids (what consumers report running), with their run."""
        if not unit_ids:
            return {}
        rows = self.session.execute(
            select(
                TaskRunUnit.id,
                TaskRunUnit.unit_key,
                TaskRunUnit.tenant_id,
                TaskRunUnit.status,
                TaskRun.uuid,
                TaskRun.type,
            )
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(TaskRunUnit.id.in_(unit_ids[:1000]))
        ).all()
        return {
            row.id: {
                "unit_key": row.unit_key,
                "tenant_id": row.tenant_id,
                "status": row.status,
                "run_uuid": row.uuid,
                "type": row.type,
            }
            for row in rows
        }

    def active_by_type(self) -> dict[str, dict[str, Any]]:
        """Per type of the running runs: pending and running units, the oldest pending one.

        Reads the partial index of active units only.
        """
        rows = self.session.execute(
            select(
                TaskRun.type,
                TaskRunUnit.status,
                func.count(),
                func.min(TaskRunUnit.queued_at),
            )
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.status.in_(ACTIVE),
                TaskRun.status == RunStatus.RUNNING,
                not_deleted(TaskRunUnit, TaskRun),
            )
            .group_by(TaskRun.type, TaskRunUnit.status)
        ).all()
        out: dict[str, dict[str, Any]] = defaultdict(
            lambda: {"pending": 0, "running": 0, "oldest_pending_at": None}
        )
        for type_, status, n, oldest in rows:
            out[type_][status] = n
            if status == UnitStatus.PENDING:
                out[type_]["oldest_pending_at"] = oldest
        return dict(out)

    # -- search ----------------------------------------------------------------------

    # -- search (the console's search box) ----------------------------------------------

    def _capped_count(self, stmt: Any, cap: int) -> int:
        """How many rows ``stmt`` matches, counted up to ``cap`` (a search says "1,000+")."""
        limited = stmt.with_only_columns(literal(1)).order_by(None).limit(cap).subquery()
        return self.session.execute(select(func.count()).select_from(limited)).scalar_one()

    @staticmethod
    def _runs_matching(text_: str) -> Any | None:
        prefix = text_.strip().lower()
        if not prefix or not re.fullmatch(r"[0-9a-f-]{1,36}", prefix):
            return None
        return select(TaskRun).where(
            TaskRun.uuid >= prefix, TaskRun.uuid < prefix + "\x7f", not_deleted(TaskRun)
        )

    def search_runs(self, text_: str, limit: int = 20, offset: int = 0) -> list[TaskRun]:
        """Runs whose uuid starts with ``text_`` (any case), newest first."""
        stmt = self._runs_matching(text_)
        if stmt is None:
            return []
        return list(
            self.session.execute(
                stmt.order_by(TaskRun.id.desc()).offset(offset).limit(limit)
            ).scalars()
        )

    def count_runs(self, text_: str, cap: int = SEARCH_COUNT_CAP) -> int:
        stmt = self._runs_matching(text_)
        return 0 if stmt is None else self._capped_count(stmt, cap)

    @staticmethod
    def _keys_matching(text_: str) -> Any | None:
        prefix = text_[:191]
        if not prefix:
            return None
        # A range on the key index, then an exact prefix check: keys may hold % and _, and
        # a collation may sort other keys into the range.
        return (
            select(TaskRunUnit, TaskRun.uuid, TaskRun.type, TaskRun.status)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.unit_key >= prefix,
                TaskRunUnit.unit_key < prefix + "\U0010ffff",
                func.substr(TaskRunUnit.unit_key, 1, len(prefix)) == prefix,
                not_deleted(TaskRunUnit, TaskRun),
            )
        )

    def search_unit_keys(
        self, text_: str, limit: int = 20, offset: int = 0
    ) -> list[dict[str, Any]]:
        """Units whose key starts with ``text_`` (exact case: keys are opaque), newest first."""
        stmt = self._keys_matching(text_)
        if stmt is None:
            return []
        rows = self.session.execute(
            stmt.order_by(TaskRunUnit.unit_key, TaskRunUnit.id.desc()).offset(offset).limit(limit)
        ).all()
        return [_with_run(row) for row in rows]

    def count_unit_keys(self, text_: str, cap: int = SEARCH_COUNT_CAP) -> int:
        stmt = self._keys_matching(text_)
        return 0 if stmt is None else self._capped_count(stmt, cap)

    def _errors_matching(self, text_: str, recent_runs: int) -> Any | None:
        needle = text_.strip()
        if len(needle) < 3:
            return None
        # The oldest of the newest runs, read first: a range on the per-run status index
        # then walks only their failed units (an IN over a LIMIT made the planner scan all).
        bound = self.session.execute(
            select(TaskRun.id)
            .where(not_deleted(TaskRun))
            .order_by(TaskRun.id.desc())
            .offset(recent_runs - 1)
            .limit(1)
        ).scalar_one_or_none()
        escaped = needle.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        # Both sides lowered by the database, every letter (SQLite's own lower() leaves
        # those beyond ASCII as they are: "Échec" typed as shown found nothing).
        pattern = lowered(self.session, literal(f"%{escaped}%"))
        return (
            select(TaskRunUnit, TaskRun.uuid, TaskRun.type, TaskRun.status)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.task_run_id >= (bound or 0),
                TaskRunUnit.status == UnitStatus.FAILED,
                not_deleted(TaskRunUnit),
                lowered(self.session, TaskRunUnit.last_error).like(pattern, escape="\\"),
            )
        )

    def search_errors(
        self,
        text_: str,
        limit: int = 20,
        recent_runs: int = SEARCH_RECENT_RUNS,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """Failed units whose reason contains ``text_`` (any case), in the newest runs.

        Bounded to the failed units of the newest ``recent_runs`` runs (the per-run status
        index): an error an operator looks for on call is a recent one, and a scan of
        every reason ever stored would grow with the ledger.
        """
        stmt = self._errors_matching(text_, recent_runs)
        if stmt is None:
            return []
        rows = self.session.execute(
            stmt.order_by(TaskRunUnit.task_run_id.desc(), TaskRunUnit.id)
            .offset(offset)
            .limit(limit)
        ).all()
        return [_with_run(row) for row in rows]

    def count_errors(
        self, text_: str, cap: int = SEARCH_COUNT_CAP, recent_runs: int = SEARCH_RECENT_RUNS
    ) -> int:
        stmt = self._errors_matching(text_, recent_runs)
        return 0 if stmt is None else self._capped_count(stmt, cap)

    def count_pending_of_type(self, type_: str) -> int:
        """Pending units of the running runs of one type (what a pause holds back)."""
        return self.session.execute(
            select(func.count())
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRun.type == type_,
                TaskRun.status == RunStatus.RUNNING,
                TaskRunUnit.status == UnitStatus.PENDING,
                not_deleted(TaskRunUnit),
            )
        ).scalar_one()
