"""The tracking wrapper: every unit job runs inside ``run_unit``.

Gate, tenant context, containment, finalization (``docs/architecture.md``, the
tracking wrapper). Fleet mode never re-raises: one unit's failure never stops the
others, also on an inline queue. Anything a job raises -- ``SystemExit`` and
``KeyboardInterrupt`` included -- is that unit's failure; only the consumer's real
stop signal goes on to Huey, which hands the unit back (``handed_back``).

The gate's policy (``gate``) and the containment (``contained``) are the runner's
primitives, offered to the domain packages' own jobs through the contract.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TypeVar

from flask import current_app
from huey.exceptions import RetryTask, TaskTimeout
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from database import Outage, epoch
from extensions import db
from taskrunner import tenant_scope
from taskrunner.dispatch import RATE_LIMIT_PREFIX, RUN_UNIT, enqueue_unit, queue_of
from taskrunner.failures import Failure
from taskrunner.heartbeat import heartbeat
from taskrunner.ledger import EXPIRED, Claim, ledger
from taskrunner.redaction import store_reason
from taskrunner.registry import registry
from taskrunner.soft_timeout import soft_timeouts
from taskrunner.types import TaskDefinition
from tasks import outages
from tasks.interrupts import STRAY_SIGNAL_REASON, raise_if_stopping, stray_signal
from tasks.queues import queues
from tasks.routing import job

logger = logging.getLogger(__name__)

__all__ = ["EXPIRED", "contained", "gate", "run_unit"]

# The gate is tried again at once after a lost connection (the pool hands out a fresh
# one), then the job goes back to the queue a little later: it is never dropped for it.
GATE_PAUSES = (0.0, 0.5)
GATE_REQUEUE_SECONDS = 5
T = TypeVar("T")


def gate(what: str, statement: Callable[[], T]) -> T:
    """A job's claim on its work: ``statement`` (one write transaction), retried at once
    after a lost connection, else the job goes back to the queue a little later -- never
    dropped with its work waiting for it. During an outage the job waits longer each
    time (the process's back-off, ``tasks.outages``), and the outage is said once."""
    pause_after = 0.0
    for pause in GATE_PAUSES:
        if pause:
            time.sleep(pause)  # even a zero sleep yields the processor: not on every unit
        try:
            claimed = statement()
        except PoolTimeout as exc:
            # Every connection of the pool busy for its whole timeout: the job goes back to
            # the queue like after a lost connection, never dropped with its unit pending.
            pause_after = outages.episode.failed(outage_of(exc), f"the gate of {what}")
            break
        except DBAPIError as exc:
            raise_if_stopping(exc)  # a stop that landed in the gate's statement
            if not (
                isinstance(exc, OperationalError | InterfaceError) or exc.connection_invalidated
            ):
                raise
            db.session.rollback()  # a session read that failed is unusable until rolled back
            pause_after = outages.episode.failed(outage_of(exc), f"the gate of {what}")
        else:
            outages.episode.succeeded()
            return claimed
    raise RetryTask(f"gate of {what} unreachable", delay=max(GATE_REQUEUE_SECONDS, pause_after))


def outage_of(exc: BaseException) -> Outage:
    return outages.outage_of(exc) or Outage("the database failed", type(exc).__name__)


def contained(work: Callable[[], T], what: str, timed_out: str) -> tuple[T | None, str | None]:
    """Run ``work``: (what it returned, None), or (None, why it failed) -- ``timed_out``
    for a timeout, else the redacted reason. Anything it raises, ``SystemExit`` included,
    is its failure, logged with its traceback; only the consumer's stop goes on to Huey,
    which hands the work back."""
    done, failure = contained_failure(work, what, timed_out)
    return done, failure.reason if failure else None


def contained_failure(
    work: Callable[[], T], what: str, timed_out: str
) -> tuple[T | None, Failure | None]:
    """``contained``, with the failure's kind and redacted stack besides its reason."""
    try:
        return work(), None
    except TaskTimeout as exc:
        db.session.rollback()
        logger.warning("%s timed out", what)
        return None, Failure.timeout(timed_out, exc)
    except BaseException as exc:
        raise_if_stopping(exc)
        db.session.rollback()
        logger.exception("%s failed", what)
        failure = Failure.of(exc)
        if stray_signal(exc):
            failure = Failure(STRAY_SIGNAL_REASON, failure.kind, failure.stack)
        return None, failure


def expired(
    run_id: int, unit_id: int, token: str, horizon: float, type_: str | None = None
) -> None:
    """Huey dropped a unit job past its drain horizon: fail the unit, never leave it pending."""
    _expire(unit_id, token)


def handed_back(
    run_id: int, unit_id: int, token: str, horizon: float, type_: str | None = None
) -> None:
    """A consumer is stopping mid-unit: hand the unit back with a new job, lose nothing.

    Huey's consumer answers SIGTERM by sending SIGTERM to its process workers; a worker
    with a task in flight raises KeyboardInterrupt inside it and Huey calls this (the
    job's ``on_stop``) in that same worker process, after the job's app context was torn
    down (its open transaction rolled back). The interrupt may land before the gate (the
    unit is still pending with this job's token) or after the unit settled but before
    the run was finalized: both are covered.
    """
    handed = ledger.transitions.hand_back(unit_id, token)
    if handed is None:
        ledger.transitions.finalize(run_id)
        return
    new_token, type_ = handed
    if registry.find(type_) is not None:
        enqueue_unit(run_id, unit_id, new_token, type_, horizon)
        logger.warning("Unit %s handed back on shutdown as a new job", unit_id)


@job(RUN_UNIT, queue=None, timeout=900, on_stop=handed_back, on_expire=expired, gated=True)
def run_unit(
    run_id: int, unit_id: int, token: str, horizon: float, type_: str | None = None
) -> None:
    if epoch() > horizon:
        _expire(unit_id, token)
        return
    # The type travels with the job, so an unthrottled unit costs no read before its gate.
    definition = registry.find(type_) if type_ else None
    options = definition.options() if definition else None
    what = f"unit {unit_id}"
    if options and options.rate_per_minute:
        # A duplicated or superseded job must not spend a slot the live ones need. The
        # check is the gate's first read: a lost connection retries it, never drops the job.
        if not gate(what, lambda: ledger.transitions.pending_with(unit_id, token)):
            return
        # Raises RateLimitExceeded before the gate: Huey reschedules the job for the
        # next window without consuming a try, and the unit stays pending.
        window = current_app.config["TASK_RUNNER_RATE_WINDOW_SECONDS"]
        queues().huey(queue_of(type_)).rate_limit(
            RATE_LIMIT_PREFIX + type_, options.rate_per_minute, window
        ).acquire()
    claim = gate(what, lambda: ledger.transitions.claim(unit_id, token))
    if claim is None:
        return  # redelivered, duplicated, superseded or cancelled: not ours
    failure = _run_contained(claim)
    # The work is done: its outcome waits for the database rather than being lost.
    settled = outages.patiently(
        lambda: _settle_afresh(claim, failure), f"recording {what}'s outcome", time.sleep
    )
    if settled is None:
        # Retried or handed back while this job ran (a partitioned or slow worker): the
        # unit belongs to a newer dispatch, and this outcome is not recorded.
        logger.warning(
            "Unit %s of run %s %s under a superseded dispatch token; outcome ignored",
            claim.unit.key,
            claim.run.uuid,
            "completed" if failure is None else "failed",
        )


def _settle_afresh(claim: Claim, failure: Failure | None) -> bool | None:
    """``_settle``, its session rolled back when the database failed under it (the next
    attempt starts clean)."""
    try:
        return _settle(claim, failure)
    except DBAPIError:
        db.session.rollback()
        raise


def _settle(claim: Claim, failure: Failure | None) -> bool | None:
    """Record the outcome; None when this job no longer held the unit.

    A completion is one transaction that also looks for another active unit of the
    run: only the run's tail pays for ``finalize``. A failure writes its event and
    always checks.
    """
    if failure is None:
        outcome = ledger.transitions.complete_and_look(claim)
        if not outcome.settled:
            return None
        if outcome.maybe_last:
            ledger.transitions.finalize(claim.run.id)
        return True
    if not store_reason(
        lambda text: ledger.transitions.fail(claim, text, failure.kind, failure.stack),
        failure.reason,
    ):
        return None
    ledger.transitions.finalize(claim.run.id)
    return True


def _run_contained(claim: Claim) -> Failure | None:
    """Run the unit's job; None if it succeeded, else how it failed."""
    info = claim.run
    definition = registry.find(info.type)

    def work() -> None:
        if definition is None:
            raise LookupError(f"task type {info.type!r} is not registered")
        unit_job = definition.make_job(claim.unit, info.context)
        with tenant_scope.tenant(claim.unit.tenant_id), _time_limit(definition):
            unit_job()

    timeout = definition.options().timeout if definition else None
    with heartbeat.beating(claim.unit_id, claim.token):
        _done, failure = contained_failure(
            work,
            f"Unit {claim.unit.key} of run {info.uuid} ({info.type})",
            f"timeout: ran longer than {timeout} s",
        )
    return failure


def _time_limit(definition: TaskDefinition) -> AbstractContextManager[None]:
    """A soft timeout on a thread worker (the I/O lane); process workers have a hard one."""
    if threading.current_thread() is threading.main_thread():
        return nullcontext()
    return soft_timeouts.limit(definition.options().timeout)


def _expire(unit_id: int, token: str) -> None:
    run_id = ledger.sweeps.expire(unit_id, token)
    if run_id is not None:
        ledger.transitions.finalize(run_id)
