"""The tracking wrapper: every unit job runs inside ``run_unit``.

Gate, tenant context, containment, finalization -- SPEC §5. Fleet mode never
re-raises: one unit's failure never stops the others, also on an inline queue.
"""

from __future__ import annotations

import logging
import time

from flask import current_app
from huey import signals
from huey.exceptions import TaskTimeout

from extensions import db
from taskrunner import tenant_scope
from taskrunner.dispatch import RUN_UNIT, enqueue_unit
from taskrunner.heartbeat import heartbeat
from taskrunner.ledger import ledger
from taskrunner.redaction import redact
from taskrunner.registry import registry
from tasks.queues import queues
from tasks.routing import job, on_signal

logger = logging.getLogger(__name__)

EXPIRED = "expired: drain horizon exceeded"


@job(RUN_UNIT, queue=None, timeout=900)
def run_unit(run_id: int, unit_id: int, token: str, horizon: float) -> None:
    info = ledger.run_info(run_id)
    definition = registry.find(info.type)
    if time.time() > horizon:
        _expire(unit_id, token)
        return
    options = definition.options() if definition else None
    if options and options.rate_per_minute:
        # Raises RateLimitExceeded before the gate: Huey reschedules the job for the
        # next window without consuming a try, and the unit stays pending.
        window = current_app.config["TASK_RUNNER_RATE_WINDOW_SECONDS"]
        queues().huey(options.queue).rate_limit(
            f"task-runner.{info.type}", options.rate_per_minute, window
        ).acquire()
    claim = ledger.claim(unit_id, token)
    if claim is None:
        return  # redelivered, duplicated, superseded or cancelled: not ours
    reason = None
    with heartbeat.beating(unit_id):
        try:
            if definition is None:
                raise LookupError(f"task type {info.type!r} is not registered")
            unit_job = definition.make_job(claim.unit, info.context)
            with tenant_scope.tenant(claim.unit.tenant_id):
                unit_job()
        except TaskTimeout:
            db.session.rollback()
            reason = f"timeout: ran longer than {options.timeout} s" if options else "timeout"
            logger.warning("Unit %s of run %s timed out", claim.unit.key, info.uuid)
        except Exception as exc:
            db.session.rollback()
            reason = redact(exc)
            logger.exception("Unit %s of run %s (%s) failed", claim.unit.key, info.uuid, info.type)
    settled = ledger.complete(claim) if reason is None else ledger.fail(claim, reason)
    if settled:
        ledger.finalize(run_id)


def _expire(unit_id: int, token: str) -> None:
    run_id = ledger.expire(unit_id, token, EXPIRED)
    if run_id is not None:
        ledger.finalize(run_id)


@on_signal(signals.SIGNAL_EXPIRED)
def expired(signal: str, task, queue: str) -> None:
    """Huey dropped a unit job past its drain horizon: fail the unit, never leave it pending."""
    if task.name == RUN_UNIT:
        _run_id, unit_id, token, _horizon = task.args
        _expire(unit_id, token)


@on_signal(signals.SIGNAL_INTERRUPTED)
def handed_back(signal: str, task, queue: str) -> None:
    """A consumer is stopping mid-unit: hand the unit back with a new job, lose nothing.

    Huey's consumer answers SIGTERM by sending SIGTERM to its process workers; a worker
    with a task in flight raises KeyboardInterrupt inside it and emits this signal in
    that same worker process, after the job's app context was torn down (its open
    transaction rolled back). The interrupt may land before the gate (the unit is
    still pending with this job's token) or after the unit settled but before the run
    was finalized: both are covered.
    """
    if task.name != RUN_UNIT:
        return
    run_id, unit_id, token, horizon = task.args
    new_token = ledger.hand_back(unit_id, token)
    if new_token is None:
        ledger.finalize(run_id)
        return
    definition = registry.find(ledger.run_info(run_id).type)
    if definition is not None:
        enqueue_unit(run_id, unit_id, new_token, definition.options(), horizon)
        logger.warning("Unit %s handed back on shutdown as a new job", unit_id)
