"""Failed units grouped by their reason, numbers and error references folded."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import case, func, select, text
from sqlalchemy.orm import Session, aliased

from security.refs import REF_CODE
from taskrunner.failures import innermost_own, stored_kind
from taskrunner.ledger.records import not_deleted
from taskrunner.models import OperatorAction, TaskRun, TaskRunUnit
from taskrunner.types import UnitStatus

# Digits and error references vary between otherwise identical reasons ("probe unit 7
# failed", "unhandled …Error — see logs, ref 3f9c0a1b"). A period (2026-11) is not a
# number that varies: "no statement for 2026-10" and "… for 2026-11" are two groups, and
# each says which month. One pattern, run by Python and by PostgreSQL's regexp_replace.
_PERIOD = r"(?:19|20)\d\d-(?:0[1-9]|1[0-2])(?!\d)"
_MONTH_OF_A_PERIOD = r"(?<=(?<!\d)(?:19|20)\d\d-)(?:0[1-9]|1[0-2])(?!\d)"
_REFERENCE = rf"(?<=ref ){REF_CODE}"
# Python takes the first branch that matches, PostgreSQL the longest: the number branch
# steps aside where a reference starts, so both engines fold "ref 123458779e14" alike.
_VARYING = re.compile(
    rf"{_REFERENCE}|(?<!\d)(?!{_PERIOD})(?!{_MONTH_OF_A_PERIOD})(?!{_REFERENCE})\d+"
)
# PostgreSQL runs that pattern's lookarounds at some 12 µs a reason (120 ms for a group page
# of 10,000 failed units). A reason with no period and no "ref " folds the same with one
# plain pattern (\d+), ten times faster; only the others take the long way.
_NEEDS_LOOKAROUNDS = r"(?:19|20)\d\d-(?:0[1-9]|1[0-2])|ref "
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


def normalize_reason(reason: str | None) -> str:
    return _VARYING.sub("#", reason or "")


def folded_reason(session: Session, last_error: Any = TaskRunUnit.last_error):
    """SQL for a unit's reason (``last_error``, of an alias too) with numbers and error
    references folded, as grouped."""
    if session.get_bind().dialect.name == "postgresql":
        reason = func.coalesce(last_error, "")
        # A reason holding "ref " takes the long way: the plain one has no reference to fold.
        plain = func.regexp_replace(reason, r"\d+", "#", "g")
        return case(
            (
                reason.op("~")(_NEEDS_LOOKAROUNDS),
                func.regexp_replace(reason, _VARYING.pattern, "#", "g"),
            ),
            else_=plain,
        )
    # SQLite has no regexp_replace: the same Python function, bound to this connection.
    raw = session.connection().connection.dbapi_connection
    raw.create_function("taskledger_fold_reason", 1, normalize_reason, deterministic=True)
    return func.taskledger_fold_reason(last_error)


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

    def error_groups(
        self, run: TaskRun, limit: int = 50, new_since: TaskRun | None = None
    ) -> list[ErrorGroup]:
        """Failed units grouped by their redacted reason (numbers folded), biggest first.

        A retried unit keeps its last reason until it settles: it stays in its group,
        counted as ``retrying``, so a retried group is shown until its units settle.
        ``new_since``: only the groups that run has not (one statement: the other run's
        reasons are folded, never grouped).
        """
        if self.session.get_bind().dialect.name == "postgresql":
            # Grouping tens of thousands of reasons sorts on disk with the default work_mem.
            self.session.execute(text("SET LOCAL work_mem = '32MB'"))
            tenants = func.array_agg(TaskRunUnit.tenant_id.distinct())
        else:
            tenants = func.group_concat(TaskRunUnit.tenant_id.distinct())
        reason = folded_reason(self.session)
        statuses = self._grouped_statuses(run)
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
            .where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.status.in_(statuses),
                TaskRunUnit.last_error.is_not(None),
                not_deleted(TaskRunUnit),
            )
            .group_by(reason)
            .order_by(func.count().desc(), reason)
            .limit(limit)
        )
        if new_since is not None:
            grouped = grouped.where(reason.not_in(self._reasons(new_since)))
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

    def _reasons(self, run: TaskRun) -> Any:
        """The folded reasons of ``run``'s error groups, as a subquery."""
        other = aliased(TaskRunUnit)
        return select(folded_reason(self.session, other.last_error)).where(
            other.task_run_id == run.id,
            other.status.in_(self._grouped_statuses(run)),
            other.last_error.is_not(None),
            not_deleted(other),
        )
