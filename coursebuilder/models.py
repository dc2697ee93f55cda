"""Generation runs, their steps and their events.

A run moves through ``STAGES``; its ``stage`` column is the stage that is open.
Steps are created when their stage opens, in the same transaction that closes
the stage before it, so an open stage always has its steps.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db

STAGES = ("outline", "lessons", "quizzes", "review")
FINISHED_STAGE = "done"


class RunStatus:
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"


class StepStatus:
    PENDING = "pending"
    QUEUED = "queued"  # claimed by the dispatch window and enqueued; counts against it
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    # Not run because its build failed first; a retry makes it pending again.
    SKIPPED = "skipped"


IN_FLIGHT = (StepStatus.QUEUED, StepStatus.RUNNING)
UNFINISHED = (StepStatus.PENDING, *IN_FLIGHT)


class EventKind:
    STAGE_OPENED = "STAGE_OPENED"
    STAGE_CLOSED = "STAGE_CLOSED"
    STEP_FINISHED = "STEP_FINISHED"
    STEP_FAILED = "STEP_FAILED"
    RUN_RETRIED = "RUN_RETRIED"
    RUN_FINISHED = "RUN_FINISHED"


def _new_uuid() -> str:
    return str(uuid.uuid4())


class GenerationRun(db.Model):
    __tablename__ = "builder_runs"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, default=_new_uuid)
    tenant_id: Mapped[int] = mapped_column(BigInteger)
    title: Mapped[str] = mapped_column(String(191))
    options: Mapped[dict] = mapped_column(JSON, default=dict)
    concurrency: Mapped[int] = mapped_column(Integer, default=2)
    status: Mapped[str] = mapped_column(String(16), default=RunStatus.RUNNING)
    stage: Mapped[str] = mapped_column(String(16))
    failure_reason: Mapped[str | None] = mapped_column(Text)
    initiator: Mapped[str] = mapped_column(String(120), default="cli")
    started_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    __table_args__ = (
        Index("ix_builder_runs_tenant_id", "tenant_id", "id"),
        Index("ix_builder_runs_status_id", "status", "id"),
    )


class GenerationStep(db.Model):
    __tablename__ = "builder_steps"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("builder_runs.id", ondelete="CASCADE"))
    stage: Mapped[str] = mapped_column(String(16))
    key: Mapped[str] = mapped_column(String(64))
    position: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(16), default=StepStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    output: Mapped[str | None] = mapped_column(Text)
    error: Mapped[str | None] = mapped_column(Text)
    queued_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        # The window's count and claim, and "is this stage done?", read by run and status.
        Index("ix_builder_steps_run_status", "run_id", "status", "position"),
        Index("uq_builder_steps_run_stage_key", "run_id", "stage", "key", unique=True),
    )


class GenerationEvent(db.Model):
    __tablename__ = "builder_events"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    run_id: Mapped[int] = mapped_column(ForeignKey("builder_runs.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(32))
    stage: Mapped[str | None] = mapped_column(String(16))
    step: Mapped[str | None] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index("ix_builder_events_run_id", "run_id", "id"),)
