"""What a read of the schedules returns: a schedule and its slots, as plain values."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class SlotView:
    slot_at: datetime
    state: str
    host: str | None = None
    enqueued_at: datetime | None = None
    claimed_at: datetime | None = None
    finished_at: datetime | None = None
    run_uuid: str | None = None
    reason: str | None = None
    initiator: str | None = None


@dataclass(frozen=True)
class ScheduleView:
    name: str
    starts: str  # "run payments.monthly_statements" or "job taskrunner.prune"
    rule: str  # in words
    expression: str
    timezone: str
    grace_seconds: int
    paused: bool
    paused_by: str | None
    paused_at: datetime | None
    next_due_at: datetime | None
    first_known_at: datetime | None
    missed: int  # slots missed in the last 24 h
    missed_from: datetime | None  # the open missed episode's first slot
    slots: list[SlotView]  # newest first
    unclaimed_missed: list[datetime]  # missed slots with no row yet, oldest first

    @property
    def last_slot(self) -> SlotView | None:
        return self.slots[0] if self.slots else None
