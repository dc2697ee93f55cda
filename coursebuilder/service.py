"""The generation service: start a run, execute its steps, advance its stages.

Every stage change is ONE transaction under the run lock (``SELECT … FOR
UPDATE`` on PostgreSQL, the ``BEGIN IMMEDIATE`` write lock on SQLite): the
stage is closed, the next stage is written and its steps are created together,
and a stage without steps is closed in that same transaction. There is no
"opening" state, so a worker that finishes a step can never see an open stage
without steps and advance twice.

The event rows are written inside the transaction that made the transition, so
they exist exactly when it does. What follows the commit -- bumping the live
key, logging progress, enqueueing the next steps -- is done only by the worker
whose transaction made the transition; a late worker finds the next stage open
with pending steps and does nothing.

``dispatch_window`` counts the steps in flight and claims pending ones under
the same lock, and enqueues after the commit, so workers never overfill the
run's ``concurrency``.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from huey import signals
from huey.exceptions import TaskTimeout
from sqlalchemy import func, select, update

from coursebuilder.llm import Prompt, driver_for
from coursebuilder.models import (
    FINISHED_STAGE,
    IN_FLIGHT,
    STAGES,
    UNFINISHED,
    EventKind,
    GenerationEvent,
    GenerationRun,
    GenerationStep,
    RunStatus,
    StepStatus,
)
from database import is_sqlite, utcnow, write_transaction
from extensions import db
from live import topics as live
from taskrunner.contract import (
    bounded,
    job,
    on_signal,
    raise_if_stopping,
    redact,
    register_domain_error,
    store_reason,
)
from tenancy.models import Tenant

logger = logging.getLogger(__name__)

STEP_JOB = "coursebuilder.run_step"
STEP_TIMEOUT = 1800
# A step running this long lost its worker: the hard timeout would have ended it before.
STEP_STUCK_AFTER_MINUTES = 40
# A step claimed this long ago without starting may have lost its job (Huey is at most once).
STEP_QUEUED_AFTER_MINUTES = 10
MAX_LESSONS = 50
MAX_QUIZZES = 50
MAX_CONCURRENCY = 32
MAX_ID = 2**63 - 1


def live_topic(run_uuid: str) -> str:
    """The live topic a run's page follows; bumped after every commit that changed the run."""
    return f"builder.run:{run_uuid}"


@register_domain_error
class BuilderError(Exception):
    """A course-builder request that cannot be carried out; the message is for the operator."""


class UnknownRun(BuilderError):
    pass


class DispatchError(BuilderError):
    """Claimed steps could not be enqueued; the run was failed with this reason."""


@dataclass(frozen=True)
class Transition:
    run_id: int
    run_uuid: str
    closed: list[str] = field(default_factory=list)
    opened: str | None = None
    finished: bool = False


def find_run(run_uuid: str) -> GenerationRun:
    """The run with this uuid; ``UnknownRun`` for a malformed or unknown one."""
    try:
        canonical = str(uuidlib.UUID(run_uuid))
    except (ValueError, AttributeError, TypeError):
        raise UnknownRun(f"no builder run {run_uuid!r}") from None
    run = db.session.execute(
        select(GenerationRun).where(GenerationRun.uuid == canonical)
    ).scalar_one_or_none()
    if run is None:
        raise UnknownRun(f"no builder run {run_uuid!r}")
    return run


def run_state(run_id: int) -> tuple[str, str]:
    """A run's status and stage, read without keeping a transaction (a live stream sleeps
    between reads, and must hold no connection meanwhile)."""
    try:
        row = db.session.execute(
            select(GenerationRun.status, GenerationRun.stage).where(GenerationRun.id == run_id)
        ).one()
    finally:
        db.session.rollback()
    return row.status, row.stage


def plan(stage: str, options: dict[str, Any]) -> list[str]:
    """The step keys of a stage, from the run's options."""
    lessons = int(options.get("lessons", 3))
    if stage == "quizzes":
        return [f"quiz-{i}" for i in range(1, int(options.get("quizzes", 0)) + 1)]
    prefix = {"outline": "outline", "lessons": "lesson", "review": "review"}[stage]
    return [f"{prefix}-{i}" for i in range(1, lessons + 1)]


