"""Failed units grouped by their reason, numbers and error references folded."""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, select, text
from sqlalchemy.orm import Session

from security.refs import REF_CODE
from taskrunner.ledger.base import LedgerBase
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.redaction import reason_kind
from taskrunner.types import UnitStatus

# Digits and error references vary between otherwise identical reasons ("probe unit 7
# failed", "unhandled …Error — see logs, ref 3f9c0a1b"). A period (2026-11) is not a
# number that varies: "no statement for 2026-10" and "… for 2026-11" are two groups, and
# each says which month. One pattern, run by Python and by PostgreSQL's regexp_replace.
_PERIOD = r"(?:19|20)\d\d-(?:0[1-9]|1[0-2])(?!\d)"
_MONTH_OF_A_PERIOD = r"(?<=(?<!\d)(?:19|20)\d\d-)(?:0[1-9]|1[0-2])(?!\d)"
_VARYING = re.compile(rf"(?<=ref ){REF_CODE}|(?<!\d)(?!{_PERIOD})(?!{_MONTH_OF_A_PERIOD})\d+")
TENANT_SAMPLE = 12


@dataclass(slots=True)
class ErrorGroup:
    reason: str
    example: str
    count: int
    tenants: int
    tenant_sample: list[int] = field(default_factory=list)
    first_key: str | None = None

    @property
    def kind(self) -> str:
        return reason_kind(self.example)


def normalize_reason(reason: str | None) -> str:
    return _VARYING.sub("#", reason or "")


def folded_reason(session: Session):
    """SQL for a unit's reason with numbers and error references folded, as grouped."""
    if session.get_bind().dialect.name == "postgresql":
        return func.regexp_replace(
            func.coalesce(TaskRunUnit.last_error, ""), _VARYING.pattern, "#", "g"
        )
    # SQLite has no regexp_replace: the same Python function, bound to this connection.
    raw = session.connection().connection.dbapi_connection
    raw.create_function("taskledger_fold_reason", 1, normalize_reason, deterministic=True)
    return func.taskledger_fold_reason(TaskRunUnit.last_error)


class ErrorReads(LedgerBase):
    """A run's error groups."""

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
        reason = folded_reason(self.session)
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
