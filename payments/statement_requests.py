"""A tenant asks for one period's statement through the tenant API.

The request is an async request the tenant polls; the work is a one-unit run of
the statements sweep for that tenant, unless that tenant's unit is already in
flight (a one-unit run started earlier, or the monthly fleet sweep), whose job
will settle the request just the same.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy import select

from asyncrequests import platform as async_requests
from asyncrequests.platform import RequestView
from extensions import db
from payments.models import Statement
from payments.statements import (
    STATEMENT_KIND,
    TYPE,
    StatementError,
    check_ended,
    eligible_tenants,
    statement_result,
    unit_key,
)
from taskrunner.contract import ContextError, start_run, unit_in_flight
from tenancy.services import MAX_ID

logger = logging.getLogger(__name__)
# How long the ask that opened (or last claimed) a request has to start its run before
# another ask may start one instead.
START_LEASE = timedelta(minutes=1)


class StatementsUnavailable(StatementError):
    """The work could not be queued; the tenant may ask again later."""


def request_statement(tenant_id: int, period: str) -> tuple[RequestView, bool]:
    """Open (or return) the tenant's request for ``period``; return it and whether it is new."""
    check_ended(period)
    statement = _statement_for_period(tenant_id, period)
    if statement is not None:
        # Settles a request left pending by a job that made the statement but died after.
        result = statement_result(statement)
        async_requests.complete_pending(tenant_id, STATEMENT_KIND, period, result)
        return async_requests.completed_request(tenant_id, STATEMENT_KIND, period, result), False
    if not list(eligible_tenants(period, tenant_id)):
        raise StatementError(f"there is no statement for the period {period}")
    request, created = async_requests.open_request(tenant_id, STATEMENT_KIND, period)
    # Two asks at once both find no unit in flight while the first starts its run: only
    # the ask that opened the request starts one, or one that finds it long left pending
    # (its job lost: the run ended, or was never started, without settling it).
    if not unit_in_flight(TYPE, unit_key(tenant_id, period)) and (
        created or async_requests.claim_pending(request, START_LEASE)
    ):
        _start_one_unit_run(tenant_id, period)
    current = async_requests.find_for_tenant(tenant_id, request.uuid)
    return current or request, created


def _start_one_unit_run(tenant_id: int, period: str) -> None:
    try:
        handle = start_run(
            TYPE, {"period": period, "tenant_id": tenant_id}, f"tenant-api:{tenant_id}"
        )
    except ContextError as exc:  # the type refused the request: nothing was started
        async_requests.fail_pending(tenant_id, STATEMENT_KIND, period, str(exc))
        raise StatementError(str(exc)) from None
    except Exception as exc:
        logger.exception("Could not start a statement run for tenant %s, %s", tenant_id, period)
        async_requests.fail_pending(tenant_id, STATEMENT_KIND, period, exc)
        raise StatementsUnavailable("statements cannot be generated right now") from None
    if handle.units_total == 0:
        # The tenant left standing between the check and the run.
        async_requests.fail_pending(
            tenant_id, STATEMENT_KIND, period, f"there is no statement for the period {period}"
        )


def _statement_for_period(tenant_id: int, period: str) -> Statement | None:
    return db.session.execute(
        select(Statement).where(Statement.tenant_id == tenant_id, Statement.period == period)
    ).scalar_one_or_none()


def tenant_statement(tenant_id: int, statement_id: int) -> Statement | None:
    """One of the tenant's statements; another tenant's is simply none."""
    if not 0 < statement_id <= MAX_ID:
        return None
    return db.session.execute(
        select(Statement).where(Statement.id == statement_id, Statement.tenant_id == tenant_id)
    ).scalar_one_or_none()
