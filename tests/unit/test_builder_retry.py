"""Retrying a failed course build from its failed stage: service, CLI and what it refuses."""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from coursebuilder import stages
from coursebuilder import steps as builder_steps
from coursebuilder.models import GenerationRun, GenerationStep
from extensions import db
from tenancy import services as tenants
from tests.unit.test_builder_service import add_tenant, events_of, run_of, steps_of


def heal(run: GenerationRun) -> None:
    """The vendor is back: the fake driver stops failing the injected step."""
    db.session.execute(
        update(GenerationRun).where(GenerationRun.id == run.id).values(options={"lessons": 3})
    )
    db.session.commit()


def failed_build() -> GenerationRun:
    add_tenant()
    run = run_of(
        stages.start(
            1, "Tides", lessons=3, quizzes=0, concurrency=1, fake={"fail_steps": ["lesson-2"]}
        )
    )
    assert run.status == "failed"
    return run


def test_a_failed_build_resumes_from_its_failed_stage_and_finishes(inline_ctx):
    run = failed_build()
    outline_done = {k: s.finished_at for k, s in steps_of(run).items() if k.startswith("outline")}
    lesson_1 = steps_of(run)["lesson-1"]
    assert lesson_1.status == "completed"
    first_output = lesson_1.output
    heal(run)

    stage, queued = stages.retry(run.uuid, actor="ops@example.com")

    assert (stage, queued) == ("lessons", 2)  # lesson-2 (failed) and lesson-3 (skipped)
    run = run_of(run.uuid)
    assert run.status == "completed" and run.failure_reason is None
    steps = steps_of(run)
    assert all(s.status == "completed" for s in steps.values())
    # Earlier stages and finished steps of the failed stage are not run again.
    assert {k: s.finished_at for k, s in steps.items() if k.startswith("outline")} == outline_done
    assert (steps["lesson-1"].attempts, steps["lesson-1"].output) == (1, first_output)
    assert steps["lesson-2"].attempts == 2
    kinds = [(e.kind, e.stage) for e in events_of(run)]
    assert kinds.count(("RUN_RETRIED", "lessons")) == 1
    assert kinds.count(("STAGE_OPENED", "lessons")) == 1  # the stage is resumed, not reopened
    assert [k for k, _ in kinds].count("RUN_FINISHED") == 2


def test_a_retried_build_that_fails_again_is_failed_again(inline_ctx):
    run = failed_build()

    stages.retry(run.uuid)

    run = run_of(run.uuid)
    assert run.status == "failed"
    assert steps_of(run)["lesson-2"].attempts == 2
    assert steps_of(run)["lesson-3"].status == "skipped"


@pytest.mark.parametrize("state", ["running", "completed"])
def test_only_a_failed_build_can_be_retried(ctx, state):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0))  # queue left undrained
    if state == "completed":
        db.session.execute(
            update(GenerationRun).where(GenerationRun.id == run.id).values(status="completed")
        )
        db.session.commit()
    with pytest.raises(stages.BuilderError, match=f"is {state}; only a failed run"):
        stages.retry(run.uuid)


def test_the_failed_build_of_a_closed_tenant_is_not_retried(inline_ctx, cli):
    # As at start: its steps would call the model again for a tenant that has left.
    run = failed_build()
    heal(run)
    tenants.close(run.tenant_id)
    before = {k: (s.status, s.attempts) for k, s in steps_of(run).items()}

    with pytest.raises(stages.BuilderError, match="^tenant 1 is closed; its build is not"):
        stages.retry(run.uuid)
    refused = cli.invoke(args=["builder", "retry", run.uuid])

    assert (refused.exit_code, refused.stderr) == (
        1,
        "error: tenant 1 is closed; its build is not retried\n",
    )
    run = run_of(run.uuid)
    assert (run.status, run.stage) == ("failed", "lessons")
    assert {k: (s.status, s.attempts) for k, s in steps_of(run).items()} == before
    assert "RUN_RETRIED" not in [e.kind for e in events_of(run)]


def test_a_step_job_queued_before_the_failure_does_nothing_after_it(ctx):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=3, quizzes=0, concurrency=2))
    queued = [s.id for s in steps_of(run).values() if s.status == "queued"]
    stages.fail_run(run.id, None, "dispatch failed: queue down")
    assert {s.status for s in steps_of(run_of(run.uuid)).values()} == {"skipped"}

    builder_steps.execute_step(queued[0])

    step = db.session.execute(
        select(GenerationStep).where(GenerationStep.id == queued[0])
    ).scalar_one()
    assert (step.status, step.attempts) == ("skipped", 0)


def test_builder_retry_command_prints_the_uuid_or_refuses_in_one_line(inline_ctx, cli):
    run = failed_build()
    heal(run)

    done = cli.invoke(args=["builder", "retry", run.uuid.upper()])
    assert done.exit_code == 0, done.output
    assert done.stdout.strip().splitlines()[-1] == run.uuid
    assert "retrying stage lessons: 2 steps queued again" in done.stderr

    again = cli.invoke(args=["builder", "retry", run.uuid])
    assert again.exit_code == 1
    assert (
        again.stderr.strip()
        == f"error: run {run.uuid} is completed; only a failed run can be retried"
    )
    unknown = cli.invoke(args=["builder", "retry", "nope"])
    assert (unknown.exit_code, unknown.stderr.strip()) == (1, "error: no builder run 'nope'")
