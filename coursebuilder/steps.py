"""A build's steps: one step's execution, its hand-back and the recovery of lost ones.

A step job claims its step through the runner's ``gate`` (one conditional update:
queued → running; a redelivered or late job finds it taken and does nothing), calls
the language model with no transaction open, and records the outcome under the run
lock, advancing the stage or refilling the window in that same transaction (the paid
answer waits out a database outage rather than being lost, ``_complete``). A
failure is ``contained`` (recorded, never raised; the consumer's stop goes on to Huey,
which hands the step back through the job's ``on_stop``). A step whose job or worker
was lost is found by the runner's stale rule and queued again.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from flask import current_app
from sqlalchemy import and_, or_, select, update
from sqlalchemy.exc import DBAPIError

from coursebuilder.llm import Prompt, driver_for
from coursebuilder.models import EventKind, GenerationRun, GenerationStep, RunStatus, StepStatus
from coursebuilder.stages import (
    INTERRUPTED,
    STEP,
    Transition,
    advance_locked,
    after_commit,
    claim_window,
    fail_run,
    interrupt_running,
    live_topic,
    record,
    stage_counts,
    tenant_closed,
)
from database import utcnow, write_transaction
from extensions import db
from live import topics as live
from taskrunner.contract import (
    Tracked,
    contained,
    gate,
    lost_before,
    patiently,
    raise_if_stopping,
    redact,
    run_lock,
    stale_filter,
    store_reason,
)

logger = logging.getLogger(__name__)

STEP_TIMEOUT = 1800
# A step running this long lost its worker: the hard timeout would have ended it before.
STEP_STUCK_AFTER_MINUTES = 40
# A step claimed this long ago without starting may have lost its job (Huey is at most once).
STEP_QUEUED_AFTER_MINUTES = 10
# Where the stale rule reads a step: running, or claimed and queued but not started.
STEPS = Tracked(
    GenerationStep.status,
    GenerationStep.started_at,
    GenerationStep.queued_at,
    running=StepStatus.RUNNING,
    waiting=StepStatus.QUEUED,
)


def execute_step(step_id: int, timeout: int = STEP_TIMEOUT) -> None:
    """The body of a step job: claim the step, call the model, record, advance."""
    claimed = gate(f"builder step {step_id}", lambda: _claim(step_id))
    if claimed is None:
        logger.info("Builder step %s is not queued any more; nothing to do", step_id)
        return
    run_id, stage, key, attempt = claimed
    run = db.session.get(GenerationRun, run_id)
    run_uuid, options = run.uuid, run.options
    if tenant_closed(run.tenant_id):
        # Closed mid-build: the rest of its steps would call the model for nobody.
        tenant_id = run.tenant_id
        db.session.commit()
        fail_run(run_id, step_id, f"step {stage}/{key} not run: tenant {tenant_id} is closed")
        return
    prompt = _prompt(run, stage, key)
    db.session.commit()  # no transaction stays open across the model call
    live.bump(live_topic(run_uuid))
    text, reason = contained(
        lambda: driver_for(current_app.config, options).complete(prompt),
        f"Builder run {run_uuid}: step {stage}/{key}",
        f"timeout: step ran longer than {timeout} s",
    )
    if reason is None:
        _complete(run_id, run_uuid, step_id, (stage, key, attempt), text)
    else:
        store_reason(
            lambda why: fail_run(run_id, step_id, why), f"step {stage}/{key} failed: {reason}"
        )


def _claim(step_id: int) -> tuple[int, str, str, int] | None:
    """The gate of a step: queued → running (+1 attempt) while its run runs; its run,
    stage, key and attempt."""
    with write_transaction(db.session):
        return db.session.execute(
            update(GenerationStep)
            .where(
                GenerationStep.id == step_id,
                GenerationStep.status == StepStatus.QUEUED,
                GenerationStep.run_id.in_(
                    select(GenerationRun.id).where(GenerationRun.status == RunStatus.RUNNING)
                ),
            )
            .values(
                status=StepStatus.RUNNING,
                attempts=GenerationStep.attempts + 1,
                started_at=utcnow(),
            )
            .returning(
                GenerationStep.run_id,
                GenerationStep.stage,
                GenerationStep.key,
                GenerationStep.attempts,
            )
            .execution_options(synchronize_session=False)
        ).first()


def _complete(
    run_id: int, run_uuid: str, step_id: int, step: tuple[str, str, int], text: str
) -> None:
    """Record the paid answer; never lose it to a refused write (then the step would stay
    running until the recovery queued it again and paid for the same answer twice).

    A database outage (a lock not granted in time, a lost connection) is waited out; any
    other refusal is tried once more in a fresh transaction, and then fails the step with
    it: recorded, never left for the recovery to run again.
    """
    stage, key, _attempt = step
    what = f"recording the answer of builder step {step_id}"

    def write() -> tuple[Transition | None, list[int]]:
        return patiently(lambda: _close(run_id, step_id, step, text), what, time.sleep)

    try:
        try:
            transition, claimed = write()
        except DBAPIError as exc:
            raise_if_stopping(exc)
            logger.warning("Builder run %s: %s was refused; trying once more", run_uuid, what)
            transition, claimed = write()
    except DBAPIError as exc:
        raise_if_stopping(exc)
        logger.exception("Builder run %s: %s failed", run_uuid, what)
        store_reason(
            lambda why: fail_run(run_id, step_id, why),
            f"step {stage}/{key} failed: its answer could not be recorded: {redact(exc)}",
        )
        return
    after_commit(run_id, run_uuid, transition, claimed)


def _close(
    run_id: int, step_id: int, step: tuple[str, str, int], text: str
) -> tuple[Transition | None, list[int]]:
    """Record the step, and in the same locked transaction advance or refill the window.

    A step its build's failure interrupted while this very attempt ran is recorded too:
    its answer was paid for, and a retry then need not pay for it again.
    """
    stage, key, attempt = step
    with run_lock(GenerationRun, run_id) as run:
        done = db.session.execute(
            update(GenerationStep)
            .where(
                GenerationStep.id == step_id,
                or_(
                    GenerationStep.status == StepStatus.RUNNING,
                    and_(
                        GenerationStep.status == StepStatus.FAILED,
                        GenerationStep.error == INTERRUPTED,
                        GenerationStep.attempts == attempt,
                    ),
                ),
            )
            .values(status=StepStatus.COMPLETED, output=text, error=None, finished_at=utcnow())
        ).rowcount
        if done:
            record(run_id, EventKind.STEP_FINISHED, stage, key)
        if run is None or run.status != RunStatus.RUNNING:
            return None, []
        counts = stage_counts(run)
        transition = advance_locked(run, counts)
        # After a stage change the counts are the new stage's: read them again.
        return transition, claim_window(run, None if transition else counts)


def hand_back(step_id: int) -> bool:
    """Put a step interrupted by a consumer's shutdown back in the queue; False if not running."""
    db.session.rollback()  # the interruption may have cut a transaction short
    step = db.session.get(GenerationStep, step_id)
    if step is None:
        return False
    run_id = step.run_id
    with run_lock(GenerationRun, run_id) as run:
        if run is None:
            return False
        if run.status != RunStatus.RUNNING:
            # The run ended meanwhile: a step it left running reads as interrupted, never
            # as running for ever.
            interrupt_running(run_id, utcnow())
            return False
        handed = (
            db.session.execute(
                update(GenerationStep)
                .where(GenerationStep.id == step_id, GenerationStep.status == StepStatus.RUNNING)
                .values(status=StepStatus.QUEUED, started_at=None, queued_at=utcnow())
            ).rowcount
            == 1
        )
        run_uuid = run.uuid
    if handed:
        logger.warning("Builder run %s: step %s handed back on shutdown", run_uuid, step_id)
        after_commit(run_id, run_uuid, None, [step_id])
    return handed


