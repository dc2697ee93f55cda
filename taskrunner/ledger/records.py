"""The plain values the ledger hands out, and the small helpers its parts share."""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, and_

from database import iso
from taskrunner.failures import stored_kind
from taskrunner.models import TaskRunUnit
from taskrunner.types import ACTIVE_UNIT, RunStatus, TaskUnit, UnitStatus

UNIT_COLUMNS = (
    "task_run_id",
    "unit_key",
    "tenant_id",
    "status",
    "attempts",
    "dispatch_token",
    "queued_at",
    "created_at",
    "updated_at",
)
ACTIVE = tuple(str(s) for s in ACTIVE_UNIT)
EXPIRED = "expired: drain horizon exceeded"
RUN_STATUSES = tuple(str(s) for s in RunStatus)
UNIT_STATUSES = tuple(str(s) for s in UnitStatus)


def new_token() -> str:
    return uuid_lib.uuid4().hex


def not_deleted(*models: Any) -> ColumnElement[bool]:
    """Rows of these models that were not soft-deleted (a prune hides a run first)."""
    return and_(*(model.deleted_at.is_(None) for model in models))


def is_uuid(value: Any) -> bool:
    """A uuid in its canonical, lower-case form (what the ledger stores)."""
    try:
        return str(uuid_lib.UUID(str(value))) == str(value).lower()
    except (ValueError, AttributeError, TypeError):
        return False


@dataclass(frozen=True)
class Actor:
    """Who asks for an operator action, and from where."""

    name: str
    source: str = "cli"
    address: str | None = None


CLI = Actor("cli")


class InvalidCursor(ValueError):
    """A cursor that does not name a row of this list."""


@dataclass(frozen=True, slots=True)
class Page:
    items: list[Any]
    next_cursor: str | None


def page_of(
    rows: Sequence[Any],
    limit: int,
    item: Callable[[Any], Any],
    cursor: Callable[[Any], str],
) -> Page:
    """A page of at most ``limit`` items from ``limit + 1`` rows; the cursor names the last
    item when there is more."""
    items = [item(row) for row in rows[:limit]]
    return Page(items, cursor(items[-1]) if len(rows) > limit and items else None)


def failure_kind(unit: TaskRunUnit) -> str | None:
    """The kind of a failed unit's failure (SPEC §17); None for a unit that did not fail."""
    if unit.status != UnitStatus.FAILED:
        return None
    return stored_kind(unit.failure_kind, unit.last_error)


def unit_dict(unit: TaskRunUnit, stale_reason: str | None, **extra: Any) -> dict[str, Any]:
    """A unit as the pages and the JSON show it (README, "JSON output"), plus ``extra``."""
    return {
        "unit_key": unit.unit_key,
        "tenant_id": unit.tenant_id,
        "status": unit.status,
        "attempts": unit.attempts,
        "last_error": unit.last_error,
        "kind": failure_kind(unit),
        "started_at": iso(unit.started_at),
        "finished_at": iso(unit.finished_at),
        "stale": stale_reason is not None,
        "stale_reason": stale_reason,
        **extra,
    }


@dataclass(frozen=True, slots=True)
class RunInfo:
    id: int
    uuid: str
    type: str
    context: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Claim:
    """A unit the gate let through: this job now owns it."""

    unit_id: int
    run: RunInfo
    unit: TaskUnit
    attempts: int
    token: str


@dataclass(frozen=True, slots=True)
class Settled:
    """What completing a unit found: whether this job settled it, and whether the run may
    be done (no other active unit seen), which only ``finalize`` decides."""

    settled: bool
    maybe_last: bool


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Units of a run that were (re)assigned one dispatch token and must be enqueued."""

    run_id: int
    run_uuid: str
    type: str
    token: str
    count: int


@dataclass(slots=True)
class PruneReport:
    """What one prune deleted; the uuids let the queues' leftovers of those runs go too."""

    runs: int = 0
    units: int = 0
    events: int = 0
    actions: int = 0
    queue_keys: int = 0
    slots: int = 0  # schedule slots past the retention
    run_uuids: list[str] = field(default_factory=list)
    dispatch_uuids: list[str] = field(default_factory=list)


def redispatched(token: str, now: datetime) -> dict[str, Any]:
    """A unit back to pending under a new dispatch token: a new episode, nothing stale."""
    return {
        "status": UnitStatus.PENDING,
        "dispatch_token": token,
        "queued_at": now,
        "started_at": None,
        "heartbeat_at": None,
        "finished_at": None,
        "stuck_notified_at": None,
        "updated_at": now,
    }


def chunks(items: Iterable[TaskUnit], size: int) -> Iterator[list[TaskUnit]]:
    chunk: list[TaskUnit] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
