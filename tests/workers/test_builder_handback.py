"""A builder consumer stopped with SIGTERM mid-step hands the step back; the run finishes."""

from __future__ import annotations

import json
import signal

import pytest
from sqlalchemy import select

from coursebuilder import stages
from coursebuilder import steps as builder_steps
from coursebuilder.models import GenerationRun, GenerationStep
from extensions import db
from tenancy.models import Tenant
from tests.support import wait_for

pytestmark = pytest.mark.workers


def step(key: str) -> GenerationStep:
    db.session.rollback()
    return db.session.execute(select(GenerationStep).where(GenerationStep.key == key)).scalar_one()


def finished(run_uuid: str) -> GenerationRun:
    """The build once it is no longer running (its steps run in other processes)."""

    def done() -> GenerationRun | None:
        db.session.rollback()
        return db.session.execute(
            select(GenerationRun).where(
                GenerationRun.uuid == run_uuid, GenerationRun.status != "running"
            )
        ).scalar_one_or_none()

    return wait_for(done, timeout=60, message="the run to finish")


def test_a_step_interrupted_by_sigterm_is_queued_again_and_run_by_the_next_consumer(ctx, consumers):
    db.session.add(Tenant(id=9, name="Hooli"))
    db.session.commit()
    run_uuid = stages.start(
        9, "Handed back", lessons=1, quizzes=0, concurrency=1, fake={"latency_ms": 1000}
    )
    first = consumers.start("builder", workers=1)
    wait_for(
        lambda: step("outline-1").status == "running", timeout=30, message="the first step to start"
    )

    first.send_signal(signal.SIGTERM)  # to the consumer only, as systemd's KillMode=mixed
    first.wait(timeout=15)
    handed = step("outline-1")
    assert (handed.status, handed.attempts) == ("queued", 1)

    consumers.start("builder", workers=1)
    run = finished(run_uuid)
    assert run.status == "completed", run.failure_reason
    assert step("outline-1").attempts == 2
    assert "handed back on shutdown" in consumers.logs()


def test_a_step_whose_consumer_was_killed_is_recovered_by_the_sweep(ctx, consumers):
    from datetime import timedelta

    from database import utcnow

    db.session.add(Tenant(id=9, name="Hooli"))
    db.session.commit()
    run_uuid = stages.start(
        9, "Killed", lessons=1, quizzes=0, concurrency=1, fake={"latency_ms": 1000}
    )
    first = consumers.start("builder", workers=1)
    wait_for(
        lambda: step("outline-1").status == "running",
        timeout=30,
        message="the first step to start",
    )
    consumers.kill(first)  # SIGKILL: no signal handler runs, the step stays "running"
    assert step("outline-1").status == "running"

    # Nothing is recovered before the step could still be alive...
    assert builder_steps.recover() == 0
    # ...and once it has outlived its hard timeout, the sweep queues it again.
    later = utcnow() + timedelta(minutes=builder_steps.STEP_STUCK_AFTER_MINUTES + 1)
    assert builder_steps.recover(later) == 1
    consumers.start("builder", workers=1)
    run = finished(run_uuid)
    assert run.status == "completed", run.failure_reason
    assert step("outline-1").attempts == 2


def test_a_step_whose_consumer_was_killed_does_not_read_as_running_once_its_build_failed(
    ctx, consumers, cli
):
    from coursebuilder import reports

    db.session.add(Tenant(id=9, name="Hooli"))
    db.session.commit()
    run_uuid = stages.start(
        9,
        "Killed, then failed",
        lessons=2,
        quizzes=0,
        concurrency=2,
        fake={"latency_ms": 1500, "fail_steps": ["outline-2"]},
    )
    first = consumers.start("builder", workers=1)
    wait_for(
        lambda: step("outline-1").status == "running", timeout=30, message="outline-1 to start"
    )
    consumers.kill(first)  # SIGKILL mid-step: outline-1 is left "running"
    consumers.start("builder", workers=1)  # runs outline-2, whose failure fails the build
    run = finished(run_uuid)
    assert run.status == "failed", run.failure_reason

    killed = step("outline-1")
    assert killed.status == "failed"
    assert killed.error == stages.INTERRUPTED
    shown = {s["key"]: s["status"] for s in reports.steps_of(run)["outline"]}
    assert shown == {"outline-1": "failed", "outline-2": "failed"}
    result = cli.invoke(args=["builder", "status", run_uuid, "--json"])
    assert result.exit_code == 0, result.output
    counts = json.loads(result.stdout)["stages"][0]["steps"]
    assert (counts["running"], counts["failed"]) == (0, 2)
    # A retry queues both again and the build finishes (nothing waits for a dead step).
    db.session.rollback()
    assert stages.retry(run_uuid) == ("outline", 2)
