"""Single tracked jobs (docs/operations.md): a fire-and-forget Huey job that keeps a ledger.

A job declared with ``tracked_job`` stays an ordinary Huey job with its own name,
arguments and retries, so its call sites do not change. Around each execution the
wrapper records one attempt on a run of its own: the run and its one unit are made
lazily on the first attempt and re-found on Huey's retries of the same dispatch by
the Huey task id, stored as ``context.dispatch_uuid``. Another dispatch of the same
key opens its own run. An attempt that fails with retries left puts the unit back
to pending with its reason; only the final failure (or a ``PermanentError``, which
no retry can fix) fails the unit and closes the run. ``tasks retry`` refuses these
runs: their retries belong to their own queue. Once its run is made, the dispatch's job
carries ``RUN_MADE`` in its kwargs (Huey's retries and a hand-back re-send them): a later
delivery that finds no run then knows it was pruned, and does nothing rather than open a
new one (a cancelled dispatch stays cancelled).

The trade-off, accepted: a job lost before its first attempt has no row to show.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any, NoReturn

from huey.exceptions import CancelExecution, TaskTimeout

from extensions import db
from taskrunner import tenant_scope
from taskrunner.failures import Failure
from taskrunner.heartbeat import heartbeat
from taskrunner.ledger import ledger
from taskrunner.redaction import store_reason
from taskrunner.types import PermanentError, TaskRunnerError, TaskUnit
from tasks.interrupts import raise_if_stopping
from tasks.queues import queues
from tasks.routing import JobHandle, job

logger = logging.getLogger(__name__)

RUN_MADE = "_ledger_run_made"


def tracked_job(
    name: str,
    *,
    unit: Callable[..., TaskUnit],
    queue: str,
    timeout: int,
    retries: int = 0,
    retry_delay: int = 0,
    retry_backoff: float = 0,
    initiator: str = "queue",
) -> Callable[[Callable[..., Any]], JobHandle]:
    """Declare a single tracked Huey job: each attempt recorded on the ledger.

    ``unit(*job_args)`` names the unit; Huey keeps the retries (with backoff); the run
    is made on the first attempt, as type ``name``, and re-found on retries of the same
    dispatch.
    """

    def decorator(fn: Callable[..., Any]) -> JobHandle:
        @functools.wraps(fn)
        def run(*args: Any, task: Any, **kwargs: Any) -> Any:
            made = bool(kwargs.pop(RUN_MADE, False))
            return execute_attempt(
                name,
                unit(*args, **kwargs),
                task,
                functools.partial(fn, *args, **kwargs),
                initiator,
                made,
            )

        def interrupted(*_args: Any, task: Any, **_kwargs: Any) -> None:
            """A consumer stopped mid-attempt: the same dispatch again, its run re-found."""
            ledger.single_jobs.release_interrupted_single(name, task.id)
            queues().huey(queue).enqueue(task)
            logger.warning("Attempt of %s (%s) handed back on shutdown", name, task.id)

        job(
            name,
            queue=queue,
            timeout=timeout,
            retries=retries,
            retry_delay=retry_delay,
            retry_backoff=retry_backoff,
            wants_task=True,
            on_stop=interrupted,
        )(run)
        # Enqueued like any job; ``call_local`` runs the body alone, untracked (tests).
        return JobHandle(name, fn)

    return decorator


def execute_attempt(
    type_: str,
    unit: TaskUnit,
    task: Any,
    call: Callable[[], Any],
    initiator: str,
    made: bool = False,
) -> Any:
    claim = ledger.single_jobs.begin_single_attempt(
        type_, unit, task.id, initiator, open_run=not made
    )
    # The job's own kwargs travel with each retry and hand-back of this dispatch.
    task.kwargs[RUN_MADE] = True
    if claim is None:
        logger.info(
            "Dispatch %s of %s already settled, pruned or running elsewhere; nothing to do",
            task.id,
            type_,
        )
        return None
    try:
        with heartbeat.beating(claim.unit_id, claim.token), tenant_scope.tenant(unit.tenant_id):
            result = call()
    except BaseException as exc:
        raise_if_stopping(exc)
        db.session.rollback()
        failure = (
            Failure.timeout(f"timeout: ran longer than {task.timeout} s", exc)
            if isinstance(exc, TaskTimeout)
            else Failure.of(exc)
        )
        reason = failure.reason
        final = isinstance(exc, PermanentError) or not task.retries
        if not final:
            logger.warning(
                "Attempt %d of %s (%s) failed, Huey retries it: %s",
                claim.attempts,
                type_,
                unit.key,
                reason,
            )
            store_reason(lambda text: ledger.single_jobs.release_attempt(claim, text), reason)
            _raise_to_huey(exc)
        logger.exception(
            "%s (%s) failed for good after %d attempts", type_, unit.key, claim.attempts
        )
        if store_reason(
            lambda text: ledger.transitions.fail(claim, text, failure.kind, failure.stack), reason
        ):
            ledger.transitions.finalize(claim.run.id)
        if task.retries:
            # A permanent error: Huey must not spend the retries that are left.
            raise CancelExecution(retry=False) from exc
        _raise_to_huey(exc)
    if ledger.transitions.complete(claim):
        ledger.transitions.finalize(claim.run.id)
    return result


def _raise_to_huey(exc: BaseException) -> NoReturn:
    """Let Huey see the failure (and retry): a job's ``SystemExit`` would end the worker."""
    if isinstance(exc, Exception):
        raise exc
    raise TaskRunnerError(f"job raised {type(exc).__name__}") from exc
