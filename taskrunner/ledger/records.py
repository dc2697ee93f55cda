"""The plain values the ledger hands out, and the small helpers its writers share."""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from taskrunner.types import ACTIVE_UNIT, TaskUnit, UnitStatus

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


def new_token() -> str:
    return uuid_lib.uuid4().hex


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
