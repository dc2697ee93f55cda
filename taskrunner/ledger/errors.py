"""Failed units grouped by their reason, numbers and error references folded."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import and_, func, or_, select, text
from sqlalchemy.orm import Session, aliased

from taskrunner.failures import innermost_own, stored_kind
from taskrunner.ledger.records import InvalidCursor, Page, not_deleted, page_of
from taskrunner.models import OperatorAction, TaskRun, TaskRunUnit
from taskrunner.types import UnitStatus

TENANT_SAMPLE = 12
_IN_A_GROUP = (UnitStatus.FAILED, UnitStatus.PENDING, UnitStatus.RUNNING)


@dataclass(slots=True)
class ErrorGroup:
    reason: str
    example: str
    count: int
    tenants: int
    tenant_sample: list[int] = field(default_factory=list)
    first_key: str | None = None
    # The first unit's stored kind and the innermost frame of our own code it failed in.
    stored_kind: str | None = None
    where: str | None = None
    # Units of the group retried and not settled yet: the group stays until they are.
    retrying: int = 0

    @property
    def kind(self) -> str:
        return stored_kind(self.stored_kind, self.example)


def _sample(found: Any) -> list[int]:
    """The first tenants of a group, from PostgreSQL's array or SQLite's joined list."""
    if isinstance(found, str):
        found = found.split(",")
    return sorted(int(t) for t in found or () if t is not None)[:TENANT_SAMPLE]


class ErrorReads:
    """A run's error groups."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def _retried(self, run: TaskRun) -> bool:
        return (
            self.session.execute(
                select(OperatorAction.id)
                .where(OperatorAction.task_run_id == run.id, OperatorAction.action == "retry")
                .limit(1)
            ).first()
            is not None
        )

    def _grouped_statuses(self, run: TaskRun) -> tuple[str, ...]:
        # Only a run an operator retried has units retrying under an old reason: the others
        # read their failed units alone (a big running run's active units are not walked).
        return _IN_A_GROUP if self._retried(run) else (UnitStatus.FAILED,)

    def error_groups_page(self, run: TaskRun, limit: int = 50, cursor: str | None = None) -> Page:
        """A page of the run's error groups; the cursor is the last group's reason."""
        after = None
        if cursor is not None:
            size = self.session.execute(
                select(func.count()).where(
                    *self._in_groups(TaskRunUnit, run), TaskRunUnit.reason_fold == cursor
                )
            ).scalar_one()
            if not size:
                raise InvalidCursor("the cursor names no error group of this run")
            after = (size, cursor)
        groups = self.error_groups(run, limit + 1, after=after)
        return page_of(groups, limit, lambda group: group, lambda group: group.reason)

    def error_groups(
        self,
        run: TaskRun,
        limit: int = 50,
        new_since: TaskRun | None = None,
        after: tuple[int, str] | None = None,
    ) -> list[ErrorGroup]:
        """Failed units grouped by their redacted reason (numbers folded), biggest first.

        A retried unit keeps its last reason until it settles: it stays in its group,
        counted as ``retrying``, so a retried group is shown until its units settle.
        ``new_since``: only the groups that run has not (one statement: the other run's
        folded reasons are read, never grouped). ``after``: only the groups after the
        group of that size and reason in this order.
        """
        if self.session.get_bind().dialect.name == "postgresql":
            # Grouping tens of thousands of reasons sorts on disk with the default work_mem.
            self.session.execute(text("SET LOCAL work_mem = '32MB'"))
            tenants = func.array_agg(TaskRunUnit.tenant_id.distinct())
        else:
            tenants = func.group_concat(TaskRunUnit.tenant_id.distinct())
        reason = TaskRunUnit.reason_fold
        grouped = (
            select(
                reason.label("reason"),
                func.min(TaskRunUnit.last_error).label("example"),
                func.count().filter(TaskRunUnit.status == UnitStatus.FAILED).label("n"),
                func.count().filter(TaskRunUnit.status != UnitStatus.FAILED).label("retrying"),
                func.count(TaskRunUnit.tenant_id.distinct()).label("tenants"),
                func.min(TaskRunUnit.unit_key).label("first_key"),
                func.min(TaskRunUnit.id).label("first_id"),
                tenants.label("sample"),
            )
            .where(*self._in_groups(TaskRunUnit, run))
            .group_by(reason)
            .order_by(func.count().desc(), reason)
            .limit(limit)
        )
        if new_since is not None:
            grouped = grouped.where(reason.not_in(self._reasons(new_since)))
        if after is not None:
            size, last = after
            grouped = grouped.having(
                or_(func.count() < size, and_(func.count() == size, reason > last))
            )
        rows = self.session.execute(grouped).all()
        # One look-up by primary key for every group's first unit: its kind and frames.
        firsts = {
            unit_id: (kind, stack)
            for unit_id, kind, stack in self.session.execute(
                select(TaskRunUnit.id, TaskRunUnit.failure_kind, TaskRunUnit.stack).where(
                    TaskRunUnit.id.in_([row.first_id for row in rows])
                )
            )
        }
        groups = []
        for row in rows:
            kind, stack = firsts.get(row.first_id, (None, None))
            groups.append(
                ErrorGroup(
                    row.reason,
                    row.example or "",
                    row.n,
                    row.tenants,
                    _sample(row.sample),
                    row.first_key,
                    kind,
                    innermost_own(stack),
                    row.retrying,
                )
            )
        return groups

    def count_groups(self, run: TaskRun, new_since: TaskRun) -> int:
        """How many of the run's error groups that run has not."""
        return self.session.execute(
            select(func.count(TaskRunUnit.reason_fold.distinct())).where(
                *self._in_groups(TaskRunUnit, run),
                TaskRunUnit.reason_fold.not_in(self._reasons(new_since)),
            )
        ).scalar_one()

    def failed_tenants(self, run: TaskRun) -> int:
        """How many tenants the run's failed units belong to, each once."""
        return self.session.execute(
            select(func.count(TaskRunUnit.tenant_id.distinct())).where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.status == UnitStatus.FAILED,
                not_deleted(TaskRunUnit),
            )
        ).scalar_one()

    def _reasons(self, run: TaskRun) -> Any:
        """The folded reasons of ``run``'s error groups, as a subquery."""
        other = aliased(TaskRunUnit)
        return select(other.reason_fold).where(*self._in_groups(other, run))

    def _in_groups(self, units: Any, run: TaskRun) -> tuple[Any, ...]:
        """The conditions of ``run``'s units in its error groups."""
        return (
            units.task_run_id == run.id,
            units.status.in_(self._grouped_statuses(run)),
            units.last_error.is_not(None),
            not_deleted(units),
        )
