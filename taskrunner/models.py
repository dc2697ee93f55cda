"""Ledger tables. Only the ledger (``taskrunner.ledger`` and its delivery state,
``taskrunner.delivery``) reads and writes them.

Every ledger key is AUTOINCREMENT on SQLite: a plain rowid is reused after the
newest row is deleted (a prune), and an id that comes back names another run.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db

ACTIVE_UNIT = "status IN ('pending', 'running')"
# A slot still running, or handed back for its job enqueued anew.
UNENDED_SLOT = "outcome IS NULL OR outcome = 'handed_back'"
# Ids never reused on SQLite (PostgreSQL's identity sequences never reuse them either).
NO_REUSE = {"sqlite_autoincrement": True}


def new_uuid() -> str:
    return str(uuid.uuid4())


class TaskRun(db.Model):
    __tablename__ = "task_runs"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, default=new_uuid)
    type: Mapped[str] = mapped_column(String(120))
    status: Mapped[str] = mapped_column(String(32))
    initiator: Mapped[str] = mapped_column(String(120))
    context: Mapped[dict] = mapped_column(JSON, default=dict)
    units_total: Mapped[int] = mapped_column(Integer, default=0)
    units_completed: Mapped[int] = mapped_column(Integer, default=0)
    units_failed: Mapped[int] = mapped_column(Integer, default=0)
    units_skipped: Mapped[int] = mapped_column(Integer, default=0)
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    created_by: Mapped[str | None] = mapped_column(String(120))
    updated_by: Mapped[str | None] = mapped_column(String(120))
    deleted_at: Mapped[datetime | None]
    # A single tracked job's Huey task id (also in ``context``): its retries re-find the
    # run by this unique key, and two first attempts cannot open two runs.
    dispatch_uuid: Mapped[str | None] = mapped_column(String(64))

    __table_args__ = (
        # Run list: newest first by id (keyset pagination), optionally by type or status.
        Index("ix_task_runs_type_id", "type", "id"),
        Index("ix_task_runs_status_id", "status", "id"),
        Index("ix_task_runs_finished_at", "finished_at"),
        Index("uq_task_runs_dispatch_uuid", "dispatch_uuid", unique=True),
        NO_REUSE,
    )


class TaskRunUnit(db.Model):
    __tablename__ = "task_run_units"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_run_id: Mapped[int] = mapped_column(
        ForeignKey("task_runs.id", ondelete="CASCADE"),
    )
    unit_key: Mapped[str] = mapped_column(String(191))
    tenant_id: Mapped[int | None] = mapped_column(BigInteger)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    # The reason folded as its error group (``ledger.reason_fold``), written with it.
    reason_fold: Mapped[str | None] = mapped_column(Text)
    # The last failure's kind (``taskrunner.failures``) and its redacted frames.
    failure_kind: Mapped[str | None] = mapped_column(String(16))
    stack: Mapped[list | None] = mapped_column(JSON)
    dispatch_token: Mapped[str | None] = mapped_column(String(32))
    queued_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    stuck_notified_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    deleted_at: Mapped[datetime | None]

    __table_args__ = (
        Index(
            "uq_task_run_units_run_key_live",
            "task_run_id",
            "unit_key",
            unique=True,
            postgresql_where=text("deleted_at IS NULL"),
            sqlite_where=text("deleted_at IS NULL"),
        ),
        # The finalization check and per-status listings of one run.
        Index("ix_task_run_units_run_status", "task_run_id", "status", "id"),
        # A run's live counts per status, read from the index alone (no row visited):
        # 100,000 units of a running run counted in milliseconds on every run page.
        Index(
            "ix_task_run_units_run_live_status",
            "task_run_id",
            "status",
            postgresql_where=text("deleted_at IS NULL"),
            sqlite_where=text("deleted_at IS NULL"),
        ),
        # Stale units across runs and in one run: only the active rows are indexed, by
        # when they were queued ("never started" of a million pending units reads only
        # those old enough; running units are few, whatever their heartbeat).
        Index(
            "ix_task_run_units_active",
            "status",
            "queued_at",
            postgresql_where=text(ACTIVE_UNIT),
            sqlite_where=text(ACTIVE_UNIT),
        ),
        # History of one unit key or one tenant across runs.
        Index("ix_task_run_units_key", "unit_key", "id"),
        Index("ix_task_run_units_tenant", "tenant_id", "id"),
        # The console's throughput strip: units finished in the last 24 h.
        Index("ix_task_run_units_finished", "finished_at", "status"),
        NO_REUSE,
    )


class OperatorAction(db.Model):
    __tablename__ = "operator_actions"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    task_run_id: Mapped[int | None] = mapped_column(ForeignKey("task_runs.id", ondelete="CASCADE"))
    action: Mapped[str] = mapped_column(String(32))
    actor: Mapped[str] = mapped_column(String(191))
    source: Mapped[str] = mapped_column(String(16))
    address: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index("ix_operator_actions_run", "task_run_id", "id"), NO_REUSE)


class OutboxEvent(db.Model):
    __tablename__ = "task_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    event_id: Mapped[str] = mapped_column(String(36), unique=True, default=new_uuid)
    name: Mapped[str] = mapped_column(String(64))
    task_run_id: Mapped[int | None] = mapped_column(ForeignKey("task_runs.id", ondelete="CASCADE"))
    payload: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None]

    __table_args__ = (
        Index("ix_task_events_run", "task_run_id", "id"),
        Index(
            "ix_task_events_undelivered",
            "id",
            postgresql_where=text("delivered_at IS NULL"),
            sqlite_where=text("delivered_at IS NULL"),
        ),
        NO_REUSE,
    )


class EventDelivery(db.Model):
    """One subscriber's delivery of one event that it refused at least once.

    An event is handed to every subscriber once (``task_events.delivered_at``); a
    subscriber that refuses it gets a row here and retries on its own clock, with
    backoff, until it takes the event or is parked after too many tries. Subscribers
    that took the event never see it again, and a refusing one blocks nobody.
    """

    __tablename__ = "task_event_deliveries"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    event_id: Mapped[str] = mapped_column(
        String(36), ForeignKey("task_events.event_id", ondelete="CASCADE")
    )
    subscriber: Mapped[str] = mapped_column(String(191))
    attempts: Mapped[int] = mapped_column(Integer, default=1)
    last_error: Mapped[str | None] = mapped_column(Text)
    next_attempt_at: Mapped[datetime] = mapped_column(default=utcnow)
    parked_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    __table_args__ = (
        Index("uq_task_event_deliveries_event_subscriber", "event_id", "subscriber", unique=True),
        # The relay's due retries, and the parked list: each a small partial index.
        Index(
            "ix_task_event_deliveries_due",
            "next_attempt_at",
            postgresql_where=text("parked_at IS NULL"),
            sqlite_where=text("parked_at IS NULL"),
        ),
        Index(
            "ix_task_event_deliveries_parked",
            "parked_at",
            "id",
            postgresql_where=text("parked_at IS NOT NULL"),
            sqlite_where=text("parked_at IS NOT NULL"),
        ),
        NO_REUSE,
    )


class TaskTypePause(db.Model):
    """A paused task type: its units stay pending, spending no try and never expiring.

    The gate lets no unit of a paused type through (``ledger.NOT_PAUSED``); resuming
    re-dispatches the units that waited.
    """

    __tablename__ = "task_type_pauses"

    type: Mapped[str] = mapped_column(String(120), primary_key=True)
    paused_at: Mapped[datetime] = mapped_column(default=utcnow)
    paused_by: Mapped[str] = mapped_column(String(191))


class UnitThroughput(db.Model):
    """Units settled per minute and task type, rolled up from the ledger every minute.

    Counting the units a busy hour settled from the unit rows themselves reads tens of
    thousands of rows per page view; the periodic roll-up reads each minute once. A row
    with the empty type marks a minute as rolled (a quiet minute has no other row).
    """

    __tablename__ = "unit_throughput"

    minute: Mapped[datetime] = mapped_column(primary_key=True)
    type: Mapped[str] = mapped_column(String(120), primary_key=True)
    completed: Mapped[int] = mapped_column(Integer, default=0)
    failed: Mapped[int] = mapped_column(Integer, default=0)


class ScheduleSlot(db.Model):
    """One slot of a periodic schedule: claimed by one host, run, and how it ended.

    The primary key lets one claim of a slot through however many schedulers owe it.
    A slot nobody claimed within its grace is written ``missed`` by the watch (so a gap
    stays visible after the schedulers are back); one skipped by a pause, ``paused``.
    """

    __tablename__ = "periodic_slots"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    slot: Mapped[datetime] = mapped_column(primary_key=True)
    claimed_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_by: Mapped[str] = mapped_column(String(191))
    enqueued_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # None while it runs; "ok", "raised" (or its worker lost), "missed", "paused", or
    # "handed_back" (queued again).
    outcome: Mapped[str | None] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(Text)
    run_uuid: Mapped[str | None] = mapped_column(String(36))
    initiator: Mapped[str | None] = mapped_column(String(191))

    # The badge's count reads the missed rows alone, however many slots a year holds.
    __table_args__ = (
        Index(
            "ix_periodic_slots_missed",
            "name",
            "slot",
            postgresql_where=text("outcome = 'missed'"),
            sqlite_where=text("outcome = 'missed'"),
        ),
        # The sweep's looks for slots a lost worker or a lost job left: those not ended.
        Index(
            "ix_periodic_slots_unended",
            "name",
            "claimed_at",
            postgresql_where=text(UNENDED_SLOT),
            sqlite_where=text(UNENDED_SLOT),
        ),
    )


class ScheduleState(db.Model):
    """What the app knows of one schedule beyond its declaration.

    ``first_known_at`` starts the count of missed slots (a new schedule or a deploy is
    no missed slot), ``watched_until`` is where the watch's next look starts; a pause is
    honoured by every scheduler at its next check; an open missed episode
    (``missed_from``) has raised its one event and ends at the next run.
    """

    __tablename__ = "schedule_states"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    first_known_at: Mapped[datetime] = mapped_column(default=utcnow)
    paused_at: Mapped[datetime | None]
    paused_by: Mapped[str | None] = mapped_column(String(191))
    missed_from: Mapped[datetime | None]
    missed_slots: Mapped[int] = mapped_column(Integer, default=0)
    # How far the watch looked for unclaimed slots: its next turn starts there, so a gap
    # the schedulers left (all of them down, then back) is found after they are back.
    watched_until: Mapped[datetime | None]
