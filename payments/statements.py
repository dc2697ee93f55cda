"""``payments.monthly_statements``: a fleet sweep, one unit per eligible tenant."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Mapping
from datetime import date, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from asyncrequests import platform as async_requests
from database import is_sqlite, utcnow
from extensions import db
from payments.models import Statement
from security.echo import echo
from taskrunner.contract import (
    ContextError,
    Cron,
    TaskOptions,
    TaskReportableError,
    TaskUnit,
    UnitJob,
    check_context,
    crontab,
    periodic,
)
from tenancy.context import require_tenant
from tenancy.models import STANDING, Tenant
from tenancy.services import MAX_ID

TYPE = "payments.monthly_statements"
# The async-request kind a tenant's API client polls for one statement.
STATEMENT_KIND = "payments.statement"
PERIOD = re.compile(r"(\d{4})-(0[1-9]|1[0-2])", re.ASCII)


class StatementError(TaskReportableError):
    pass


def parse_period(period: str) -> date:
    # fullmatch: "$" would let a trailing newline through, into a seven-character column.
    match = PERIOD.fullmatch(period or "")
    if not match or not 1 <= int(match[1]) <= 9998:
        raise StatementError(f"period must be YYYY-MM, not {echo(period or '')}")
    return date(int(match[1]), int(match[2]), 1)


def check_ended(period: str) -> None:
    """A statement is written once and kept: one for a month still running would stand for
    good short of that month's end."""
    if period_end(period) > utcnow():
        raise StatementError(f"the period {period} has not ended yet")


def period_end(period: str) -> datetime:
    start = parse_period(period)
    year, month = (start.year + 1, 1) if start.month == 12 else (start.year, start.month + 1)
    return datetime(year, month, 1)


def eligible_tenants(period: str, tenant_id: int | None = None) -> Iterator[int]:
    """Tenants in standing whose status was set before the period ended, streamed."""
    stmt = (
        select(Tenant.id)
        .where(Tenant.status.in_(STANDING), Tenant.status_changed_at < period_end(period))
        .order_by(Tenant.id)
        .execution_options(yield_per=1000)
    )
    if tenant_id is not None:
        stmt = stmt.where(Tenant.id == tenant_id)
    yield from db.session.execute(stmt).scalars()


def generate_statement(tenant_id: int, period: str) -> Statement:
    """Create the tenant's statement for ``period`` once; a rerun returns the same one."""
    parse_period(period)
    digest = hashlib.sha256(f"{tenant_id}:{period}".encode()).digest()
    values = {
        "tenant_id": tenant_id,
        "period": period,
        "total_cents": int.from_bytes(digest[:3]) * 7,
        "lines": 1 + digest[3] % 40,
        "currency": "EUR",
    }
    insert = sqlite_insert if is_sqlite(db.session) else pg_insert
    db.session.execute(
        insert(Statement)
        .values(**values)
        .on_conflict_do_nothing(index_elements=["tenant_id", "period"])
    )
    statement = db.session.execute(
        select(Statement).where(Statement.tenant_id == tenant_id, Statement.period == period)
    ).scalar_one()
    db.session.commit()
    return statement


def unit_key(tenant_id: int, period: str) -> str:
    return f"tenant-{tenant_id}:{period}"


def statement_result(statement: Statement) -> dict[str, Any]:
    """What a tenant's async request shows of a finished statement."""
    return {
        "statement_id": statement.id,
        "period": statement.period,
        "total_cents": statement.total_cents,
        "currency": statement.currency,
        "download_path": f"/api/v1/statements/{statement.id}",
    }


def generate_for_tenant(tenant_id: int, period: str) -> None:
    """The unit's work: the statement, then the tenant's pending request settled from it.

    A failure fails the tenant's request with the redacted reason, and is raised
    again so that the unit fails too.
    """
    try:
        statement = generate_statement(tenant_id, period)
        result = statement_result(statement)
    except Exception as exc:
        db.session.rollback()
        async_requests.fail_pending(tenant_id, STATEMENT_KIND, period, exc)
        raise
    async_requests.complete_pending(tenant_id, STATEMENT_KIND, period, result)


class MonthlyStatementsTask:
    def type(self) -> str:
        return TYPE

    def validate(self, context: Mapping[str, Any]) -> None:
        """A period (``YYYY-MM``), and a tenant for a one-tenant run; nothing else."""
        check_context(TYPE, context, required={"period": str}, optional={"tenant_id": int})
        try:
            check_ended(context["period"])
        except StatementError as exc:
            raise ContextError(f"{TYPE}: {exc}") from None
        tenant_id = context.get("tenant_id")
        if tenant_id is None:
            return
        if not 1 <= tenant_id <= MAX_ID:
            raise ContextError(f"{TYPE}: the context key 'tenant_id' must be a tenant id")
        # A mistyped id would start a run of no unit that completes, as if it had been done.
        if db.session.get(Tenant, tenant_id) is None:
            raise ContextError(f"{TYPE}: no tenant {tenant_id}")

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        period = context["period"]
        for tenant_id in eligible_tenants(period, context.get("tenant_id")):
            yield TaskUnit(unit_key(tenant_id, period), tenant_id)

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        period = context["period"]

        def generate() -> None:
            generate_for_tenant(require_tenant(), period)

        return generate

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=30, timeout=300)


def start_monthly_statements(period: str, initiator: str = "cli") -> Any:
    """Start the sweep for ``period`` (YYYY-MM)."""
    from taskrunner.contract import start_run

    check_ended(period)
    return start_run(TYPE, {"period": period}, initiator)


@periodic(
    "payments.monthly_statements",
    Cron(crontab(minute="0", hour="2", day="1")),
    timeout=600,
    starts=TYPE,
)
def monthly_statements(initiator: str = "schedule") -> Any:
    """Monthly: statements for the month that just ended; returns the run's handle."""
    # The month that ended in UTC, as Huey's crontab reads the clock and periods end.
    last_month = utcnow().date().replace(day=1) - timedelta(days=1)
    return start_monthly_statements(last_month.strftime("%Y-%m"), initiator)