def start(
    tenant_id: int,
    title: str,
    *,
    quizzes: int = 3,
    concurrency: int = 2,
    lessons: int = 3,
    fake: dict[str, Any] | None = None,
    initiator: str = "cli",
) -> str:
    """Create a run with its first stage open, dispatch its first steps; return its uuid."""
    title = (title or "").strip()
    if not title:
        raise BuilderError("the title must not be empty")
    if len(title) > 191:
        raise BuilderError("the title must be at most 191 characters")
    if any(ord(c) < 32 for c in title):
        raise BuilderError("the title must not contain control characters")
    if not isinstance(tenant_id, int) or not 1 <= tenant_id <= MAX_ID:
        raise BuilderError(f"tenant {tenant_id} does not exist")
    _check_range("quizzes", quizzes, 0, MAX_QUIZZES)
    _check_range("lessons", lessons, 1, MAX_LESSONS)
    _check_range("concurrency", concurrency, 1, MAX_CONCURRENCY)
    if db.session.get(Tenant, tenant_id) is None:
        raise BuilderError(f"tenant {tenant_id} does not exist")
    options: dict[str, Any] = {"lessons": lessons, "quizzes": quizzes}
    if fake:
        options["fake"] = dict(fake)
    with write_transaction(db.session):
        run = GenerationRun(
            tenant_id=tenant_id,
            title=title,
            options=options,
            concurrency=concurrency,
            stage=STAGES[0],
            initiator=initiator,
        )
        db.session.add(run)
        db.session.flush()
        transition = _open_from(run, 0, closed=[])
        claimed = _claim_window(run)
    _after_commit(transition.run_id, transition.run_uuid, transition, claimed)
    return transition.run_uuid


def _check_range(name: str, value: int, low: int, high: int) -> None:
    if not isinstance(value, int) or not low <= value <= high:
        raise BuilderError(f"{name} must be between {low} and {high}")


def advance(run_id: int) -> Transition | None:
    """Close the open stage if all its steps are done and open the next; None if not ours.

    The owner of the transition also claims the new stage's first window in the same
    transaction, and enqueues it after the commit.
    """
    with _locked_run(run_id) as run:
        transition = _advance_locked(run)
        if transition is None:
            return None
        claimed = _claim_window(run)
    _after_commit(run_id, transition.run_uuid, transition, claimed)
    return transition


def _advance_locked(
    run: GenerationRun | None, counts: dict[str, int] | None = None
) -> Transition | None:
    """Inside the locked transaction: the stage change, if the open stage is done."""
    if run is None or run.status != RunStatus.RUNNING:
        return None
    if _stage_counts(run) if counts is None else counts:
        return None
    _record(run.id, EventKind.STAGE_CLOSED, run.stage)
    return _open_from(run, STAGES.index(run.stage) + 1, closed=[run.stage])


def _open_from(run: GenerationRun, index: int, closed: list[str]) -> Transition:
    """Inside the locked transaction: open the next stage that has steps, or finish the run."""
    now = utcnow()
    for stage in STAGES[index:]:
        keys = plan(stage, run.options)
        _record(run.id, EventKind.STAGE_OPENED, stage, at=now)
        if keys:
            db.session.add_all(
                GenerationStep(run_id=run.id, stage=stage, key=key, position=position)
                for position, key in enumerate(keys)
            )
            db.session.flush()
            run.stage = stage
            return Transition(run.id, run.uuid, closed, opened=stage)
        # No steps (no quizzes asked for): closed in the same transaction, never left open.
        _record(run.id, EventKind.STAGE_CLOSED, stage, at=now)
        closed = [*closed, stage]
    run.stage = FINISHED_STAGE
    run.status = RunStatus.COMPLETED
    run.finished_at = now
    _record(run.id, EventKind.RUN_FINISHED, None, at=now)
    return Transition(run.id, run.uuid, closed, finished=True)


def dispatch_window(run_id: int) -> int:
    """Claim pending steps up to ``concurrency`` in flight, under the lock; enqueue after."""
    with _locked_run(run_id) as run:
        if run is None or run.status != RunStatus.RUNNING:
            return 0
        claimed = _claim_window(run)
        run_uuid = run.uuid
    _after_commit(run_id, run_uuid, None, claimed)
    return len(claimed)


