"""The seam other modules use to open, complete and fail a tenant's async requests.

A domain module (payments) opens a pending request when a tenant asks for
something slow, and the job that does the work completes or fails it. The
task runner never imports this module, nor this module the runner's ledger:
one unit job may feed both records, which answer different audiences.

Every write is one short transaction of its own, so a job that fails after
recording its outcome here has still recorded it.
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, text, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from asyncrequests.models import AsyncRequest, RequestStatus
from database import is_sqlite, utcnow, write_transaction
from extensions import db
from taskrunner.contract import bounded, redact

PENDING_ONLY = "status = 'pending'"
# Creating and reading back the pending row can race a job that completes it in
# between; a few rounds settle it.
OPEN_ATTEMPTS = 3


@dataclass(frozen=True, slots=True)
class RequestView:
    """An async request as its owner may see it: no internal id."""

    uuid: str
    tenant_id: int
    kind: str
    subject: str
    status: RequestStatus
    result: dict[str, Any] | None
    reason: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @property
    def pending(self) -> bool:
        return self.status is RequestStatus.PENDING


def _view(row: AsyncRequest) -> RequestView:
    return RequestView(
        uuid=row.uuid,
        tenant_id=row.tenant_id,
        kind=row.kind,
        subject=row.subject,
        status=RequestStatus(row.status),
        result=dict(row.result) if row.result is not None else None,
        reason=row.reason,
        created_at=row.created_at,
        updated_at=row.updated_at,
        finished_at=row.finished_at,
    )


def _is_pending(tenant_id: int, kind: str, subject: str) -> tuple:
    # The literal predicate lets PostgreSQL match the partial unique index.
    return (
        AsyncRequest.tenant_id == tenant_id,
        AsyncRequest.kind == kind,
        AsyncRequest.subject == subject,
        text(PENDING_ONLY),
    )


def _pending_row(tenant_id: int, kind: str, subject: str) -> AsyncRequest | None:
    return db.session.execute(
        select(AsyncRequest)
        .where(*_is_pending(tenant_id, kind, subject))
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()


def open_request(tenant_id: int, kind: str, subject: str) -> tuple[RequestView, bool]:
    """The tenant's pending request for ``kind`` and ``subject``, created if there is none.

    Returns the request and whether this call created it. Two callers at once get
    the same row: a partial unique index allows one pending request per subject.
    """
    session = db.session
    insert = sqlite_insert if is_sqlite(session) else pg_insert
    for _ in range(OPEN_ATTEMPTS):
        now = utcnow()
        new_uuid = str(uuid_lib.uuid4())
        with write_transaction(session):
            session.execute(
                insert(AsyncRequest)
                .values(
                    uuid=new_uuid,
                    tenant_id=tenant_id,
                    kind=kind,
                    subject=subject,
                    status=RequestStatus.PENDING,
                    created_at=now,
                    updated_at=now,
                )
                .on_conflict_do_nothing(
                    index_elements=["tenant_id", "kind", "subject"],
                    index_where=text(PENDING_ONLY),
                )
            )
            row = _pending_row(tenant_id, kind, subject)
            view = _view(row) if row is not None else None
        if view is not None:
            return view, view.uuid == new_uuid
    raise RuntimeError(f"could not open a {kind} request for tenant {tenant_id}")


def claim_pending(view: RequestView, quiet_for: timedelta) -> bool:
    """Whether this caller takes the pending request's turn to start its work again.

    Only a request unchanged for ``quiet_for`` is claimed: whoever opened it, or claimed
    it last, had that long to start the work. Of callers at once one wins, by a
    conditional update of its last change.
    """
    now = utcnow()
    with write_transaction(db.session):
        claimed = db.session.execute(
            update(AsyncRequest)
            .where(
                AsyncRequest.uuid == view.uuid,
                AsyncRequest.status == RequestStatus.PENDING,
                AsyncRequest.updated_at <= now - quiet_for,
            )
            .values(updated_at=now)
            .execution_options(synchronize_session=False)
        ).rowcount
    return claimed == 1


def completed_request(
    tenant_id: int, kind: str, subject: str, result: Mapping[str, Any]
) -> RequestView:
    """The latest completed request for ``subject``, or a new one already completed."""
    session = db.session
    with write_transaction(session):
        row = session.execute(
            select(AsyncRequest)
            .where(
                AsyncRequest.tenant_id == tenant_id,
                AsyncRequest.kind == kind,
                AsyncRequest.subject == subject,
                AsyncRequest.status == RequestStatus.COMPLETED,
            )
            .order_by(AsyncRequest.id.desc())
            .limit(1)
        ).scalar_one_or_none()
        if row is None:
            now = utcnow()
            row = AsyncRequest(
                tenant_id=tenant_id,
                kind=kind,
                subject=subject,
                status=RequestStatus.COMPLETED,
                result=dict(result),
                created_at=now,
                updated_at=now,
                finished_at=now,
            )
            session.add(row)
            session.flush()
        view = _view(row)
    return view


def _settle(tenant_id: int, kind: str, subject: str, values: dict[str, Any]) -> str | None:
    """Move the pending request to a terminal status; return its uuid, None if none was pending.

    One conditional update: of two settles racing for the same request, one wins.
    A unit of the monthly sweep whose tenant asked for nothing costs one indexed miss.
    """
    session = db.session
    now = utcnow()
    with write_transaction(session):
        settled = session.execute(
            update(AsyncRequest)
            .where(*_is_pending(tenant_id, kind, subject))
            .values(updated_at=now, finished_at=now, **values)
            .returning(AsyncRequest.uuid)
            .execution_options(synchronize_session=False)
        ).scalar_one_or_none()
    return settled


def complete_pending(
    tenant_id: int, kind: str, subject: str, result: Mapping[str, Any]
) -> str | None:
    """Complete the tenant's pending request with a result safe to show the tenant."""
    return _settle(
        tenant_id,
        kind,
        subject,
        {"status": RequestStatus.COMPLETED, "result": dict(result), "reason": None},
    )


def fail_pending(tenant_id: int, kind: str, subject: str, error: BaseException | str) -> str | None:
    """Fail the tenant's pending request; an exception is redacted as the ledger redacts it."""
    reason = redact(error) if isinstance(error, BaseException) else bounded(error)
    return _settle(
        tenant_id, kind, subject, {"status": RequestStatus.FAILED, "reason": reason, "result": None}
    )


def find_for_tenant(tenant_id: int, request_uuid: str) -> RequestView | None:
    """One of the tenant's requests; another tenant's, or a malformed uuid, is simply none.

    A uuid as the API writes it, in either case; Python also reads it with braces, a
    ``urn:uuid:`` prefix or without dashes, which no document promises: those are none.
    """
    try:
        canonical = str(uuid_lib.UUID(request_uuid))
    except (ValueError, AttributeError, TypeError):
        return None
    if canonical != request_uuid.lower():
        return None
    row = db.session.execute(
        select(AsyncRequest)
        .where(AsyncRequest.uuid == canonical, AsyncRequest.tenant_id == tenant_id)
        .execution_options(populate_existing=True)
    ).scalar_one_or_none()
    return _view(row) if row is not None else None
