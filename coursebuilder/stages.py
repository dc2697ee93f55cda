"""A build's plan and its stages: start, advance, the dispatch window, failure and retry.

Every stage change is ONE transaction under the run lock (the runner's ``run_lock``:
``SELECT … FOR NO KEY UPDATE`` on PostgreSQL, the ``BEGIN IMMEDIATE`` write lock on
SQLite): the stage is closed, the next stage is written and its steps are created
together, and a stage without steps is closed in that same transaction. There is no
"opening" state, so a worker that finishes a step can never see an open stage
without steps and advance twice.

The event rows are written inside the transaction that made the transition, so
they exist exactly when it does. What follows the commit -- bumping the live
key, logging progress, enqueueing the next steps -- is done only by the worker
whose transaction made the transition (``after_commit``); a late worker finds the
next stage open with pending steps and does nothing.

``claim_window`` counts the steps in flight and claims pending ones under the same
lock, and they are enqueued after the commit, so workers never overfill the run's
``concurrency``.
"""

from __future__ import annotations

import logging
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import func, select, update

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
from database import utcnow, write_transaction
from extensions import db
from live import topics as live
from security.echo import printable
from taskrunner.contract import JobHandle, bounded, redact, register_domain_error, run_lock
from tenancy.models import CLOSED, Tenant

logger = logging.getLogger(__name__)

STEP_JOB = "coursebuilder.run_step"
# The step job, declared with its body in ``coursebuilder.jobs``: here only enqueued.
STEP = JobHandle(STEP_JOB)
MAX_LESSONS = 50
MAX_QUIZZES = 50
MAX_CONCURRENCY = 32
MAX_ID = 2**63 - 1
# What a retry makes pending again: the failed stage's steps that did not complete.
NOT_DONE = (StepStatus.FAILED, StepStatus.SKIPPED, StepStatus.PENDING, StepStatus.QUEUED)
# The error of a step that was running when its build failed: its worker may have died with
# it (nothing would ever settle it) or may still finish, and then its answer is kept.
INTERRUPTED = "interrupted: the build failed while this step ran"


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
    if not printable(title):
        raise BuilderError("the title must not contain control characters or text not UTF-8")
    if not isinstance(tenant_id, int) or not 1 <= tenant_id <= MAX_ID:
        raise BuilderError(f"tenant {tenant_id} does not exist")
    for name, value, low, high in (
        ("quizzes", quizzes, 0, MAX_QUIZZES),
        ("lessons", lessons, 1, MAX_LESSONS),
        ("concurrency", concurrency, 1, MAX_CONCURRENCY),
    ):
        if not isinstance(value, int) or not low <= value <= high:
            raise BuilderError(f"{name} must be between {low} and {high}")
    if db.session.get(Tenant, tenant_id) is None:
        raise BuilderError(f"tenant {tenant_id} does not exist")
    if tenant_closed(tenant_id):  # a departed tenant's course would be paid for, never read
        raise BuilderError(f"tenant {tenant_id} is closed")
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
        transition = open_from(run, 0, closed=[])
        claimed = claim_window(run)
    after_commit(transition.run_id, transition.run_uuid, transition, claimed)
    return transition.run_uuid


def advance(run_id: int) -> Transition | None:
    """Close the open stage if all its steps are done and open the next; None if not ours.

    The owner of the transition also claims the new stage's first window in the same
    transaction, and enqueues it after the commit.
    """
    with run_lock(GenerationRun, run_id) as run:
        transition = advance_locked(run)
        if transition is None:
            return None
        claimed = claim_window(run)
    after_commit(run_id, transition.run_uuid, transition, claimed)
    return transition


def advance_locked(
    run: GenerationRun | None, counts: dict[str, int] | None = None
) -> Transition | None:
    """Inside the locked transaction: the stage change, if the open stage is done."""
    if run is None or run.status != RunStatus.RUNNING:
        return None
    if stage_counts(run) if counts is None else counts:
        return None
    record(run.id, EventKind.STAGE_CLOSED, run.stage)
    return open_from(run, STAGES.index(run.stage) + 1, closed=[run.stage])


def open_from(run: GenerationRun, index: int, closed: list[str]) -> Transition:
    """Inside the locked transaction: open the next stage that has steps, or finish the run."""
    now = utcnow()
    for stage in STAGES[index:]:
        keys = plan(stage, run.options)
        record(run.id, EventKind.STAGE_OPENED, stage, at=now)
        if keys:
            db.session.add_all(
                GenerationStep(run_id=run.id, stage=stage, key=key, position=position)
                for position, key in enumerate(keys)
            )
            db.session.flush()
            run.stage = stage
            return Transition(run.id, run.uuid, closed, opened=stage)
        # No steps (no quizzes asked for): closed in the same transaction, never left open.
        record(run.id, EventKind.STAGE_CLOSED, stage, at=now)
        closed = [*closed, stage]
    run.stage = FINISHED_STAGE
    run.status = RunStatus.COMPLETED
    run.finished_at = now
    record(run.id, EventKind.RUN_FINISHED, None, at=now)
    return Transition(run.id, run.uuid, closed, finished=True)


def dispatch_window(run_id: int) -> int:
    """Claim pending steps up to ``concurrency`` in flight, under the lock; enqueue after."""
    with run_lock(GenerationRun, run_id) as run:
        if run is None or run.status != RunStatus.RUNNING:
            return 0
        claimed = claim_window(run)
        run_uuid = run.uuid
    after_commit(run_id, run_uuid, None, claimed)
    return len(claimed)


