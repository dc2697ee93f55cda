"""When a periodic task is due, and which schedule slot each run of it belongs to.

A consumer with periodic tasks checks the schedules every ``tick`` seconds (Huey's
scheduler: 60 s by default). A check that finds a task due enqueues it with its
**slot**, the moment it is due for: the minute of a cron schedule, the start of the
period of an ``Every`` schedule. The task claims its slot in the database before it
works (``tasks.slots``), so a slot runs once however many consumers enqueued it.

A scheduler remembers the moment it last checked (``DueSlots``) and owes each task
every slot that began since: a tick's clock reading jitters by milliseconds, so reading
the slot off each tick alone would skip a slot when two ticks straddle its start (one
at 05.999 s, the next at 08.009 s) and name one twice when they fall either side of it.
Only its first check uses the first-tick rule (``slot``).

``Every`` takes its period from a setting, so a test can run the sweeps every few
seconds; the scheduler's tick then shrinks to the shortest period.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any

from huey import crontab as huey_crontab

HUEY_TICK_SECONDS = 60
# Slots owed after a stall (a suspended host, a stopped scheduler): the newest few only,
# each sweep catches up on what came before it.
CATCH_UP_SLOTS = 2
# How far ahead a crontab's next minute is looked for: a year and a day (a 29 February).
CRON_HORIZON_MINUTES = 366 * 24 * 60 + 24 * 60
# How long past its time a slot may wait for its claim before it counts as missed: a cron
# slot's scheduler checks once a minute; an interval slot, twice its period (30 s at least).
CRON_GRACE_SECONDS = 300
EVERY_GRACE_MIN_SECONDS = 30
CRON_FIELDS = ("minute", "hour", "day", "month", "day_of_week")


def crontab(
    minute: str = "*", hour: str = "*", day: str = "*", month: str = "*", day_of_week: str = "*"
) -> Callable[[datetime], bool]:
    """Huey's crontab, remembering its fields: a schedule is shown as it was declared."""
    validate = huey_crontab(minute=minute, hour=hour, day=day, month=month, day_of_week=day_of_week)
    validate.fields = (minute, hour, day, month, day_of_week)  # type: ignore[attr-defined]
    return validate


def cron_words(fields: tuple[str, ...]) -> str:
    """A crontab's fields in words ("on day 1 at 02:00 UTC"); its expression otherwise."""
    minute, hour, day, month, dow = fields
    if minute.isdigit() and hour.isdigit() and month == "*" and dow == "*":
        at = f"at {int(hour):02d}:{int(minute):02d} UTC"
        if day == "*":
            return f"daily {at}"
        if day.isdigit():
            return f"on day {day} {at}"
    if hour == day == month == dow == "*":
        if minute.startswith("*/") and minute[2:].isdigit():
            return f"every {minute[2:]} minutes"
        if minute.isdigit():
            return f"hourly at minute {minute}"
        if minute == "*":
            return "every minute"
    return f"cron {' '.join(fields)} (UTC)"


@lru_cache(maxsize=256)
def _coarse(crontab: Callable[[datetime], bool]) -> tuple[Any, Any]:
    """Whether a day, and an hour, may hold a matching minute (Huey's fields all must
    match): from the fields it was declared with; (None, None) for a bare predicate."""
    fields = getattr(crontab, "fields", None)
    if not fields:
        return None, None
    _, hour, day, month, dow = fields
    return (
        huey_crontab(day=day, month=month, day_of_week=dow),
        huey_crontab(hour=hour, day=day, month=month, day_of_week=dow),
    )


@lru_cache(maxsize=256)
def _next_cron_minute(crontab: Callable[[datetime], bool], after: datetime) -> datetime | None:
    """The first minute after ``after`` that ``crontab`` matches (None: none within a year).

    A crontab is a predicate: a day, then an hour, that cannot match is stepped over
    whole, so a yearly schedule costs some hundreds of tries, not 525,600 (a bare
    predicate's minutes are tried one by one).
    """
    day, hour = _coarse(crontab)
    minute = after.replace(second=0, microsecond=0) + timedelta(minutes=1)
    end = minute + timedelta(minutes=CRON_HORIZON_MINUTES)
    while minute < end:
        if day is not None and not day(minute):
            minute = minute.replace(hour=0, minute=0) + timedelta(days=1)
        elif hour is not None and not hour(minute):
            minute = minute.replace(minute=0) + timedelta(hours=1)
        elif crontab(minute):
            return minute
        else:
            minute += timedelta(minutes=1)
    return None


@dataclass(frozen=True)
class Cron:
    """A Huey ``crontab``: due in the first tick of each matching minute."""

    crontab: Callable[[datetime], bool]

    def expression(self, config: Mapping[str, Any]) -> str:
        fields = getattr(self.crontab, "fields", None)
        return " ".join(fields) if fields else "crontab"

    def words(self, config: Mapping[str, Any]) -> str:
        fields = getattr(self.crontab, "fields", None)
        return cron_words(fields) if fields else "on a crontab (UTC)"

    def grace(self, config: Mapping[str, Any]) -> int:
        return CRON_GRACE_SECONDS

    def period(self, config: Mapping[str, Any]) -> int | None:
        return None

    def slot(self, moment: datetime, tick: float, config: Mapping[str, Any]) -> datetime | None:
        if not self.crontab(moment) or moment.second + moment.microsecond / 1e6 >= tick:
            return None
        return moment.replace(second=0, microsecond=0)

    def starts_between(
        self, after: datetime, moment: datetime, config: Mapping[str, Any]
    ) -> list[datetime]:
        """The matching minutes that began in (``after``, ``moment``], the newest few."""
        minute = moment.replace(second=0, microsecond=0)
        found: list[datetime] = []
        while minute > after and len(found) < CATCH_UP_SLOTS:
            if self.crontab(minute):
                found.insert(0, minute)
            minute -= timedelta(minutes=1)
        return found

    def first_after(self, moment: datetime, config: Mapping[str, Any]) -> datetime | None:
        """The first slot that begins after ``moment`` (None: none within a year)."""
        return _next_cron_minute(self.crontab, moment)


