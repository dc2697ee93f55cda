"""The reads of schedule slots and states, for the schedules' pages, the watch and the claims.

Each look goes down the primary key (``name``, ``slot``) of one schedule, or the partial
index of its missed rows: its cost follows what it returns, not the rows a year holds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime

from sqlalchemy import Row, func, or_, select, union_all
from sqlalchemy.orm import Session

from taskrunner.models import ScheduleSlot, ScheduleState

MISSED = "missed"
PAUSED = "paused"
HANDED_BACK = "handed_back"
SCHEDULER = "schedule"  # a scheduler's slot; an operator's run now is "operator:<who>"
# A slot a scheduler owed: one it claimed, or one the watch wrote missed (no initiator).
BY_SCHEDULER = or_(ScheduleSlot.initiator.is_(None), ScheduleSlot.initiator == SCHEDULER)
SLOT_COLUMNS = (
    ScheduleSlot.name,
    ScheduleSlot.slot,
    ScheduleSlot.claimed_at,
    ScheduleSlot.claimed_by,
    ScheduleSlot.enqueued_at,
    ScheduleSlot.finished_at,
    ScheduleSlot.outcome,
    ScheduleSlot.reason,
    ScheduleSlot.run_uuid,
    ScheduleSlot.initiator,
)


def by_scheduler(initiator: str | None) -> bool:
    """A slot a scheduler owed: an operator's run now is no sign of a scheduler."""
    return initiator in (None, SCHEDULER)


class ScheduleReads:
    """Every read of ``periodic_slots`` and ``schedule_states``."""

    session: Session

    def states(self) -> dict[str, ScheduleState]:
        rows = self.session.execute(select(ScheduleState)).scalars()
        return {row.name: row for row in rows}

    def recent(self, names: Iterable[str], limit: int) -> dict[str, list[Row]]:
        """Each of ``names``' newest ``limit`` slot rows, newest first.

        One statement of one short look per name down the primary key (``name``, ``slot``):
        its cost follows ``limit``, not the rows a year of slots holds.
        """
        looks = [
            select(*SLOT_COLUMNS)
            .where(ScheduleSlot.name == name)
            .order_by(ScheduleSlot.slot.desc())
            .limit(limit)
            .subquery()
            .select()
            for name in names
        ]
        found: dict[str, list[Row]] = {name: [] for name in names}
        if looks:
            for row in self.session.execute(union_all(*looks)):
                found[row.name].append(row)
        for rows in found.values():
            rows.sort(key=lambda row: row.slot, reverse=True)
        return found

    def newest_by_scheduler(self, recent: Mapping[str, list[Row]]) -> dict[str, datetime | None]:
        """Each schedule's newest slot a scheduler owed, from its ``recent`` rows (newest
        first); when those are all an operator's run now, a look down the primary key past
        them (an operator's run now says nothing of the schedule's scheduler)."""
        found = {
            name: next((row.slot for row in rows if by_scheduler(row.initiator)), None)
            for name, rows in recent.items()
        }
        looks = [
            select(ScheduleSlot.name, ScheduleSlot.slot)
            .where(ScheduleSlot.name == name, BY_SCHEDULER)
            .order_by(ScheduleSlot.slot.desc())
            .limit(1)
            .subquery()
            .select()
            for name, rows in recent.items()
            if rows and found[name] is None
        ]
        if looks:
            found.update({row.name: row.slot for row in self.session.execute(union_all(*looks))})
        return found

    def slots_in(self, name: str, after: datetime, until: datetime) -> set[datetime]:
        """The slots of ``name`` with a row in (``after``, ``until``], whatever their outcome."""
        rows = self.session.execute(
            select(ScheduleSlot.slot).where(
                ScheduleSlot.name == name, ScheduleSlot.slot > after, ScheduleSlot.slot <= until
            )
        )
        return set(rows.scalars())

    def handed_back(self, name: str, enqueued_before: datetime) -> set[datetime]:
        """The slots of ``name`` handed back, their job enqueued anew before ``enqueued_before``
        and not taken since."""
        rows = self.session.execute(
            select(ScheduleSlot.slot).where(
                ScheduleSlot.name == name,
                ScheduleSlot.outcome == HANDED_BACK,
                ScheduleSlot.enqueued_at < enqueued_before,
            )
        )
        return set(rows.scalars())

    def claimed(self, name: str) -> list[Row]:
        """The slots of ``name`` a scheduler claimed, oldest first (the chaos run's check)."""
        rows = self.session.execute(
            select(*SLOT_COLUMNS)
            .where(ScheduleSlot.name == name, ScheduleSlot.outcome.is_distinct_from(MISSED))
            .where(ScheduleSlot.outcome.is_distinct_from(PAUSED))
            .order_by(ScheduleSlot.slot)
        )
        return list(rows)

    def missed_since(self, names: Iterable[str], since: datetime) -> dict[str, int]:
        """How many slots of each of ``names`` were written missed since ``since``."""
        looks = [
            select(ScheduleSlot.name, func.count().label("missed"))
            .where(
                ScheduleSlot.name == name,
                ScheduleSlot.slot >= since,
                ScheduleSlot.outcome == MISSED,
            )
            .group_by(ScheduleSlot.name)
            for name in names
        ]
        if not looks:
            return {}
        return {row.name: row.missed for row in self.session.execute(union_all(*looks))}
