"""Units settled per minute: the roll-up (``unit_throughput``) and its reads."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import delete, func, or_, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from database import is_sqlite, utcnow, write_transaction
from taskrunner.ledger.base import LedgerBase
from taskrunner.models import TaskRun, TaskRunUnit, UnitThroughput
from taskrunner.types import RunStatus, UnitStatus

THROUGHPUT_GRACE = timedelta(seconds=10)
THROUGHPUT_KEEP = timedelta(hours=25)
FINISHED_KEYS = ("completed_hour", "failed_hour", "completed_minute", "failed_minute")


class ThroughputRollup(LedgerBase):
    """The per-minute roll-up of settled units, and what the console reads of it."""

    def roll_throughput(self, now: datetime | None = None) -> int:
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
            TaskRun.deleted_at.is_(None),
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
                TaskRunUnit.deleted_at.is_(None),
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

        Read from the per-minute roll-up (``ledger.roll_throughput``, every minute), so
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
