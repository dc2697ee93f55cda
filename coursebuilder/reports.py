"""Read shapes of generation runs, shared by ``flask builder status --json`` and the pages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from coursebuilder.models import (
    STAGES,
    EventKind,
    GenerationEvent,
    GenerationRun,
    GenerationStep,
    StepStatus,
)
from coursebuilder.stages import NOT_DONE, plan
from extensions import db

COUNTED = ("pending", "running", "completed", "failed", "skipped")
# A claimed step waiting in the queue has not started: it is shown as pending.
SHOWN_AS = {StepStatus.QUEUED: StepStatus.PENDING}


def iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="milliseconds") + "Z" if value else None


def run_status(run: GenerationRun) -> dict[str, Any]:
    """The shape README's "Course builder" shows: stages with their step counts, events."""
    counts: dict[str, dict[str, int]] = {
        stage: {"total": 0, **dict.fromkeys(COUNTED, 0)} for stage in STAGES
    }
    for stage, status, count in db.session.execute(
        select(GenerationStep.stage, GenerationStep.status, func.count())
        .where(GenerationStep.run_id == run.id)
        .group_by(GenerationStep.stage, GenerationStep.status)
    ):
        counts[stage]["total"] += count
        counts[stage][SHOWN_AS.get(status, status)] += count
    events = list(
        db.session.execute(
            select(GenerationEvent)
            .where(GenerationEvent.run_id == run.id)
            .order_by(GenerationEvent.id)
        ).scalars()
    )
    opened = {e.stage: e.at for e in reversed(events) if e.kind == EventKind.STAGE_OPENED}
    closed = {e.stage: e.at for e in reversed(events) if e.kind == EventKind.STAGE_CLOSED}
    return {
        "uuid": run.uuid,
        "title": run.title,
        "tenant_id": run.tenant_id,
        "status": run.status,
        "stage": run.stage,
        "concurrency": run.concurrency,
        "failure_reason": run.failure_reason,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "stages": [
            {
                "name": stage,
                "opened_at": iso(opened.get(stage)),
                "closed_at": iso(closed.get(stage)),
                "steps": counts[stage],
            }
            for stage in STAGES
        ],
        "events": [
            {"kind": e.kind, "stage": e.stage, "step": e.step, "at": iso(e.at)} for e in events
        ],
    }


def progress(run: GenerationRun, status: dict[str, Any]) -> int:
    """Percent of the run's planned steps that are done."""
    planned = sum(len(plan(stage, run.options)) for stage in STAGES)
    done = sum(s["steps"]["completed"] for s in status["stages"])
    return 100 if planned == 0 else min(100, round(100 * done / planned))


def steps_of(run: GenerationRun) -> dict[str, list[dict[str, Any]]]:
    """Every step of the run, by stage, for the run page."""
    steps: dict[str, list[dict[str, Any]]] = {stage: [] for stage in STAGES}
    for step in db.session.execute(
        select(GenerationStep).where(GenerationStep.run_id == run.id).order_by(GenerationStep.id)
    ).scalars():
        steps[step.stage].append(
            {
                "key": step.key,
                "status": SHOWN_AS.get(step.status, step.status),
                "attempts": step.attempts,
                "error": step.error,
                "started_at": iso(step.started_at),
                "finished_at": iso(step.finished_at),
            }
        )
    return steps


def recent_runs(limit: int = 50, before_id: int | None = None) -> list[GenerationRun]:
    stmt = select(GenerationRun).order_by(GenerationRun.id.desc()).limit(limit)
    if before_id is not None:
        stmt = stmt.where(GenerationRun.id < before_id)
    return list(db.session.execute(stmt).scalars())


def retryable_steps(run: GenerationRun) -> int:
    """Steps a retry would queue again: the failed stage's failed and not-run ones."""
    if run.status != "failed":
        return 0
    return db.session.execute(
        select(func.count()).where(
            GenerationStep.run_id == run.id,
            GenerationStep.stage == run.stage,
            GenerationStep.status.in_(NOT_DONE),
        )
    ).scalar_one()