def recover(now: datetime | None = None) -> int:
    """Re-queue the steps of running runs whose job or worker was lost; return how many.

    The runner's stale rule finds them: a step still running past
    ``STEP_STUCK_AFTER_MINUTES`` outlived its hard timeout, so its worker died (SIGKILL, a
    lost host); one queued past ``STEP_QUEUED_AFTER_MINUTES`` may have lost its job. Both
    go back to the queue, but for a queued step whose job still waits there: under a
    backlog every pass would add another job for it, and a longer backlog. A job that was
    only slow finds its step taken by the gate and does nothing. Then every running run's
    window is refilled, so no run is left running with nothing in flight.
    """
    now = now or utcnow()
    lost = stale_filter(
        lost_before(now, STEP_STUCK_AFTER_MINUTES, STEP_QUEUED_AFTER_MINUTES), STEPS
    )
    running = select(GenerationRun.id).where(GenerationRun.status == RunStatus.RUNNING)
    waiting: set[int] = set()
    # The queue is read only when a queued step looks lost: a backlog, or a lost job.
    if db.session.execute(
        select(GenerationStep.id)
        .where(
            GenerationStep.run_id.in_(running),
            GenerationStep.status == StepStatus.QUEUED,
            lost,
        )
        .limit(1)
    ).first():
        waiting = {args[0] for args in STEP.waiting() if args}
    requeued = 0
    for run_id in list(db.session.execute(running).scalars()):
        with run_lock(GenerationRun, run_id) as run:
            if run is None or run.status != RunStatus.RUNNING:
                continue
            ids = [
                step_id
                for step_id, status in db.session.execute(
                    select(GenerationStep.id, GenerationStep.status).where(
                        GenerationStep.run_id == run_id, lost
                    )
                )
                # A job waiting for a running step finds it taken: that one is lost.
                if not (status == StepStatus.QUEUED and step_id in waiting)
            ]
            if ids:
                db.session.execute(
                    update(GenerationStep)
                    .where(GenerationStep.id.in_(ids))
                    .values(status=StepStatus.QUEUED, queued_at=now, started_at=None)
                )
            claimed = claim_window(run)
            run_uuid = run.uuid
        if ids:
            logger.warning("Builder run %s: %d lost steps queued again", run_uuid, len(ids))
        after_commit(run_id, run_uuid, None, ids + claimed)
        requeued += len(ids)
    return requeued


def _prompt(run: GenerationRun, stage: str, key: str) -> Prompt:
    number = int(key.rsplit("-", 1)[1])
    lessons = int(run.options.get("lessons", 3))
    subject = f"the course “{run.title}”"
    if stage == "outline":
        text = f"Outline lesson {number} of {lessons} of {subject}."
    elif stage == "lessons":
        text = f"Write lesson {number} of {subject} from this outline:\n" + _output_of(
            run.id, "outline", f"outline-{number}"
        )
    elif stage == "quizzes":
        lesson = (number - 1) % lessons + 1
        text = f"Write quiz {number} on lesson {lesson} of {subject}:\n" + _output_of(
            run.id, "lessons", f"lesson-{lesson}"
        )
    else:
        text = f"Review lesson {number} of {subject} for accuracy and clarity:\n" + _output_of(
            run.id, "lessons", f"lesson-{number}"
        )
    return Prompt(stage=stage, step=key, text=text)


def _output_of(run_id: int, stage: str, key: str) -> str:
    output = db.session.execute(
        select(GenerationStep.output).where(
            GenerationStep.run_id == run_id,
            GenerationStep.stage == stage,
            GenerationStep.key == key,
        )
    ).scalar_one_or_none()
    return output or ""
