"""Ledger tables. Only ``taskrunner.ledger`` reads and writes them."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db

ACTIVE_UNIT = "status IN ('pending', 'running')"


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

    __table_args__ = (
        # Run list: newest first by id (keyset pagination), optionally by type or status.
        Index("ix_task_runs_type_id", "type", "id"),
        Index("ix_task_runs_status_id", "status", "id"),
        Index("ix_task_runs_finished_at", "finished_at"),
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
        # Stale sweep across runs: only the few active rows are indexed.
        Index(
            "ix_task_run_units_active",
            "status",
            "heartbeat_at",
            postgresql_where=text(ACTIVE_UNIT),
            sqlite_where=text(ACTIVE_UNIT),
        ),
        # History of one unit key or one tenant across runs.
        Index("ix_task_run_units_key", "unit_key", "id"),
        Index("ix_task_run_units_tenant", "tenant_id", "id"),
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

    __table_args__ = (Index("ix_operator_actions_run", "task_run_id", "id"),)


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
    )
