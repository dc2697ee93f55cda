"""Delivering outbox events to subscribers, each subscriber on its own clock.

An event is handed to every subscriber of its name once, after the commit that
wrote it (by the process that made the transition, or by the relay for what a
crashed process left behind); the event is then marked delivered. A subscriber
that refused it gets a row in ``task_event_deliveries`` and only it is retried,
with backoff (``TASK_RUNNER_EVENT_RETRY_SECONDS``, doubling, at most an hour),
until it takes the event or has refused it ``TASK_RUNNER_EVENT_MAX_ATTEMPTS``
times: then the delivery is parked, shown on the backoffice, and re-delivered
only by an operator (``flask events redeliver``). So a broken subscriber neither
blocks newer events nor makes the others receive an event again.

Part of the ledger: the only other code that touches its tables.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from database import is_sqlite, iso, utcnow, write_transaction
from extensions import db
from taskrunner import events as ev
from taskrunner.models import EventDelivery, OutboxEvent, TaskRun
from taskrunner.redaction import bounded

MAX_BACKOFF = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Refusal:
    event_id: str
    subscriber: str
    reason: str


@dataclass(frozen=True, slots=True)
class ParkedDelivery:
    event_id: str
    name: str
    run_uuid: str | None
    subscriber: str
    attempts: int
    last_error: str | None
    parked_at: datetime


def event_dict(row: OutboxEvent) -> dict[str, Any]:
    return {"id": row.event_id, "name": row.name, "at": iso(row.created_at), "payload": row.payload}


def deliver(events: list[dict[str, Any]]) -> None:
    """Hand each event to each of its subscribers, then record the outcome in one commit."""
    if not events:
        return
    refusals = [
        Refusal(event["id"], subscriber, reason)
        for event in events
        for subscriber in ev.subscribers(event["name"])
        if (reason := ev.hand_over(event, subscriber)) is not None
    ]
    now = utcnow()
    with write_transaction(db.session):
        db.session.execute(
            update(OutboxEvent)
            .where(OutboxEvent.event_id.in_([event["id"] for event in events]))
            .values(delivered_at=now)
            .execution_options(synchronize_session=False)
        )
        if refusals:
            _record_refusals(refusals, now)


def _record_refusals(refusals: list[Refusal], now: datetime) -> None:
    rows = [
        {
            "event_id": r.event_id,
            "subscriber": r.subscriber,
            "attempts": 1,
            "last_error": bounded(r.reason),
            "next_attempt_at": now + backoff(1),
            "created_at": now,
            "updated_at": now,
        }
        for r in refusals
    ]
    insert = sqlite_insert if is_sqlite(db.session) else pg_insert
    # The relay and a late owner may both hand over the same event: one row per subscriber.
    db.session.execute(insert(EventDelivery).on_conflict_do_nothing(), rows)


def backoff(attempts: int) -> timedelta:
    base = current_app.config["TASK_RUNNER_EVENT_RETRY_SECONDS"]
    # Capped before a timedelta is made: a delivery an operator re-delivers again and again
    # doubles past what a timedelta holds (2 ** 41 minutes) long after the cap was reached.
    doubled = base * 2.0 ** min(attempts - 1, 64)
    return timedelta(seconds=min(doubled, MAX_BACKOFF.total_seconds()))


def relay(older_than_seconds: int = 60, limit: int = 500) -> int:
    """Hand over events no process delivered, then retry due refusals; return how many."""
    session = db.session
    cutoff = utcnow() - timedelta(seconds=older_than_seconds)
    stranded = [
        event_dict(row)
        for row in session.execute(
            select(OutboxEvent)
            .where(OutboxEvent.delivered_at.is_(None), OutboxEvent.created_at <= cutoff)
            .order_by(OutboxEvent.id)
            .limit(limit)
        ).scalars()
    ]
    session.rollback()
    deliver(stranded)
    due = session.execute(
        select(EventDelivery.id)
        .where(EventDelivery.parked_at.is_(None), EventDelivery.next_attempt_at <= utcnow())
        .order_by(EventDelivery.next_attempt_at, EventDelivery.id)
        .limit(limit)
    ).scalars()
    return len(stranded) + len(retry(list(due)))


def retry(delivery_ids: Iterable[int]) -> list[bool]:
    """Hand each delivery's event to its subscriber again; True where it was taken.

    Taken: the row goes. Refused: one more attempt, a later try, or parked at the limit.
    """
    session = db.session
    ids = list(delivery_ids)
    if not ids:
        return []
    rows = session.execute(
        select(EventDelivery, OutboxEvent)
        .join(OutboxEvent, OutboxEvent.event_id == EventDelivery.event_id)
        .where(EventDelivery.id.in_(ids))
        .order_by(EventDelivery.id)
    ).all()
    attempts = [(d.id, d.attempts, d.subscriber, event_dict(e)) for d, e in rows]
    session.rollback()
    outcomes = [(i, n, ev.hand_over(event, name)) for i, n, name, event in attempts]
    limit = current_app.config["TASK_RUNNER_EVENT_MAX_ATTEMPTS"]
    now = utcnow()
    with write_transaction(session):
        taken = [i for i, _, reason in outcomes if reason is None]
        if taken:
            session.execute(
                delete(EventDelivery)
                .where(EventDelivery.id.in_(taken))
                .execution_options(synchronize_session=False)
            )
        for delivery_id, tried, reason in outcomes:
            if reason is None:
                continue
            session.execute(
                update(EventDelivery)
                .where(EventDelivery.id == delivery_id)
                .values(
                    attempts=tried + 1,
                    last_error=bounded(reason),
                    next_attempt_at=now + backoff(tried + 1),
                    parked_at=now if tried + 1 >= limit else EventDelivery.parked_at,
                    updated_at=now,
                )
                .execution_options(synchronize_session=False)
            )
    return [reason is None for _, _, reason in outcomes]


def parked(run_id: int | None = None, limit: int = 100) -> list[ParkedDelivery]:
    """Parked deliveries, newest first: of one run, or all."""
    stmt = (
        select(EventDelivery, OutboxEvent.name, TaskRun.uuid)
        .join(OutboxEvent, OutboxEvent.event_id == EventDelivery.event_id)
        .outerjoin(TaskRun, TaskRun.id == OutboxEvent.task_run_id)
        .where(EventDelivery.parked_at.is_not(None))
    )
    if run_id is not None:
        stmt = stmt.where(OutboxEvent.task_run_id == run_id)
    rows = db.session.execute(stmt.order_by(EventDelivery.id.desc()).limit(limit)).all()
    return [
        ParkedDelivery(
            d.event_id, name, run_uuid, d.subscriber, d.attempts, d.last_error, d.parked_at
        )
        for d, name, run_uuid in rows
    ]


def count_parked() -> int:
    return db.session.execute(
        select(func.count()).where(EventDelivery.parked_at.is_not(None))
    ).scalar_one()


def redeliver_parked(event_ids: Iterable[str] = ()) -> tuple[int, int]:
    """Hand parked deliveries (of these events, or all) over again now: (taken, refused)."""
    wanted = [event_id.lower() for event_id in event_ids]  # a uuid in capitals is the same
    stmt = select(EventDelivery.id).where(EventDelivery.parked_at.is_not(None))
    if wanted:
        stmt = stmt.where(EventDelivery.event_id.in_(wanted))
    ids = list(db.session.execute(stmt.order_by(EventDelivery.id)).scalars())
    outcomes = retry(ids)
    taken = sum(outcomes)
    return taken, len(outcomes) - taken