def _claim_window(run: GenerationRun, counts: dict[str, int] | None = None) -> list[int]:
    """Inside the locked transaction: count the steps in flight, claim pending ones.

    Only the open stage can have steps in flight: a stage closes when all are done.
    """
    if run.status != RunStatus.RUNNING:
        return []
    counts = _stage_counts(run) if counts is None else counts
    in_flight = sum(counts.get(status, 0) for status in IN_FLIGHT)
    free = min(run.concurrency - in_flight, counts.get(StepStatus.PENDING, 0))
    if free <= 0:
        return []
    ids = list(
        db.session.execute(
            select(GenerationStep.id)
            .where(
                GenerationStep.run_id == run.id,
                GenerationStep.stage == run.stage,
                GenerationStep.status == StepStatus.PENDING,
            )
            .order_by(GenerationStep.position)
            .limit(free)
        ).scalars()
    )
    if ids:
        db.session.execute(
            update(GenerationStep)
            .where(GenerationStep.id.in_(ids))
            .values(status=StepStatus.QUEUED, queued_at=utcnow())
        )
    return ids


def _after_commit(
    run_id: int, run_uuid: str, transition: Transition | None, claimed: list[int]
) -> None:
    """After the commit, by the owner of what it changed only: enqueue, wake pages, log."""
    if claimed:
        try:
            _enqueue_steps(claimed)
        except Exception as exc:
            # Claimed steps whose jobs never reached the queue would hold the window forever.
            logger.exception("Builder run %s: enqueueing steps failed", run_uuid)
            reason = f"dispatch failed: {redact(exc)}"
            _fail_run(run_id, None, reason)
            raise DispatchError(f"run {run_uuid} failed: {reason}") from exc
    live.bump(live_topic(run_uuid))
    if transition is None:
        return
    for stage in transition.closed:
        logger.info("Builder run %s: stage %s closed", run_uuid, stage)
    if transition.opened:
        logger.info(
            "Builder run %s: stage %s opened, %d steps dispatched",
            run_uuid,
            transition.opened,
            len(claimed),
        )
    if transition.finished:
        logger.info("Builder run %s finished", run_uuid)


def _enqueue_steps(step_ids: list[int]) -> None:
    for step_id in step_ids:
        run_step.enqueue(step_id)


def execute_step(step_id: int, timeout: int = STEP_TIMEOUT) -> None:
    """The body of a step job: claim the step, call the model, record, advance."""
    now = utcnow()
    with write_transaction(db.session):
        claimed = db.session.execute(
            update(GenerationStep)
            .where(
                GenerationStep.id == step_id,
                GenerationStep.status == StepStatus.QUEUED,
                GenerationStep.run_id.in_(
                    select(GenerationRun.id).where(GenerationRun.status == RunStatus.RUNNING)
                ),
            )
            .values(status=StepStatus.RUNNING, attempts=GenerationStep.attempts + 1, started_at=now)
            .returning(GenerationStep.run_id, GenerationStep.stage, GenerationStep.key)
            .execution_options(synchronize_session=False)
        ).first()
    if claimed is None:
        logger.info("Builder step %s is not queued any more; nothing to do", step_id)
        return
    run_id, stage, key = claimed
    run = db.session.get(GenerationRun, run_id)
    run_uuid, options = run.uuid, run.options
    prompt = _prompt(run, stage, key)
    db.session.commit()  # no transaction stays open across the model call
    live.bump(live_topic(run_uuid))
    try:
        text = driver_for(current_app.config, options).complete(prompt)
    except TaskTimeout:
        db.session.rollback()
        reason = f"timeout: step ran longer than {timeout} s"
        logger.warning("Builder run %s: step %s/%s timed out", run_uuid, stage, key)
    except BaseException as exc:
        raise_if_stopping(exc)  # anything else, sys.exit() included, is the step's failure
        db.session.rollback()
        reason = redact(exc)
        logger.exception("Builder run %s: step %s/%s failed", run_uuid, stage, key)
    else:
        _complete_step(run_id, run_uuid, step_id, stage, key, text)
        return
    store_reason(
        lambda text: _fail_run(run_id, step_id, text), f"step {stage}/{key} failed: {reason}"
    )


