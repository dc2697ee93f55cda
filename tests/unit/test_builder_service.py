"""The generation service and ``flask builder``, inline and with the queue left undrained."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select, update

from coursebuilder import stages
from coursebuilder import steps as builder_steps
from coursebuilder.llm import FakeDriver
from coursebuilder.models import GenerationEvent, GenerationRun, GenerationStep
from extensions import db
from live import topics as live
from taskrunner.jobs import GATE_PAUSES
from tenancy import services as tenants
from tenancy.models import Tenant
from tests.support import huey_stop_interrupt, see_logs
from tests.unit.test_ledger_edges import gate_breaks


def add_tenant(tenant_id: int = 1) -> None:
    db.session.add(Tenant(id=tenant_id, name=f"Tenant {tenant_id}"))
    db.session.commit()


def run_of(run_uuid: str) -> GenerationRun:
    db.session.rollback()
    return db.session.execute(
        select(GenerationRun).where(GenerationRun.uuid == run_uuid)
    ).scalar_one()


def events_of(run: GenerationRun) -> list[GenerationEvent]:
    return list(
        db.session.execute(
            select(GenerationEvent)
            .where(GenerationEvent.run_id == run.id)
            .order_by(GenerationEvent.id)
        ).scalars()
    )


def steps_of(run: GenerationRun) -> dict[str, GenerationStep]:
    return {
        s.key: s
        for s in db.session.execute(
            select(GenerationStep).where(GenerationStep.run_id == run.id)
        ).scalars()
    }


def test_a_run_without_quizzes_closes_that_stage_in_the_transaction_that_opens_it(inline_ctx):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=2, quizzes=0, concurrency=2))

    assert (run.status, run.stage) == ("completed", "done")
    kinds = [(e.kind, e.stage) for e in events_of(run) if e.kind != "STEP_FINISHED"]
    assert kinds == [
        ("STAGE_OPENED", "outline"),
        ("STAGE_CLOSED", "outline"),
        ("STAGE_OPENED", "lessons"),
        ("STAGE_CLOSED", "lessons"),
        ("STAGE_OPENED", "quizzes"),
        ("STAGE_CLOSED", "quizzes"),
        ("STAGE_OPENED", "review"),
        ("STAGE_CLOSED", "review"),
        ("RUN_FINISHED", None),
    ]
    at = {(e.kind, e.stage): e.at for e in events_of(run)}
    assert (
        at[("STAGE_OPENED", "quizzes")]
        == at[("STAGE_CLOSED", "quizzes")]
        == at[("STAGE_OPENED", "review")]
    )
    assert sorted(steps_of(run)) == [
        "lesson-1",
        "lesson-2",
        "outline-1",
        "outline-2",
        "review-1",
        "review-2",
    ]


def test_each_step_prompt_builds_on_the_stage_before(inline_ctx):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=1, concurrency=1))
    steps = steps_of(run)
    assert run.status == "completed"
    assert steps["outline-1"].output in steps["lesson-1"].output
    assert steps["lesson-1"].output in steps["quiz-1"].output


def test_a_failed_step_fails_the_run_and_nothing_after_it_runs(inline_ctx):
    add_tenant()
    run = run_of(
        stages.start(
            1, "Tides", lessons=3, quizzes=1, concurrency=1, fake={"fail_steps": ["lesson-2"]}
        )
    )

    assert run.status == "failed"
    assert run.failure_reason == (
        "step lessons/lesson-2 failed: fake driver failure injected for step lesson-2"
    )
    steps = steps_of(run)
    assert (steps["lesson-2"].status, steps["lesson-2"].error) == ("failed", run.failure_reason)
    # What had not started is skipped, never left pending; the failed step says failed.
    assert (steps["lesson-3"].status, steps["lesson-3"].attempts) == ("skipped", 0)
    assert ("STEP_FAILED", "lesson-2") in [(e.kind, e.step) for e in events_of(run)]
    assert ("STEP_FINISHED", "lesson-2") not in [(e.kind, e.step) for e in events_of(run)]
    assert not any(key.startswith(("quiz", "review")) for key in steps)
    assert [e.kind for e in events_of(run)].count("RUN_FINISHED") == 1


def test_a_vendor_error_leaves_only_its_class_name_in_the_reason(inline_ctx, monkeypatch):
    def leak(self, prompt):
        raise RuntimeError("upstream said: key sk_live_LEAKED in https://x/?token=abc")

    monkeypatch.setattr(FakeDriver, "complete", leak)
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0))

    assert see_logs(r"builtins\.RuntimeError", "step outline/outline-1 failed: ").fullmatch(
        run.failure_reason
    )
    for table in ("builder_runs", "builder_steps", "builder_events"):
        rows = db.session.execute(db.metadata.tables[table].select()).all()
        assert "sk_live_LEAKED" not in repr(rows)


def test_a_step_whose_code_calls_sys_exit_fails_its_run(inline_ctx, monkeypatch):
    def exits(self, prompt):
        raise SystemExit(3)

    monkeypatch.setattr(FakeDriver, "complete", exits)
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0))

    assert run.status == "failed"
    assert see_logs(r"builtins\.SystemExit", "step outline/outline-1 failed: ").fullmatch(
        run.failure_reason
    )


def test_a_stop_masked_by_a_library_error_is_a_stop_not_a_failed_step(ctx, monkeypatch):
    def stopped_mid_call(self, prompt):
        try:
            raise huey_stop_interrupt()  # what Huey raises in a worker it stops
        finally:
            raise RuntimeError("connection in transaction status ACTIVE")  # the mask

    monkeypatch.setattr(FakeDriver, "complete", stopped_mid_call)
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1))

    with pytest.raises(KeyboardInterrupt):  # so that Huey fires SIGNAL_INTERRUPTED
        builder_steps.execute_step(steps_of(run)["outline-1"].id)

    run = run_of(run.uuid)
    assert (run.status, run.failure_reason) == ("running", None)
    assert builder_steps.hand_back(steps_of(run)["outline-1"].id) is True


def test_the_window_claims_at_most_concurrency_steps_and_enqueues_them(ctx):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=5, quizzes=0, concurrency=2))
    builder = ctx.extensions["queues"].huey("builder")

    assert sorted(s.status for s in steps_of(run).values()) == ["pending"] * 3 + ["queued"] * 2
    assert builder.pending_count() == 2
    assert stages.dispatch_window(run.id) == 0
    assert builder.pending_count() == 2


def test_a_duplicate_or_late_step_job_changes_nothing(ctx):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1))
    step = steps_of(run)["outline-1"]
    builder_steps.execute_step(step.id)  # the real job: runs, completes, advances
    builder_steps.execute_step(step.id)  # a redelivery of it

    run = run_of(run.uuid)
    assert steps_of(run)["outline-1"].attempts == 1
    assert [e.kind for e in events_of(run)].count("STEP_FINISHED") == 1
    assert run.stage == "lessons"


def test_a_build_whose_tenant_closes_mid_run_fails_at_its_next_step_without_a_model_call(
    ctx, monkeypatch
):
    calls = []  # the model's calls: outside the machine, the one thing counted by a stand-in
    complete = FakeDriver.complete
    monkeypatch.setattr(FakeDriver, "complete", lambda d, p: calls.append(p) or complete(d, p))
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=2, quizzes=0, concurrency=1))
    builder_steps.execute_step(steps_of(run)["outline-1"].id)
    assert len(calls) == 1
    tenants.close(1)

    builder_steps.execute_step(steps_of(run)["outline-2"].id)

    run = run_of(run.uuid)
    reason = "step outline/outline-2 not run: tenant 1 is closed"
    assert (run.status, run.failure_reason) == ("failed", reason)
    step = steps_of(run)["outline-2"]
    assert (step.status, step.error, step.output) == ("failed", reason, None)
    assert len(calls) == 1


def test_an_interrupted_step_is_handed_back_to_the_queue(ctx):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1))
    step = steps_of(run)["outline-1"]
    db.session.execute(
        update(GenerationStep).where(GenerationStep.id == step.id).values(status="running")
    )
    db.session.commit()
    builder = ctx.extensions["queues"].huey("builder")
    builder.flush()

    assert builder_steps.hand_back(step.id) is True
    assert steps_of(run_of(run.uuid))["outline-1"].status == "queued"
    assert builder.pending_count() == 1
    assert builder_steps.hand_back(step.id) is False


def test_a_step_interrupted_after_its_run_failed_is_failed_and_a_retry_runs_it(ctx):
    # Two steps running; one fails the run, the other's consumer is told to stop. Before,
    # the second stayed "running" for good and the retry, queueing only steps not done,
    # left the stage waiting for it.
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=2, quizzes=0, concurrency=2))
    ids = {key: step.id for key, step in steps_of(run).items()}
    db.session.execute(
        update(GenerationStep).where(GenerationStep.run_id == run.id).values(status="running")
    )
    db.session.commit()
    stages.fail_run(run.id, ids["outline-1"], "step outline/outline-1 failed: boom")

    assert builder_steps.hand_back(ids["outline-2"]) is False
    interrupted = steps_of(run_of(run.uuid))["outline-2"]
    assert (interrupted.status, interrupted.error) == ("failed", stages.INTERRUPTED)
    stage, again = stages.retry(run.uuid)
    assert (stage, again) == ("outline", 2)
    builder = ctx.extensions["queues"].huey("builder")
    while builder.pending_count():
        builder.execute(builder.dequeue())
    assert run_of(run.uuid).status == "completed"


def test_a_step_still_running_when_its_build_failed_keeps_its_answer_when_it_finishes(
    ctx, monkeypatch
):
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=2, quizzes=0, concurrency=2))
    ids = {key: step.id for key, step in steps_of(run).items()}
    complete = FakeDriver.complete

    def build_fails_meanwhile(driver, prompt):
        stages.fail_run(run.id, None, "dispatch failed: the queue went away")
        during = steps_of(run_of(run.uuid))["outline-1"]
        assert (during.status, during.error) == ("failed", stages.INTERRUPTED)
        return complete(driver, prompt)

    monkeypatch.setattr(FakeDriver, "complete", build_fails_meanwhile)
    builder_steps.execute_step(ids["outline-1"])

    run = run_of(run.uuid)
    steps = steps_of(run)
    assert run.status == "failed"
    assert (steps["outline-1"].status, steps["outline-1"].error) == ("completed", None)
    assert steps["outline-1"].output.startswith("[outline/outline-1 ")
    assert steps["outline-2"].status == "skipped"
    assert stages.retry(run.uuid) == ("outline", 1)  # the paid answer is not asked again


def test_each_commit_moves_the_live_key(ctx):
    add_tenant()
    run_uuid = stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1)
    first = live.version(stages.live_topic(run_uuid))
    assert first != "0"
    builder_steps.execute_step(steps_of(run_of(run_uuid))["outline-1"].id)
    assert live.version(stages.live_topic(run_uuid)) != first


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"tenant_id": 404}, "tenant 404 does not exist"),
        ({"title": "  "}, "the title must not be empty"),
        ({"concurrency": 0}, "concurrency must be between 1 and 32"),
        ({"quizzes": -1}, "quizzes must be between 0 and 50"),
        ({"title": "Ti\x00des"}, "the title must not contain control characters"),
        ({"title": "Ti\x9b2Jdes"}, "the title must not contain control characters"),
        ({"title": "Ti\udcffdes"}, "the title must not contain control characters"),
        ({"tenant_id": 2**70}, "does not exist"),
        # A departed tenant's course would cost model calls and be read by nobody.
        ({"tenant_id": 2}, "tenant 2 is closed"),
    ],
)
def test_start_refuses_bad_requests_with_a_clear_message(ctx, kwargs, message):
    add_tenant()
    db.session.add(Tenant(id=2, name="Gone", status="closed"))
    db.session.commit()
    args = {"tenant_id": 1, "title": "Tides", **kwargs}
    with pytest.raises(stages.BuilderError, match=message):
        stages.start(args.pop("tenant_id"), args.pop("title"), **args)
    assert db.session.execute(select(GenerationRun)).first() is None


def test_builder_start_prints_the_uuid_last_and_status_prints_the_spec_shape(ctx, cli):
    add_tenant(5)
    started = cli.invoke(
        args=[
            "builder",
            "start",
            "--tenant",
            "5",
            "--title",
            "Soil",
            "--quizzes",
            "2",
            "--concurrency",
            "3",
        ]
    )
    assert started.exit_code == 0, started.output
    run_uuid = started.stdout.strip().splitlines()[-1]
    assert run_of(run_uuid).concurrency == 3

    shown = cli.invoke(args=["builder", "status", run_uuid, "--json"])
    assert shown.exit_code == 0, shown.output
    status = json.loads(shown.stdout)
    assert {"uuid", "status", "stage", "concurrency", "stages", "events"} <= set(status)
    assert (status["uuid"], status["status"], status["stage"]) == (run_uuid, "running", "outline")
    assert [s["name"] for s in status["stages"]] == ["outline", "lessons", "quizzes", "review"]
    outline = status["stages"][0]
    assert set(outline) == {"name", "opened_at", "closed_at", "steps"}
    assert outline["steps"] == {
        "total": 3,
        "pending": 3,
        "running": 0,
        "completed": 0,
        "failed": 0,
        "skipped": 0,
    }
    assert outline["opened_at"] and outline["closed_at"] is None
    assert status["events"] == [
        {"kind": "STAGE_OPENED", "stage": "outline", "step": None, "at": outline["opened_at"]}
    ]

    text = cli.invoke(args=["builder", "status", run_uuid])
    assert text.exit_code == 0 and "stage outline" in text.stdout


@pytest.mark.parametrize(
    ("args", "code", "error"),
    [
        (
            ["builder", "start", "--tenant", "77", "--title", "X"],
            1,
            "error: tenant 77 does not exist",
        ),
        (
            ["builder", "start", "--tenant", "5", "--title", " "],
            1,
            "error: the title must not be empty",
        ),
        (["builder", "status", "not-a-uuid"], 1, "error: no builder run 'not-a-uuid'"),
        (["builder", "status", "0d7c8d55-52a5-4a4b-9d59-6c8f2a3c9a11"], 1, "error: no builder run"),
        (["builder", "start", "--tenant", "5", "--title", "X", "--concurrency", "0"], 2, None),
        (["builder", "start", "--tenant", "five", "--title", "X"], 2, None),
        (["builder", "start", "--tenant", str(2**64), "--title", "X"], 2, None),
        (["builder", "start", "--title", "X"], 2, None),
    ],
)
def test_builder_commands_refuse_bad_input_without_a_traceback(ctx, cli, args, code, error):
    add_tenant(5)
    result = cli.invoke(args=args)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    if error:
        assert result.stderr.strip().startswith(error) and len(result.stderr.splitlines()) == 1


def test_recover_queues_again_steps_whose_worker_or_job_was_lost(ctx):
    from datetime import timedelta

    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=4, quizzes=0, concurrency=3))
    steps = steps_of(run)
    now = steps["outline-1"].queued_at + timedelta(minutes=60)
    db.session.execute(
        update(GenerationStep)
        .where(GenerationStep.key == "outline-1")
        .values(status="running", started_at=now - timedelta(minutes=41))
    )
    db.session.execute(
        update(GenerationStep)
        .where(GenerationStep.key == "outline-2")
        .values(status="running", started_at=now - timedelta(minutes=5))
    )
    db.session.execute(
        update(GenerationStep)
        .where(GenerationStep.key == "outline-3")
        .values(queued_at=now - timedelta(minutes=11))
    )
    db.session.commit()
    builder = ctx.extensions["queues"].huey("builder")
    builder.flush()

    assert builder_steps.recover(now) == 2
    steps = steps_of(run_of(run.uuid))
    assert {k: s.status for k, s in steps.items()} == {
        "outline-1": "queued",
        "outline-2": "running",
        "outline-3": "queued",
        "outline-4": "pending",
    }
    assert builder.pending_count() == 2
    assert builder_steps.recover(now) == 0


def test_recover_leaves_alone_steps_whose_jobs_still_wait_in_a_backlog(ctx):
    from datetime import timedelta

    from database import utcnow

    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=4, quizzes=0, concurrency=2))
    builder = ctx.extensions["queues"].huey("builder")
    waiting = sorted(job.args for job in builder.pending())
    assert len(waiting) == 2
    # One of them was put back to run a little later (its gate met a lost connection).
    later = builder.dequeue()
    later.eta = utcnow() + timedelta(minutes=1)
    builder.add_schedule(later)
    start = steps_of(run)["outline-1"].queued_at

    for minutes in (11, 22, 33):  # the consumers are busy: a backlog, nothing started
        assert builder_steps.recover(start + timedelta(minutes=minutes)) == 0

    jobs = [*builder.pending(), *builder.scheduled()]
    assert sorted(job.args for job in jobs) == waiting
    statuses = {k: s.status for k, s in steps_of(run_of(run.uuid)).items()}
    assert sorted(statuses.values()) == ["pending", "pending", "queued", "queued"]


def test_recover_queues_again_a_running_step_lost_even_with_a_job_of_it_waiting(ctx):
    # A job waiting for a running step finds it taken and does nothing: it saves nothing.
    from datetime import timedelta

    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1))
    step = steps_of(run)["outline-1"]
    now = step.queued_at + timedelta(minutes=60)
    db.session.execute(
        update(GenerationStep)
        .where(GenerationStep.id == step.id)
        .values(status="running", started_at=now - timedelta(minutes=41))
    )
    db.session.commit()

    assert builder_steps.recover(now) == 1
    assert steps_of(run_of(run.uuid))["outline-1"].status == "queued"


def test_a_queue_that_is_down_fails_the_run_and_says_so(make_app):
    app = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:1/0")
    with app.app_context():
        add_tenant()
        result = app.test_cli_runner().invoke(
            args=["builder", "start", "--tenant", "1", "--title", "Tides"]
        )
        assert result.exit_code == 1, result.output
        assert "Traceback" not in result.output
        assert result.stderr.startswith("error: run ")
        assert "dispatch failed: unhandled redis.exceptions.ConnectionError" in result.stderr
        run = db.session.execute(select(GenerationRun)).scalar_one()
        assert run.status == "failed" and run.failure_reason.startswith("dispatch failed")


def is_step_gate(statement: str) -> bool:
    return statement.lstrip().startswith("UPDATE builder_steps") and "attempts" in statement


@pytest.mark.parametrize("times", [1, len(GATE_PAUSES)], ids=["once", "every try"])
def test_a_database_error_at_a_steps_gate_is_retried_and_the_step_never_lost(ctx, times):
    """The step's claim is the runner's gate: retried at once after a lost connection,
    else the job goes back to the queue; the step is never left queued with no job."""
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1))
    huey = ctx.extensions["queues"].huey("builder")
    job = huey.dequeue()

    with gate_breaks(times, statement=is_step_gate) as broken:
        huey.execute(job)

    assert len(broken) == times, "the step's gate was never reached"
    if times == len(GATE_PAUSES):  # never reachable: back in the queue, still queued
        [again] = huey.scheduled()
        assert again.id == job.id
        assert steps_of(run_of(run.uuid))["outline-1"].status == "queued"
        again.eta = None
        huey.execute(again)
    step = steps_of(run_of(run.uuid))["outline-1"]
    assert (step.status, step.attempts) == ("completed", 1)


def test_a_consumer_stopping_mid_step_hands_the_step_back_through_its_job(ctx, monkeypatch):
    """Huey's stop interrupts the step job; the job's own ``on_stop`` queues the step
    again with a new job (no signal handler of the builder's own)."""
    add_tenant()
    run = run_of(stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1))
    huey = ctx.extensions["queues"].huey("builder")
    job = huey.dequeue()

    def stopped(self, prompt):
        raise huey_stop_interrupt()

    monkeypatch.setattr(FakeDriver, "complete", stopped)
    huey.execute(job)

    step = steps_of(run_of(run.uuid))["outline-1"]
    assert (step.status, step.attempts, run_of(run.uuid).status) == ("queued", 1, "running")
    [again] = huey.pending()
    assert again.args == (step.id,) and again.id != job.id
