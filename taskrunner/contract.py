"""The task runner's public surface: what consumer modules import.

Everything else in ``taskrunner`` is internal. A module declares a task type by
implementing ``TaskDefinition``, registers it with ``register``, and starts runs
with ``start_run``. Unit jobs are plain functions returned by ``make_job``; the
runner wraps them in its tracking wrapper.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


class RunStatus(enum.StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    COMPLETED_WITH_FAILURES = "completed_with_failures"
    FAILED = "failed"
    CANCELLED = "cancelled"


TERMINAL_RUN = frozenset(s for s in RunStatus if s is not RunStatus.RUNNING)


class UnitStatus(enum.StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"


ACTIVE_UNIT = frozenset({UnitStatus.PENDING, UnitStatus.RUNNING})


class TaskRunnerError(Exception):
    """Base of the task runner's own errors."""


class TaskReportableError(TaskRunnerError):
    """An error whose message an operator may read (after the scrubber)."""


class PermanentError(TaskReportableError):
    """A failure no retry can fix: a single tracked job fails at once, its retries unspent."""


class Refused(TaskRunnerError):
    """An operator request the ledger refuses: unknown run, nothing to retry."""


@dataclass(frozen=True, slots=True)
class TaskUnit:
    key: str
    tenant_id: int | None = None


@dataclass(frozen=True, slots=True)
class TaskOptions:
    queue: str = "tasks"
    rate_per_minute: int | None = None
    stuck_after_minutes: int | None = None
    timeout: int = 300


UnitJob = Callable[[], Any]


@runtime_checkable
class TaskDefinition(Protocol):
    def type(self) -> str: ...

    def units(self, context: Mapping[str, Any]) -> Iterable[TaskUnit]: ...

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob: ...

    def options(self) -> TaskOptions: ...


@dataclass(frozen=True, slots=True)
class RunHandle:
    uuid: str
    status: RunStatus
    units_total: int


def register(definition: TaskDefinition) -> None:
    """Register a task type; call it at app start."""
    from taskrunner.registry import registry

    registry.register(definition)


def start_run(
    type_or_definition: str | TaskDefinition,
    context: Mapping[str, Any] | None = None,
    initiator: str = "cli",
) -> RunHandle:
    """Persist a run and its units, then dispatch one job per unit."""
    from taskrunner.runner import start

    return start(type_or_definition, dict(context or {}), initiator)


def unit_in_flight(type_: str, unit_key: str) -> bool:
    """Whether a unit with this key is pending or running in a running run of ``type_``."""
    from taskrunner.ledger import ledger

    return ledger.unit_in_flight(type_, unit_key)


def tracked_job(
    name: str,
    *,
    unit: Callable[..., TaskUnit],
    queue: str,
    timeout: int,
    retries: int = 0,
    retry_delay: int = 0,
    retry_backoff: float = 0,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a single tracked Huey job (SPEC §8): each attempt recorded on the ledger.

    ``unit(*job_args)`` names the unit; Huey keeps the retries (with backoff); the run
    is made on the first attempt and re-found on retries of the same dispatch.
    """
    from taskrunner.single import tracked_job as declare

    return declare(
        name,
        unit=unit,
        queue=queue,
        timeout=timeout,
        retries=retries,
        retry_delay=retry_delay,
        retry_backoff=retry_backoff,
    )


def bind_scrubber(scrubber: Callable[[str], str]) -> None:
    """Replace the pass-through scrubber applied to every kept error message."""
    from taskrunner import redaction

    redaction.bind_scrubber(scrubber)


def subscribe(event_name: str, handler: Callable[[Mapping[str, Any]], None]) -> None:
    """Deliver events of one name to ``handler`` (at least once; dedupe on ``id``)."""
    from taskrunner import events

    events.subscribe(event_name, handler)


def bind_tenant_context(enter: Callable[[int], Any], leave: Callable[[], Any]) -> None:
    """Let the tenancy module say how to enter and leave a tenant around a unit."""
    from taskrunner import tenant_scope

    tenant_scope.bind(enter, leave)
