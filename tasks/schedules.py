"""When a periodic task is due, and which schedule slot each run of it belongs to.

A consumer with periodic tasks checks the schedules every ``tick`` seconds (Huey's
scheduler: 60 s by default). A check that finds a task due enqueues it with its
**slot**, the moment it is due for: the minute of a cron schedule, the start of the
period of an ``Every`` schedule. The task claims its slot in the database before it
works (``tasks.slots``), so a slot runs once however many consumers enqueued it.

``Every`` takes its period from a setting, so a test can run the sweeps every few
seconds; the scheduler's tick then shrinks to the shortest period.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

HUEY_TICK_SECONDS = 60


@dataclass(frozen=True)
class Cron:
    """A Huey ``crontab``: due in the first tick of each matching minute."""

    crontab: Callable[[datetime], bool]

    def period(self, config: Mapping[str, Any]) -> int | None:
        return None

    def slot(self, moment: datetime, tick: float, config: Mapping[str, Any]) -> datetime | None:
        if not self.crontab(moment) or moment.second + moment.microsecond / 1e6 >= tick:
            return None
        return moment.replace(second=0, microsecond=0)


@dataclass(frozen=True)
class Every:
    """Every N seconds, N read from the setting ``setting``; slots start at multiples of N."""

    setting: str

    def period(self, config: Mapping[str, Any]) -> int:
        return max(1, int(config[self.setting]))

    def slot(self, moment: datetime, tick: float, config: Mapping[str, Any]) -> datetime | None:
        seconds = self.period(config)
        epoch = moment.replace(tzinfo=UTC).timestamp()
        if epoch % seconds >= tick:
            return None
        return datetime.fromtimestamp(epoch - epoch % seconds, UTC).replace(tzinfo=None)


Schedule = Cron | Every


def tick_seconds(schedules: Iterable[Schedule], config: Mapping[str, Any]) -> int:
    """How often a consumer checks the schedules: Huey's minute, or the shortest period."""
    periods = [p for p in (schedule.period(config) for schedule in schedules) if p]
    return min([HUEY_TICK_SECONDS, *periods])