@dataclass(frozen=True)
class Every:
    """Every N seconds, N read from the setting ``setting``; slots start at multiples of N."""

    setting: str

    def expression(self, config: Mapping[str, Any]) -> str:
        return f"{self.period(config)}s"

    def words(self, config: Mapping[str, Any]) -> str:
        return f"every {self.period(config)} s ({self.setting})"

    def grace(self, config: Mapping[str, Any]) -> int:
        return max(2 * self.period(config), EVERY_GRACE_MIN_SECONDS)

    def period(self, config: Mapping[str, Any]) -> int:
        return max(1, int(config[self.setting]))

    def slot(self, moment: datetime, tick: float, config: Mapping[str, Any]) -> datetime | None:
        seconds = self.period(config)
        epoch = moment.replace(tzinfo=UTC).timestamp()
        if epoch % seconds >= tick:
            return None
        return datetime.fromtimestamp(epoch - epoch % seconds, UTC).replace(tzinfo=None)

    def starts_between(
        self, after: datetime, moment: datetime, config: Mapping[str, Any]
    ) -> list[datetime]:
        """The period starts in (``after``, ``moment``], the newest few."""
        seconds = self.period(config)
        epoch = moment.replace(tzinfo=UTC).timestamp()
        start = datetime.fromtimestamp(epoch - epoch % seconds, UTC).replace(tzinfo=None)
        found: list[datetime] = []
        while start > after and len(found) < CATCH_UP_SLOTS:
            found.insert(0, start)
            start -= timedelta(seconds=seconds)
        return found

    def first_after(self, moment: datetime, config: Mapping[str, Any]) -> datetime:
        """The first slot that begins after ``moment``."""
        seconds = self.period(config)
        epoch = moment.replace(tzinfo=UTC).timestamp()
        start = epoch - epoch % seconds + seconds
        return datetime.fromtimestamp(start, UTC).replace(tzinfo=None)


Schedule = Cron | Every


def slots_between(
    schedule: Schedule, after: datetime, until: datetime, config: Mapping[str, Any], limit: int
) -> list[datetime]:
    """The slots that begin in (``after``, ``until``], oldest first, the first ``limit``."""
    found: list[datetime] = []
    moment = after
    while len(found) < limit:
        following = schedule.first_after(moment, config)
        if following is None or following > until:
            break
        found.append(following)
        moment = following
    return found


def count_slots(
    schedule: Schedule,
    after: datetime,
    until: datetime,
    config: Mapping[str, Any],
    taken: set[datetime],
) -> int:
    """How many slots begin in (``after``, ``until``], a day at most, less those ``taken``:
    an interval's are counted, not listed (a 1 s schedule has 86,400 a day)."""
    if until <= after:
        return 0
    period = schedule.period(config)
    if not period:  # a crontab's slots are a minute apart at least
        return len(set(slots_between(schedule, after, until, config, 24 * 60 + 1)) - taken)
    total = int(_epoch(until) // period) - int(_epoch(after) // period)
    return total - sum(1 for at in taken if after < at <= until and _epoch(at) % period == 0)


def _epoch(moment: datetime) -> float:
    return moment.replace(tzinfo=UTC).timestamp()


def newest_slots(
    schedule: Schedule, after: datetime, until: datetime, config: Mapping[str, Any], limit: int
) -> list[datetime]:
    """The slots that begin in (``after``, ``until``], oldest first, the newest ``limit``."""
    period = schedule.period(config)
    if period:  # jump ahead: an interval's slots are counted, not looked for one by one
        after = max(after, until - timedelta(seconds=period * limit))
    found = slots_between(schedule, after, until, config, limit + 1)
    # A crontab's slots are found forwards only: past the limit, start again as far back
    # as the first ones took (on an hour, which its cache keeps), widening until the limit
    # is met, so a long silence shows its newest slots (the last day's), not its oldest.
    span = found[-1] - found[0] if found else timedelta(0)
    while len(found) > limit:
        start = max(after, (until - span).replace(minute=0, second=0, microsecond=0))
        found = slots_between(schedule, start, until, config, 10 * limit)
        if len(found) >= limit or start == after:
            return found[-limit:]
        span *= 2
    return found


class DueSlots:
    """What one scheduler owes each periodic task at each of its checks.

    Every slot that began since its previous check, once; the first check of a task
    follows the first-tick rule, so a consumer started mid-period waits for the next.
    The claim in the database (``tasks.slots``) still decides who runs a slot: other
    schedulers owe it too.
    """

    def __init__(self, tick: float, config: Mapping[str, Any]) -> None:
        self.tick = tick
        self.config = config
        self._checked: dict[str, datetime] = {}

    def due(self, name: str, schedule: Schedule, moment: datetime) -> list[datetime]:
        last = self._checked.get(name)
        self._checked[name] = moment
        if last is None or moment <= last:  # the first check, or a clock set back
            first = schedule.slot(moment, self.tick, self.config)
            return [first] if first is not None else []
        return schedule.starts_between(last, moment, self.config)


def tick_seconds(schedules: Iterable[Schedule], config: Mapping[str, Any]) -> int:
    """How often a consumer checks the schedules: Huey's minute, or the shortest period."""
    periods = [p for p in (schedule.period(config) for schedule in schedules) if p]
    return min([HUEY_TICK_SECONDS, *periods])
