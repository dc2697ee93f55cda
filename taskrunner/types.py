"""The task runner's shared types: statuses, errors, a unit, a type's options.

This module imports nothing of the project, so every module of the runner (and
``taskrunner.contract``, which re-exports it) can depend on it without a cycle.
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


def plural(n: int, word: str, words: str | None = None) -> str:
    """'1 unit', '1,580 units': the count with a thousands separator and the right form.

    One helper for the pages and every package's CLI (through ``taskrunner.contract``).
    """
    return f"{n:,} {word if n == 1 else (words or word + 's')}"