def hand_back(step_id: int) -> bool:
    """Put a step interrupted by a consumer's shutdown back in the queue; False if not running."""
    db.session.rollback()  # the interruption may have cut a transaction short
    step = db.session.get(GenerationStep, step_id)
    if step is None:
        return False
    with _locked_run(step.run_id) as run:
        if run is None or run.status != RunStatus.RUNNING:
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
        _enqueue_steps([step_id])
        logger.warning("Builder run %s: step %s handed back on shutdown", run_uuid, step_id)
        live.bump(live_topic(run_uuid))
    return handed


def recover(now: datetime | None = None) -> int:
    """Re-queue the steps of running runs whose job or worker was lost; return how many.

    A step still running past ``STEP_STUCK_AFTER_MINUTES`` outlived its hard timeout, so
    its worker died (SIGKILL, a lost host); a step queued past ``STEP_QUEUED_AFTER_MINUTES``
    may have lost its job. Both go back to the queue; a job that was only slow finds its
    step taken by the gate and does nothing. Then every running run's window is refilled,
    so no run is left running with nothing in flight.
    """
    now = now or utcnow()
    lost_worker = now - timedelta(minutes=STEP_STUCK_AFTER_MINUTES)
    lost_job = now - timedelta(minutes=STEP_QUEUED_AFTER_MINUTES)
    requeued = 0
    run_ids = list(
        db.session.execute(
            select(GenerationRun.id).where(GenerationRun.status == RunStatus.RUNNING)
        ).scalars()
    )
    for run_id in run_ids:
        with _locked_run(run_id) as run:
            if run is None or run.status != RunStatus.RUNNING:
                continue
            ids = list(
                db.session.execute(
                    select(GenerationStep.id).where(
                        GenerationStep.run_id == run_id,
                        (
                            (GenerationStep.status == StepStatus.RUNNING)
                            & (GenerationStep.started_at < lost_worker)
                        )
                        | (
                            (GenerationStep.status == StepStatus.QUEUED)
                            & (GenerationStep.queued_at < lost_job)
                        ),
                    )
                ).scalars()
            )
            if ids:
                db.session.execute(
                    update(GenerationStep)
                    .where(GenerationStep.id.in_(ids))
                    .values(status=StepStatus.QUEUED, queued_at=now, started_at=None)
                )
            claimed = _claim_window(run)
            run_uuid = run.uuid
        if ids:
            logger.warning("Builder run %s: %d lost steps queued again", run_uuid, len(ids))
        _after_commit(run_id, run_uuid, None, ids + claimed)
        requeued += len(ids)
    return requeued


def _complete_step(
    run_id: int, run_uuid: str, step_id: int, stage: str, key: str, text: str
) -> None:
    """Record the step, and in the same locked transaction advance or refill the window."""
    with _locked_run(run_id) as run:
        done = db.session.execute(
            update(GenerationStep)
            .where(GenerationStep.id == step_id, GenerationStep.status == StepStatus.RUNNING)
            .values(status=StepStatus.COMPLETED, output=text, error=None, finished_at=utcnow())
        ).rowcount
        if done:
            _record(run_id, EventKind.STEP_FINISHED, stage, key)
        if run is None or run.status != RunStatus.RUNNING:
            transition, claimed = None, []
        else:
            counts = _stage_counts(run)
            transition = _advance_locked(run, counts)
            # After a stage change the counts are the new stage's: read them again.
            claimed = _claim_window(run, None if transition else counts)
    _after_commit(run_id, run_uuid, transition, claimed)


def _fail_run(run_id: int, step_id: int | None, reason: str) -> None:
    """A failed step fails its run, with the redacted reason, under the run lock."""
    reason = bounded(reason)
    with _locked_run(run_id) as run:
        if run is None:
            return
        now = utcnow()
        if step_id is not None:
            step = db.session.get(GenerationStep, step_id)
            if step is not None and step.status == StepStatus.RUNNING:
                step.status = StepStatus.FAILED
                step.error = reason
                step.finished_at = now
                _record(run_id, EventKind.STEP_FAILED, step.stage, step.key, at=now)
        failed_now = run.status == RunStatus.RUNNING
        if failed_now:
            run.status = RunStatus.FAILED
            run.failure_reason = reason
            run.finished_at = now
            # What had not started will not: shown as skipped, never as waiting forever.
            # A queued step's job finds it no longer queued and does nothing.
            db.session.execute(
                update(GenerationStep)
                .where(
                    GenerationStep.run_id == run_id,
                    GenerationStep.status.in_((StepStatus.PENDING, StepStatus.QUEUED)),
                )
                .values(status=StepStatus.SKIPPED)
            )
            _record(run_id, EventKind.RUN_FINISHED, run.stage, at=now)
        run_uuid = run.uuid
    live.bump(live_topic(run_uuid))
    if failed_now:
        logger.warning("Builder run %s failed: %s", run_uuid, reason)


