"""``0024_interrupted_steps``: a step an ended build left running reads as interrupted.

Builds that failed before a build's failure interrupted its running steps kept a step
whose worker was killed running for ever; the upgrade fails such steps as interrupted and
leaves every other step, and the steps of running builds, as they were.
"""

from __future__ import annotations

import importlib
from datetime import datetime

from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import select

from coursebuilder.models import GenerationRun, GenerationStep, RunStatus, StepStatus
from coursebuilder.stages import INTERRUPTED
from extensions import db

migration = importlib.import_module("migrations.versions.0024_interrupted_steps")
ENDED = datetime(2026, 12, 1, 10, 0)
STARTED = datetime(2026, 12, 1, 9, 0)


def build(status: str, steps: dict[str, str]) -> int:
    run = GenerationRun(tenant_id=1, title="t", status=status, stage="outline", finished_at=None)
    if status != RunStatus.RUNNING:
        run.finished_at = ENDED
    db.session.add(run)
    db.session.flush()
    for position, (key, step_status) in enumerate(steps.items()):
        db.session.add(
            GenerationStep(
                run_id=run.id,
                stage="outline",
                key=key,
                position=position,
                status=step_status,
                started_at=STARTED,
            )
        )
    db.session.commit()
    return run.id


def steps() -> dict[str, tuple[str, str | None, datetime | None]]:
    rows = db.session.execute(
        select(
            GenerationStep.key,
            GenerationStep.status,
            GenerationStep.error,
            GenerationStep.finished_at,
        )
    ).all()
    db.session.remove()
    return {key: (status, error, finished) for key, status, error, finished in rows}


def test_the_upgrade_fails_as_interrupted_the_steps_an_ended_build_left_running(ctx):
    build(RunStatus.FAILED, {"lost": StepStatus.RUNNING, "done": StepStatus.COMPLETED})
    build(RunStatus.RUNNING, {"alive": StepStatus.RUNNING, "waiting": StepStatus.QUEUED})

    db.session.remove()
    with db.engine.begin() as conn:
        with Operations.context(MigrationContext.configure(conn)):
            migration.upgrade()

    assert steps() == {
        "lost": (StepStatus.FAILED, INTERRUPTED, ENDED),
        "done": (StepStatus.COMPLETED, None, None),
        "alive": (StepStatus.RUNNING, None, None),
        "waiting": (StepStatus.QUEUED, None, None),
    }