def claim_window(run: GenerationRun, counts: dict[str, int] | None = None) -> list[int]:
    """Inside the locked transaction: count the steps in flight, claim pending ones.

    Only the open stage can have steps in flight: a stage closes when all are done.
    """
    if run.status != RunStatus.RUNNING:
        return []
    counts = stage_counts(run) if counts is None else counts
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


def after_commit(
    run_id: int, run_uuid: str, transition: Transition | None, claimed: list[int]
) -> None:
    """After the commit, by the owner of what it changed only: enqueue, wake pages, log."""
    try:
        for step_id in claimed:
            STEP.enqueue(step_id)
    except Exception as exc:
        # Claimed steps whose jobs never reached the queue would hold the window forever.
        logger.exception("Builder run %s: enqueueing steps failed", run_uuid)
        reason = f"dispatch failed: {redact(exc)}"
        fail_run(run_id, None, reason)
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


def fail_run(run_id: int, step_id: int | None, reason: str) -> None:
    """A failed step fails its run, with the redacted reason, under the run lock."""
    reason = bounded(reason)
    with run_lock(GenerationRun, run_id) as run:
        if run is None:
            return
        now = utcnow()
        step = db.session.get(GenerationStep, step_id) if step_id is not None else None
        if step is not None and step.status == StepStatus.RUNNING:
            step.status = StepStatus.FAILED
            step.error = reason
            step.finished_at = now
            record(run_id, EventKind.STEP_FAILED, step.stage, step.key, at=now)
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
            interrupt_running(run_id, now)
            record(run_id, EventKind.RUN_FINISHED, run.stage, at=now)
        run_uuid = run.uuid
    live.bump(live_topic(run_uuid))
    if failed_now:
        logger.warning("Builder run %s failed: %s", run_uuid, reason)


def interrupt_running(run_id: int, now: Any) -> None:
    """Inside the locked transaction that ended the run: its running steps are failed.

    No step of an ended build reads as running: one whose worker was killed (SIGKILL, a
    lost host) would do so for ever, as the recovery looks at running builds only, and a
    retry, which queues only steps not done, would wait for it. A step still alive records
    its answer when it finishes all the same (``steps._complete``).
    """
    db.session.execute(
        update(GenerationStep)
        .where(GenerationStep.run_id == run_id, GenerationStep.status == StepStatus.RUNNING)
        .values(status=StepStatus.FAILED, error=INTERRUPTED, finished_at=now)
    )


def retry(run_uuid: str, actor: str = "cli", after_retry: int | None = None) -> tuple[str, int]:
    """Resume a failed run from its failed stage; return (that stage, steps queued again).

    Under the run lock: the stage's failed and skipped steps become pending again
    (its completed steps keep their output), the run is running again, and the first
    window is claimed, in one transaction; enqueued after the commit. Stages before
    it are not run again. ``after_retry``: the run's newest retry when the retry was
    confirmed (``last_retry``); refused if another came since: a confirmation sent twice
    would otherwise retry again a build whose first retry had already failed.
    """
    run_id = find_run(run_uuid).id
    db.session.rollback()
    with run_lock(GenerationRun, run_id) as run:
        if run is None or run.status != RunStatus.FAILED:
            status = run.status if run is not None else "gone"
            raise BuilderError(f"run {run_uuid} is {status}; only a failed run can be retried")
        if tenant_closed(run.tenant_id):  # as at start: paid for, read by nobody
            raise BuilderError(f"tenant {run.tenant_id} is closed; its build is not retried")
        if after_retry is not None and last_retry(run_id) > after_retry:
            raise BuilderError(f"run {run_uuid} was retried since this confirmation was shown")
        stage = run.stage
        again = db.session.execute(
            update(GenerationStep)
            .where(
                GenerationStep.run_id == run_id,
                GenerationStep.stage == stage,
                GenerationStep.status.in_(NOT_DONE),
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
        record(run_id, EventKind.RUN_RETRIED, stage)
        # Every step of the stage had finished (a dispatch failure after the last one):
        # the stage closes now and the next one opens.
        transition = None if again else advance_locked(run)
        claimed = claim_window(run)
        run_uuid = run.uuid
    logger.info("Builder run %s retried from stage %s by %s", run_uuid, stage, actor)
    after_commit(run_id, run_uuid, transition, claimed)
    return stage, again


def last_retry(run_id: int) -> int:
    """The id of the run's newest ``RUN_RETRIED`` event; 0 if it was never retried."""
    return db.session.execute(
        select(func.coalesce(func.max(GenerationEvent.id), 0)).where(
            GenerationEvent.run_id == run_id, GenerationEvent.kind == EventKind.RUN_RETRIED
        )
    ).scalar_one()


def tenant_closed(tenant_id: int) -> bool:
    """Whether the tenant left: its course would be paid for and read by nobody."""
    tenant = db.session.get(Tenant, tenant_id)
    return tenant is not None and tenant.status == CLOSED


def stage_counts(run: GenerationRun) -> dict[str, int]:
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


def record(
    run_id: int, kind: str, stage: str | None, step: str | None = None, at: Any = None
) -> None:
    db.session.add(
        GenerationEvent(run_id=run_id, kind=kind, stage=stage, step=step, at=at or utcnow())
    )
