"""The runner's services: start, retry, cancel and prune runs.

The CLI and the web views are both thin callers of these functions.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any

from flask import current_app

from database import database_outage, is_sqlite, utcnow
from taskrunner import dispatch as dispatching
from taskrunner.context_rules import check_storable
from taskrunner.ledger import CLI, Actor, Dispatch, PruneReport, ledger
from taskrunner.queue_leftovers import clear_leftovers
from taskrunner.redaction import redact
from taskrunner.registry import registry
from taskrunner.types import (
    TERMINAL_RUN,
    ContextError,
    LeftoversNotCleared,
    NotRecorded,
    Refused,
    RunHandle,
    RunStatus,
    TaskDefinition,
    TaskRunnerError,
    TaskUnit,
    plural,
)
from taskrunner.unit_feed import prefetched
from taskrunner.unit_rules import checked_units

logger = logging.getLogger(__name__)
INITIATOR_LENGTH = 120  # what task_runs.initiator holds


def start(
    type_or_definition: str | TaskDefinition,
    context: Mapping[str, Any] | None = None,
    initiator: str = "cli",
) -> RunHandle:
    """Persist a run and its units, then dispatch one job per unit.

    Refused (``Refused``, ``ContextError``, ``UnitError``) with nothing written: a type
    that is not registered, an initiator longer than a run row holds, a context no ledger
    stores as it is (``context_rules``) or the type's ``validate`` refuses, a unit the
    ledger cannot hold (``unit_rules``: the units are checked as they stream into the
    run's one transaction, which a refusal rolls back).
    """
    definition = registry.get(
        type_or_definition if isinstance(type_or_definition, str) else type_or_definition.type()
    )
    if len(initiator) > INITIATOR_LENGTH:  # PostgreSQL refused it at the insert
        raise Refused(
            f"an initiator is at most {INITIATOR_LENGTH} characters, not {len(initiator)}"
        )
    check_storable(definition.type(), {} if context is None else context)
    context = dict(context or {})
    validate = getattr(definition, "validate", None)
    if validate is not None:
        with _type_reading(definition, "check this context"):
            validate(context)  # ``ContextError``: refused before any row is written
    units = checked_units(_made_units(definition, context))
    if not is_sqlite(ledger.session):
        # Made and checked beside the COPY that stores them (``unit_feed``).
        units = prefetched(units, current_app.config["TASK_RUNNER_INSERT_CHUNK"])
    with recording(f"a run of {definition.type()}"):
        dispatch = ledger.transitions.create_run(
            definition.type(),
            context,
            initiator,
            units,
            current_app.config["TASK_RUNNER_INSERT_CHUNK"],
        )
    if dispatch.count == 0:
        status = ledger.transitions.finalize(dispatch.run_id)
        return RunHandle(dispatch.run_uuid, RunStatus(status), 0)
    _dispatch_or_settle(dispatch)
    return RunHandle(dispatch.run_uuid, RunStatus.RUNNING, dispatch.count)


def _made_units(definition: TaskDefinition, context: dict[str, Any]) -> Iterator[TaskUnit]:
    """The type's units, made inside the run's transaction, which a refusal rolls back.

    A type with no ``validate`` reads its context only here (``{"units": "abc"}`` is a
    ``ValueError`` in its ``int()``).
    """
    with _type_reading(definition, "make its units from this context"):
        yield from definition.units(context)


@contextmanager
def _type_reading(definition: TaskDefinition, what: str) -> Iterator[None]:
    """What the type's own code raises as it reads the context is a ``ContextError``.

    No run is made, so the context is what was refused, never the dispatch (a ``validate``
    with a bug of its own was reported "dispatch failed"). The message of an error that is
    not ours is withheld (``redact``); the log has it under the same ref.
    """
    try:
        yield
    except Refused:
        raise
    except Exception as exc:
        if database_outage(exc):
            raise  # the database could not answer: not the context's fault
        logger.warning("%s could not %s", definition.type(), what, exc_info=exc)
        raise ContextError(f"{definition.type()} could not {what}: {redact(exc)}") from exc


@contextmanager
def recording(what: str) -> Iterator[None]:
    """A database error that is neither an outage nor a refusal becomes ``NotRecorded``,
    logged under the ref its message quotes: nothing was dispatched, so the operator is
    not told "dispatch failed", and the ref leads to a traceback."""
    try:
        yield
    except Exception as exc:
        if isinstance(exc, TaskRunnerError) or database_outage(exc):
            raise
        logger.exception("%s could not be recorded", what)
        raise NotRecorded(f"{what} could not be recorded: {redact(exc)}") from exc


def _dispatch_or_settle(dispatch: Dispatch) -> None:
    try:
        dispatching.enqueue_dispatch(dispatch)
    except Exception as exc:
        # The wedge guard: no run stays running with nothing in flight.
        logger.exception("Dispatch of run %s failed", dispatch.run_uuid)
        # Only this dispatch's units: a narrow retry's failure leaves the jobs of the others.
        reason = f"dispatch failed: {redact(exc)}"
        ledger.transitions.fail_undispatched(dispatch.run_id, reason, token=dispatch.token)
        raise


def retry(
    run_uuid: str,
    failed_only: bool = False,
    actor: Actor = CLI,
    stale_only: bool = False,
    reason: str | None = None,
    unit_keys: list[str] | None = None,
    now: datetime | None = None,
    after_action: int | None = None,
) -> int:
    """Re-dispatch a run's failed, pending and stale units; return how many.

    ``reason`` narrows it to one error group (its failed units), ``unit_keys`` to a
    selection of units. ``now``: the moment staleness is judged at (default: the clock).
    ``after_action``: refused if the run had an operator action newer than this id.
    """
    with recording(f"a retry of run {run_uuid}"):
        dispatch = ledger.actions.reopen_for_retry(
            run_uuid,
            failed_only,
            actor,
            stale_only=stale_only,
            reason=reason,
            unit_keys=unit_keys,
            now=now,
            after_action=after_action,
        )
    _dispatch_or_settle(dispatch)
    return dispatch.count


def ended_within(run_uuid: str, seconds: float) -> str | None:
    """The run's status once it has ended, if it ends within ``seconds``; else None."""
    deadline = time.monotonic() + seconds
    while True:
        if (status := ledger.runs.get_run(run_uuid).status) in TERMINAL_RUN:
            return status
        ledger.session.rollback()
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.2)