def retry(run_uuid: str, actor: str = "cli") -> tuple[str, int]:
    """Resume a failed run from its failed stage; return (that stage, steps queued again).

    Under the run lock: the stage's failed and skipped steps become pending again
    (its completed steps keep their output), the run is running again, and the first
    window is claimed, in one transaction; enqueued after the commit. Stages before
    it are not run again.
    """
    run_id = find_run(run_uuid).id
    db.session.rollback()
    with _locked_run(run_id) as run:
        if run is None or run.status != RunStatus.FAILED:
            status = run.status if run is not None else "gone"
            raise BuilderError(f"run {run_uuid} is {status}; only a failed run can be retried")
        stage = run.stage
        again = db.session.execute(
            update(GenerationStep)
            .where(
                GenerationStep.run_id == run_id,
                GenerationStep.stage == stage,
                GenerationStep.status.in_(
                    (StepStatus.FAILED, StepStatus.SKIPPED, StepStatus.PENDING, StepStatus.QUEUED)
                ),
            )
            .values(
                status=StepStatus.PENDING,
                error=None,
                queued_at=None,
                started_at=None,
                finished_at=None,
            )
            .execution_options(synchronize_session=False)
        ).rowcount
        # Skipped steps of other stages cannot exist: later stages open only on success.
        run.status = RunStatus.RUNNING
        run.failure_reason = None
        run.finished_at = None
        _record(run_id, EventKind.RUN_RETRIED, stage)
        if again:
            transition, claimed = None, _claim_window(run)
        else:
            # Every step of the stage had finished (a dispatch failure after the last one):
            # the stage closes now and the next one opens.
            transition = _advance_locked(run)
            claimed = _claim_window(run)
        run_uuid = run.uuid
    logger.info("Builder run %s retried from stage %s by %s", run_uuid, stage, actor)
    _after_commit(run_id, run_uuid, transition, claimed)
    return stage, again


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


@contextmanager
def _locked_run(run_id: int) -> Iterator[GenerationRun | None]:
    """One transaction holding the run lock (SQLite: the write lock from BEGIN IMMEDIATE)."""
    with write_transaction(db.session):
        stmt = select(GenerationRun).where(GenerationRun.id == run_id)
        if not is_sqlite(db.session):
            stmt = stmt.with_for_update()
        yield db.session.execute(
            stmt.execution_options(populate_existing=True)
        ).scalar_one_or_none()


def _stage_counts(run: GenerationRun) -> dict[str, int]:
    """Unfinished steps of the open stage by status (empty: the stage is done)."""
    return dict(
        db.session.execute(
            select(GenerationStep.status, func.count())
            .where(
                GenerationStep.run_id == run.id,
                GenerationStep.stage == run.stage,
                GenerationStep.status.in_(UNFINISHED),
            )
            .group_by(GenerationStep.status)
        ).all()
    )


def _record(
    run_id: int, kind: str, stage: str | None, step: str | None = None, at: Any = None
) -> None:
    db.session.add(
        GenerationEvent(run_id=run_id, kind=kind, stage=stage, step=step, at=at or utcnow())
    )


# The step job: one language-model step on the ``builder`` queue. A step may run for up
# to 30 minutes (a slow real model call), so it has its own queue with process workers
# that enforce the timeout, and one try: a second try would pay for the same call twice.
@job(
    STEP_JOB,
    queue="builder",
    timeout=STEP_TIMEOUT,
    retries=0,
    stuck_after_minutes=STEP_STUCK_AFTER_MINUTES,
    wants_task=True,
)
def run_step(step_id: int, task: Any = None) -> None:
    execute_step(step_id, timeout=getattr(task, "timeout", None) or STEP_TIMEOUT)


@on_signal(signals.SIGNAL_INTERRUPTED)
def step_handed_back(signal: str, task: Any, queue: str) -> None:
    """A consumer stopped mid-step (SIGTERM): queue the step again instead of losing it."""
    if task.name == STEP_JOB:
        hand_back(task.args[0])
