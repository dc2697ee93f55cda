"""Units settled per minute: the roll-up (``unit_throughput``) and its reads.

Counting the units a busy hour settled from the unit rows themselves reads tens of
thousands of rows per page view, so the periodic ``taskrunner.roll_throughput`` rolls
each minute up once (``roll``, the only writer). The reads (``read``: the throughput
strip of the run list, and ``finished_by_type``: the queues page) take rolled minutes
from the roll-up and count the minutes after it live: a read never writes, and a
roll-up that fell behind (no consumer ran the periodic task) only makes reads slower.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from database import is_sqlite, utcnow, write_transaction
from taskrunner.ledger.records import not_deleted
from taskrunner.models import TaskRun, TaskRunUnit, UnitThroughput
from taskrunner.types import RunStatus, UnitStatus

THROUGHPUT_GRACE = timedelta(seconds=10)
THROUGHPUT_KEEP = timedelta(hours=25)
FINISHED_KEYS = ("completed_hour", "failed_hour", "completed_minute", "failed_minute")


@dataclass(frozen=True, slots=True)
class Bucket:
    start: datetime
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class Throughput:
    """Units finished per minute over the last hour and per hour over the last 24 h."""

    now: datetime
    minutes: list[Bucket]
    hours: list[Bucket]

    @property
    def last_hour(self) -> tuple[int, int]:
        return sum(b.completed for b in self.minutes), sum(b.failed for b in self.minutes)

    @property
    def last_day(self) -> tuple[int, int]:
        return sum(b.completed for b in self.hours), sum(b.failed for b in self.hours)


def _buckets(counts: dict[datetime, list[int]], last: datetime, step: timedelta, n: int):
    return [
        Bucket(start, *counts.get(start, (0, 0)))
        for start in (last - step * (n - 1 - i) for i in range(n))
    ]


class ThroughputRollup:
    """The per-minute roll-up of settled units, and what the console reads of it."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def read(self, now: datetime | None = None) -> Throughput:
        """Units completed and failed per minute (last hour) and per hour (last 24 h).

        Rolled minutes come from the roll-up, at most 1,440 summary rows; the minutes
        after the last roll are counted live from the units.
        """
        now = (now or utcnow()).replace(second=0, microsecond=0)
        end = now + timedelta(minutes=1)
        day_start = end - timedelta(hours=24)
        rolled_to = self.last_rolled_minute()
        per_minute: dict[datetime, list[int]] = defaultdict(lambda: [0, 0])
        if rolled_to is not None:
            for minute, completed, failed in self.session.execute(
                select(
                    UnitThroughput.minute,
                    func.sum(UnitThroughput.completed),
                    func.sum(UnitThroughput.failed),
                )
                .where(UnitThroughput.minute >= day_start, UnitThroughput.minute <= rolled_to)
                .group_by(UnitThroughput.minute)
            ):
                per_minute[minute] = [int(completed), int(failed)]
        live_from = max(day_start, rolled_to + timedelta(minutes=1)) if rolled_to else day_start
        for minute, _type, status, n in self.settled_in(live_from, end):
            per_minute[minute][0 if status == UnitStatus.COMPLETED else 1] += n
        by_hour: dict[datetime, list[int]] = defaultdict(lambda: [0, 0])
        for at, (done, failed) in per_minute.items():
            by_hour[at.replace(minute=0)][0] += done
            by_hour[at.replace(minute=0)][1] += failed
        return Throughput(
            now=now,
            minutes=_buckets(per_minute, now, timedelta(minutes=1), 60),
            hours=_buckets(by_hour, now.replace(minute=0), timedelta(hours=1), 24),
        )

    def roll(self, now: datetime | None = None) -> int:
        """Roll up the minutes that ended since the last roll; return how many.

        A minute is rolled once it ended ``THROUGHPUT_GRACE`` ago (a unit's finish time is
        taken just before its commit). The first roll, or one after a long stop, covers
        the last ``THROUGHPUT_KEEP`` at most. Two rollers racing insert the same rows; the
        second's are ignored. Rows older than the keep are deleted.
        """
        now = now or utcnow()
        end = (now - THROUGHPUT_GRACE).replace(second=0, microsecond=0)
        last = self.last_rolled_minute()
        start = end - THROUGHPUT_KEEP
        if last is not None:
            start = max(start, last + timedelta(minutes=1))
        if start >= end:
            return 0
        counts: dict[tuple[datetime, str], dict[str, int]] = {}
        for minute, type_, status, n in self.settled_in(start, end):
            counts.setdefault((minute, type_), {"completed": 0, "failed": 0})[status] = n
        self.session.rollback()
        rows = [
            {"minute": minute, "type": type_, **values}
            for (minute, type_), values in counts.items()
        ]
        minute = start
        while minute < end:
            rows.append({"minute": minute, "type": "", "completed": 0, "failed": 0})
            minute += timedelta(minutes=1)
        dialect_insert = sqlite_insert if is_sqlite(self.session) else pg_insert
        with write_transaction(self.session):
            for chunk in range(0, len(rows), 1000):
                self.session.execute(
                    dialect_insert(UnitThroughput)
                    .values(rows[chunk : chunk + 1000])
                    .on_conflict_do_nothing(index_elements=["minute", "type"])
                )
            self.session.execute(
                delete(UnitThroughput).where(UnitThroughput.minute < end - THROUGHPUT_KEEP)
            )
        return int((end - start).total_seconds() // 60)

    def settled_in(self, start: datetime, end: datetime) -> list[tuple[datetime, str, str, int]]:
        """(minute, type, status, units) settled in [start, end), read from the unit rows.

        Only runs that were running since ``start`` are read (the run list's status and
        finished-at indexes), then their settled units by the per-run status index.
        """
        if self.session.get_bind().dialect.name == "postgresql":
            minute = func.date_trunc("minute", TaskRunUnit.finished_at)
        else:
            minute = func.strftime("%Y-%m-%d %H:%M:00", TaskRunUnit.finished_at)
        recent_runs = select(TaskRun.id).where(
            not_deleted(TaskRun),
            or_(TaskRun.status == RunStatus.RUNNING, TaskRun.finished_at >= start),
        )
        rows = self.session.execute(
            select(minute.label("minute"), TaskRun.type, TaskRunUnit.status, func.count())
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.task_run_id.in_(recent_runs),
                TaskRunUnit.status.in_((str(UnitStatus.COMPLETED), str(UnitStatus.FAILED))),
                TaskRunUnit.finished_at >= start,
                TaskRunUnit.finished_at < end,
                not_deleted(TaskRunUnit),
            )
            .group_by(minute, TaskRun.type, TaskRunUnit.status)
        ).all()
        return [
            (m if isinstance(m, datetime) else datetime.fromisoformat(m), t, st, n)
            for m, t, st, n in rows
        ]

    def last_rolled_minute(self) -> datetime | None:
        return self.session.execute(
            select(func.max(UnitThroughput.minute)).where(UnitThroughput.type == "")
        ).scalar_one_or_none()

    def finished_by_type(self, now: datetime) -> dict[str, Any]:
        """Per type: units completed and failed in the last rolled minute and the 60 before.

        Read from the per-minute roll-up (``roll``, every minute), so
        the cost does not grow with how busy the hour was. ``as_of`` is the end of the
        last rolled minute (None: nothing rolled yet).
        """
        last = self.last_rolled_minute()
        out: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FINISHED_KEYS, 0))
        if last is None:
            return {"as_of": None, "types": {}}
        rows = self.session.execute(
            select(
                UnitThroughput.minute,
                UnitThroughput.type,
                UnitThroughput.completed,
                UnitThroughput.failed,
            ).where(
                UnitThroughput.minute > last - timedelta(hours=1),
                UnitThroughput.minute <= last,
                UnitThroughput.type != "",
            )
        ).all()
        for minute, type_, completed, failed in rows:
            counts = out[type_]
            counts["completed_hour"] += completed
            counts["failed_hour"] += failed
            if minute == last:
                counts["completed_minute"] += completed
                counts["failed_minute"] += failed
        return {"as_of": last + timedelta(minutes=1), "types": dict(out)}
