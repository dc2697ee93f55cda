"""The task runner's public surface: the one module consumer packages import.

A module declares a task type by implementing ``TaskDefinition``, registers it
with ``register`` (on the app in context: each app has its own types, subscribers
and seams), and starts runs with ``start_run``. Unit jobs are plain
functions returned by ``make_job``; the runner wraps them in its tracking
wrapper. Jobs of a module's own (``job``, ``tracked_job``) are declared here too,
and return a handle to enqueue them by. The operator surfaces (the backoffice
pages, the JSON API, the demo seed) read and act through ``operations``, the
runner's read and operations service. Everything else in ``taskrunner`` (and
the Huey wiring in ``tasks``) is internal.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from huey import crontab

from taskrunner import events, operations, redaction, tenant_scope
from taskrunner.ledger import ledger
from taskrunner.redaction import bounded, redact
from taskrunner.registry import registry
from taskrunner.runner import start
from taskrunner.single import tracked_job as _declare_tracked_job
from taskrunner.types import (
    ACTIVE_UNIT,
    TERMINAL_RUN,
    PermanentError,
    Refused,
    RunHandle,
    RunStatus,
    TaskDefinition,
    TaskOptions,
    TaskReportableError,
    TaskRunnerError,
    TaskUnit,
    UnitJob,
    UnitStatus,
    plural,
)
from tasks.interrupts import raise_if_stopping
from tasks.routing import JobHandle, job, on_signal, periodic
from tasks.schedules import Cron, Every

__all__ = [
    "ACTIVE_UNIT",
    "TERMINAL_RUN",
    "Cron",
    "Every",
    "JobHandle",
    "PermanentError",
    "Refused",
    "RunHandle",
    "RunStatus",
    "TaskDefinition",
    "TaskOptions",
    "TaskReportableError",
    "TaskRunnerError",
    "TaskUnit",
    "UnitJob",
    "UnitStatus",
    "bind_scrubber",
    "bind_tenant_context",
    "bounded",
    "crontab",
    "job",
    "on_signal",
    "operations",
    "periodic",
    "plural",
    "raise_if_stopping",
    "redact",
    "register",
    "register_domain_error",
    "start_run",
    "subscribe",
    "tracked_job",
    "unit_in_flight",
]


def register(definition: TaskDefinition) -> None:
    """Register a task type on the app in context; call it from a module's ``init_app``."""
    registry.register(definition)


def start_run(
    type_or_definition: str | TaskDefinition,
    context: Mapping[str, Any] | None = None,
    initiator: str = "cli",
) -> RunHandle:
    """Persist a run and its units, then dispatch one job per unit."""
    return start(type_or_definition, dict(context or {}), initiator)


def unit_in_flight(type_: str, unit_key: str) -> bool:
    """Whether a unit with this key is pending or running in a running run of ``type_``."""
    return ledger.runs.unit_in_flight(type_, unit_key)


def tracked_job(
    name: str,
    *,
    unit: Callable[..., TaskUnit],
    queue: str,
    timeout: int,
    retries: int = 0,
    retry_delay: int = 0,
    retry_backoff: float = 0,
) -> Callable[[Callable[..., Any]], JobHandle]:
    """Declare a single tracked Huey job (SPEC §8): each attempt recorded on the ledger.

    ``unit(*job_args)`` names the unit; Huey keeps the retries (with backoff); the run
    is made on the first attempt and re-found on retries of the same dispatch.
    """
    return _declare_tracked_job(
        name,
        unit=unit,
        queue=queue,
        timeout=timeout,
        retries=retries,
        retry_delay=retry_delay,
        retry_backoff=retry_backoff,
    )


E = TypeVar("E", bound=type[BaseException])


def register_domain_error(cls: E) -> E:
    """Declare an exception class whose message an operator may read (a class decorator).

    Its message is kept in the ledger after the scrubber, like a ``TaskReportableError``;
    any other exception is stored by class name only.
    """
    redaction.register_domain_error(cls)
    return cls


def bind_scrubber(scrubber: Callable[[str], str]) -> None:
    """Replace the app's pass-through scrubber applied to every kept error message."""
    redaction.bind_scrubber(scrubber)


def subscribe(event_name: str, handler: Callable[[Mapping[str, Any]], None]) -> None:
    """Deliver the app's events of one name to ``handler`` (at least once; dedupe on ``id``)."""
    events.subscribe(event_name, handler)


def bind_tenant_context(enter: Callable[[int], Any], leave: Callable[[], Any]) -> None:
    """Let the tenancy module say how the app enters and leaves a tenant around a unit."""
    tenant_scope.bind(enter, leave)
