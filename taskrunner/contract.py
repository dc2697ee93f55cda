"""The task runner's public surface: the one module consumer packages import.

A module declares a task type by implementing ``TaskDefinition``, registers it
with ``register`` (on the app in context: each app has its own types, subscribers
and seams), and starts runs with ``start_run``. Unit jobs are plain
functions returned by ``make_job``; the runner wraps them in its tracking
wrapper. Jobs of a module's own (``job``, ``tracked_job``) are declared here too,
and return a handle to enqueue them by. The operator surfaces (the backoffice
pages, the JSON API, the demo seed) read and act through ``operations``, the
runner's read and operations service; ``GET /metrics`` reads through ``metrics``, a live
page's stream through ``live_probes``. A package
publishes events of its own (``declare``, ``publishing``, ``deliver_events``) through the
runner's outbox.
Everything else in ``taskrunner`` (and the Huey wiring in ``tasks``) is internal.

A package that keeps its own work rows (the course builder's steps) builds on the
runner's primitives rather than on Huey: ``run_lock`` (one write transaction holding a
row's lock), ``gate`` (a job's claim, retried after a lost connection, else the job
back in the queue), ``contained`` (a failure recorded, never raised, the consumer's
stop excepted), ``patiently`` (an outcome written once the database answers again), a
job's ``on_stop`` (its work handed back when a consumer stops), and the stale rule
(``Tracked``, ``stale_filter``, ``lost_before``) for its recovery.
"""

from __future__ import annotations

from flask import current_app

from taskrunner import live_probes, metrics, operations
from taskrunner.events import Event, declare, known_events, subscribe
from taskrunner.failures import register_vendor_error
from taskrunner.jobs import contained, gate
from taskrunner.ledger import ledger
from taskrunner.ledger.stale_rules import Tracked, lost_before, stale_filter
from taskrunner.ledger.writes import run_lock
from taskrunner.outbox import Publisher, deliver_events, publishing
from taskrunner.redaction import (
    bind_scrubber,
    bounded,
    redact,
    register_domain_error,
    store_reason,
)
from taskrunner.registry import DefinitionError, check_definition, registry
from taskrunner.runner import start as start_run
from taskrunner.single import tracked_job
from taskrunner.tenant_scope import bind as bind_tenant_context
from taskrunner.tenant_scope import bind_names as bind_tenant_names
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
    UnitError,
    UnitJob,
    UnitStatus,
    check_context,
    plural,
)
from taskrunner.unit_rules import key_problem as unit_key_problem
from tasks.interrupts import raise_if_stopping
from tasks.outages import patiently
from tasks.routing import JobHandle, job, periodic
from tasks.schedules import Cron, Every, crontab

__all__ = [
    "ACTIVE_UNIT",
    "TERMINAL_RUN",
    "ContextError",
    "DefinitionError",
    "Event",
    "Cron",
    "Every",
    "JobHandle",
    "PermanentError",
    "Publisher",
    "Refused",
    "RunHandle",
    "RunStatus",
    "TaskDefinition",
    "TaskOptions",
    "TaskReportableError",
    "TaskRunnerError",
    "TaskUnit",
    "Tracked",
    "UnitError",
    "UnitJob",
    "UnitStatus",
    "bind_scrubber",
    "bind_tenant_context",
    "bind_tenant_names",
    "bounded",
    "check_context",
    "contained",
    "declare",
    "deliver_events",
    "crontab",
    "gate",
    "job",
    "known_events",
    "live_probes",
    "lost_before",
    "metrics",
    "operations",
    "patiently",
    "periodic",
    "plural",
    "publishing",
    "raise_if_stopping",
    "redact",
    "register",
    "register_domain_error",
    "register_vendor_error",
    "run_lock",
    "stale_filter",
    "start_run",
    "store_reason",
    "subscribe",
    "tracked_job",
    "unit_in_flight",
    "unit_key_problem",
]


unit_in_flight = ledger.runs.unit_in_flight


def register(definition: TaskDefinition) -> None:
    """Register a task type on the app in context; call it from a module's ``init_app``.

    ``DefinitionError`` (a ``ConfigError``) for a type the runner cannot honour."""
    check_definition(definition, current_app.config)
    registry.register(definition)