def cancel(run_uuid: str, actor: Actor = CLI) -> int:
    """Cancel a running run; return how many units were skipped."""
    run = ledger.runs.get_run(run_uuid)
    with recording(f"the cancel of run {run_uuid}"):
        queued, skipped = ledger.actions.cancel(run_uuid, actor)
    try:
        dispatching.revoke(queued, run.type)
    except Exception:
        # The run is cancelled: a job left in the queue finds its unit skipped and does
        # nothing, so an unreachable queue costs a wasted dequeue, not a failed cancel.
        logger.exception("Run %s is cancelled; its queued jobs could not be revoked", run_uuid)
    return skipped


def prune(days: int | None = None, actor: Actor = CLI) -> PruneReport:
    """Delete terminal runs older than the retention and the queues' leftovers; record it."""
    if days is None:
        days = current_app.config["TASK_RUNNER_RETENTION_DAYS"]
    older_than = utcnow() - timedelta(days=days)
    report = ledger.pruning.prune(older_than)
    report.slots = ledger.schedules.prune(older_than)
    failure: Exception | None = None
    try:
        report.queue_keys = clear_leftovers(report.run_uuids, report.dispatch_uuids)
    except Exception as exc:
        if database_outage(exc):
            raise
        # The runs are gone already: what was deleted is recorded all the same.
        logger.exception("The queues' leftovers of a prune could not be cleared")
        failure = exc
    ledger.pruning.record_prune(report, older_than, actor)
    if failure is not None:
        raise LeftoversNotCleared(
            f"pruned {plural(report.runs, 'run')}, but the queues' leftovers could not be "
            f"cleared: {redact(failure)}"
        ) from failure
    return report


def retry_stale(actor: Actor = CLI, now: datetime | None = None) -> tuple[int, list[str]]:
    """Retry the stale units of every running run; return (units, refusals an operator reads)."""
    retried, refusals = 0, []
    for run_uuid, type_, _count in ledger.fleet.stale_counts_by_run(now):
        if registry.find(type_) is None:
            refusals.append(f"run {run_uuid} ({type_}) is not a registered task type")
            continue
        try:
            retried += retry(run_uuid, actor=actor, stale_only=True, now=now)
        except (Refused, NotRecorded) as exc:
            # Another operator or the run itself moved on since the count was read, or the
            # database refused this run's retry: the other runs are still retried.
            refusals.append(str(exc))
    return retried, refusals


def pause(type_: str, actor: Actor = CLI) -> bool:
    """Pause a registered task type; False if it was paused already."""
    registry.get(type_)
    with recording(f"the pause of {type_}"):
        return ledger.actions.pause_type(type_, actor)


def resume(type_: str, actor: Actor = CLI) -> int | None:
    """Resume a paused type and enqueue the units that waited; return how many (None: it
    was not paused, as a pause of a paused type is no error either)."""
    registry.get(type_)
    with recording(f"the resume of {type_}"):
        dispatches = ledger.actions.resume_type(type_, actor)
    if dispatches is None:
        return None
    failure: Exception | None = None
    for dispatch in dispatches:
        try:
            _dispatch_or_settle(dispatch)
        except Exception as exc:  # each run is dispatched or settled on its own
            failure = failure or exc
    if failure is not None:
        raise failure
    return sum(d.count for d in dispatches)
