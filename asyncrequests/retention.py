"""Retention of async requests, on their own clock (``ASYNC_REQUESTS_RETENTION_DAYS``).

Requests answer a tenant's client for a short while after they finish; the
ledger keeps runs for operators for much longer. Neither pruning touches the
other's tables.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from flask import current_app
from sqlalchemy import and_, delete, or_, select

from asyncrequests.models import AsyncRequest, RequestStatus
from database import utcnow, write_transaction
from extensions import db
from taskrunner.contract import Cron, crontab, periodic

BATCH_SIZE = 1000

logger = logging.getLogger(__name__)


def prune(days: int | None = None, batch_size: int = BATCH_SIZE) -> int:
    """Delete requests older than the retention; return how many.

    Finished requests go by their finish time. A request still pending after the
    whole retention was abandoned (its work was lost and never asked for again),
    so it goes by its last change.
    """
    if days is None:
        days = current_app.config["ASYNC_REQUESTS_RETENTION_DAYS"]
    return prune_before(utcnow() - timedelta(days=days), batch_size)


def prune_before(cutoff: datetime, batch_size: int = BATCH_SIZE) -> int:
    expired = or_(
        and_(AsyncRequest.status != RequestStatus.PENDING, AsyncRequest.finished_at < cutoff),
        and_(AsyncRequest.status == RequestStatus.PENDING, AsyncRequest.updated_at < cutoff),
    )
    session = db.session
    pruned = 0
    while True:
        with write_transaction(session):
            ids = list(
                session.execute(
                    select(AsyncRequest.id)
                    .where(expired)
                    .order_by(AsyncRequest.id)
                    .limit(batch_size)
                ).scalars()
            )
            if ids:
                session.execute(delete(AsyncRequest).where(AsyncRequest.id.in_(ids)))
        if not ids:
            return pruned
        pruned += len(ids)


@periodic("asyncrequests.prune", Cron(crontab(minute="37", hour="3")), timeout=300)
def prune_async_requests() -> None:
    """Daily: delete tenants' async requests older than their own retention (not the ledger's)."""
    count = prune()
    if count:
        logger.info("Pruned %d async requests", count)
