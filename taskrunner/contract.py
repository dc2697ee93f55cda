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

from huey import crontab

from taskrunner import operations
from taskrunner.events import subscribe
from taskrunner.ledger import ledger
from taskrunner.redaction import bind_scrubber, bounded, redact, register_domain_error
from taskrunner.registry import registry
from taskrunner.runner import start as start_run
from taskrunner.single import tracked_job
from taskrunner.tenant_scope import bind as bind_tenant_context
from taskrunner.types import (
    ACTIVE_UNIT,
    TERMINAL_RUN,
    ContextError,
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
    check_context,
    plural,
)
from tasks.interrupts import raise_if_stopping
from tasks.routing import JobHandle, job, on_signal, periodic
from tasks.schedules import Cron, Every

__all__ = [
    "ACTIVE_UNIT",
    "TERMINAL_RUN",
    "ContextError",
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
    "check_context",
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


unit_in_flight = ledger.runs.unit_in_flight


def register(definition: TaskDefinition) -> None:
    """Register a task type on the app in context; call it from a module's ``init_app``."""
    registry.register(definition)
