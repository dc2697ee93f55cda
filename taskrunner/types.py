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


class NotRecorded(TaskRunnerError):
    """What was asked could not be written: the database refused it, neither down nor
    refusing the operator's input. Nothing was written; the log has the cause under the
    ref its message quotes."""


class LeftoversNotCleared(TaskRunnerError):
    """A prune deleted its runs and recorded it, but the queues' leftovers could not be
    cleared (a queue backend away); the log has the cause under the ref it quotes."""


class ContextError(Refused):
    """A run's context its task type refuses (a key missing, misspelt or mistyped): no run
    is made. Exit 1 with this one line in the CLI, a 400 problem body on the web."""


class UnitError(ContextError):
    """A run's units the ledger cannot hold or the pages cannot reach (a key too long, empty,
    with a control character or a lone surrogate, twice in the run; a tenant id beyond 64
    bits): no run is made. One line naming the unit, as for a context."""


KINDS = {int: "a whole number", str: "a text", bool: "true or false"}


def check_context(
    type_: str,
    context: Mapping[str, Any],
    required: Mapping[str, type] | None = None,
    optional: Mapping[str, type] | None = None,
) -> None:
    """Refuse a context with a required key missing, a key no one reads (a misspelling, as
    often as not) or a value of another kind; ``bool`` is not taken for ``int``."""
    known = {**(required or {}), **(optional or {})}
    unknown = sorted(str(key) for key in context if key not in known)
    if unknown:
        reads = ", ".join(sorted(known)) or "no context"
        raise ContextError(f"{type_} has no context key {unknown[0][:40]!r} (it reads {reads})")
    missing = sorted(set(required or {}) - set(context))
    if missing:
        raise ContextError(f"{type_} needs the context key {missing[0]!r}")
    for key, value in context.items():
        kind = known[key]
        if not isinstance(value, kind) or (isinstance(value, bool) and kind is not bool):
            raise ContextError(
                f"{type_}: the context key {key!r} must be {KINDS.get(kind, kind.__name__)}, "
                f"not {type(value).__name__}"
            )


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

    # Optional: ``validate(context)`` raises ``ContextError`` for a context the type
    # refuses. Every way of starting a run calls it before the run exists.


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
