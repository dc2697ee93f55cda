"""Every periodic schedule, read back from its declaration, with its slots and their states.

A schedule is what ``@periodic`` declared (``tasks.routing.routes``: no list is kept by
hand) plus what the ledger knows of it: when it was first known, its pause, its slot rows.
A slot's state is computed when it is read:

- a slot row follows how it ended: ``ok`` (or, for a schedule that starts a run, the
  run's ``running`` / ``ok`` / ``completed_with_failures`` / ``failed``), ``failed``
  when the body raised, ``late`` when its claim came more than the grace after its time
  and it has not ended, else ``running``; ``missed`` and ``paused`` as written; a slot
  whose body's worker is gone is ended ``failed`` by the stuck sweep (``end_lost_bodies``),
  and one handed back whose job no worker took again within the grace is ``missed``;
- a slot with no row whose time passed by more than the grace is ``missed``, or
  ``paused`` when the schedule was paused at that time. Counting starts when the
  schedule was first known (its first claim, or the first watch that saw it declared):
  a new schedule or a deploy is no missed slot; from the newest slot a scheduler owed,
  not an operator's run now (no scheduler came back). This is what the page shows when no
  scheduler runs at all, the very failure it must show.

The watch (``watch``, with the stuck sweep) writes those unclaimed slots ``missed`` from
where it stopped last, so a gap stays visible once schedulers are back, and opens the
schedule's missed episode with its one event (``ledger.schedules``); the next slot that
runs closes it. No scheduler owes a slot older than the newest one it ran, so before a
scheduled slot ends, the unclaimed slots before it are settled missed at once (grace or
not): schedulers that were all down and then back leave one episode, opened and closed.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import Row

from database import utcnow
from taskrunner import console
from taskrunner.ledger import ledger
from taskrunner.ledger.schedule_reads import HANDED_BACK, by_scheduler
from taskrunner.models import ScheduleState
from taskrunner.schedule_views import ScheduleView, SlotView
from taskrunner.types import RunStatus
from tasks.routing import PeriodicSpec, routes
from tasks.schedules import Schedule, count_slots, newest_slots, slots_between

STRIP = 14
DETAIL = 100
BADGE_WINDOW = timedelta(hours=24)
logger = logging.getLogger(__name__)
# Unclaimed slots a read lists or a watch writes, at most (a year of a 5-minute schedule
# is 105,000): a read lists the newest, a watch writes the oldest and the rest at its next
# turns. The day's missed slots are counted, not listed (a 60 s schedule has 1,440).
UNCLAIMED_CAP = 1000
EPSILON = timedelta(microseconds=1)
RUN_STATES = {
    RunStatus.RUNNING: "running",
    RunStatus.COMPLETED: "ok",
    RunStatus.COMPLETED_WITH_FAILURES: "completed_with_failures",
    RunStatus.FAILED: "failed",
    RunStatus.CANCELLED: "failed",
}


class UnknownSchedule(LookupError):
    """No periodic schedule of that name is declared."""


def names() -> list[str]:
    return sorted(routes.periodic)


def known(name: str) -> PeriodicSpec:
    """The declaration of schedule ``name``; raises ``UnknownSchedule``."""
    spec = routes.periodic.get(name)
    if spec is None:
        raise UnknownSchedule(f"no schedule named {name!r}")
    return spec


def _grace(spec: PeriodicSpec, config: Mapping[str, Any]) -> timedelta:
    return timedelta(seconds=spec.grace or spec.schedule.grace(config))


def _recorded(row: Row, runs: Mapping[str, str], grace: timedelta) -> SlotView:
    if row.outcome in (None, HANDED_BACK):  # handed back: queued again, still owed
        state = "late" if row.claimed_at - row.slot > grace else "running"
    elif row.outcome == "ok" and row.run_uuid:
        state = (
            RUN_STATES.get(RunStatus(runs[row.run_uuid]), "ok") if row.run_uuid in runs else "ok"
        )
    elif row.outcome == "raised":
        state = "failed"
    else:
        state = row.outcome  # ok, missed, paused
    return SlotView(
        slot_at=row.slot,
        state=state,
        host=row.claimed_by or None,
        enqueued_at=row.enqueued_at,
        claimed_at=row.claimed_at if row.claimed_by else None,
        finished_at=row.finished_at,
        run_uuid=row.run_uuid,
        reason=row.reason,
        initiator=row.initiator,
    )


def _unclaimed(
    schedule: Schedule, after: datetime, until: datetime, config: Mapping[str, Any]
) -> list[datetime]:
    """The slots in (``after``, ``until``], the newest ``UNCLAIMED_CAP``, oldest first."""
    return newest_slots(schedule, after, until, config, UNCLAIMED_CAP)


def _next_due(schedule: Schedule, anchor: datetime, now: datetime, config: Mapping) -> Any:
    # From a stable anchor (the newest slot a scheduler owed): a crontab's next minute is
    # cached by it. Past it, jump rather than step through a long silence's slots: to now
    # for an interval, to this hour's start for a crontab (a moment its cache keeps).
    due = schedule.first_after(anchor, config)
    if due is not None and due <= now:
        hour = now.replace(minute=0, second=0, microsecond=0)
        due = schedule.first_after(max(due, now if schedule.period(config) else hour), config)
    while due is not None and due <= now:
        due = schedule.first_after(due, config)
    return due


def _view(
    spec: PeriodicSpec,
    state: ScheduleState | None,
    rows: list[Row],
    anchor: datetime | None,  # the newest slot a scheduler owed
    runs: Mapping[str, str],
    missed_rows: int,
    now: datetime,
    limit: int,
) -> ScheduleView:
    config = current_app.config
    schedule = spec.schedule
    grace = _grace(spec, config)
    recorded = [_recorded(row, runs, grace) for row in rows]
    unclaimed: list[datetime] = []
    paused_at = state.paused_at if state is not None else None
    missed_today = 0
    if state is not None:
        start = max(state.first_known_at, anchor or state.first_known_at)
        # Only run-now rows are newer than the anchor; one from before they were kept off
        # the schedule's slots may sit on one.
        ran = {row.slot for row in rows}
        unclaimed = [at for at in _unclaimed(schedule, start, now - grace, config) if at not in ran]
        until = now - grace if paused_at is None else min(now - grace, paused_at - EPSILON)
        since = max(start, now - BADGE_WINDOW - EPSILON)
        missed_today = count_slots(schedule, since, until, config, ran)
    computed = [
        SlotView(at, "paused" if paused_at is not None and at >= paused_at else "missed")
        for at in unclaimed
    ]
    missed_now = [view.slot_at for view in computed if view.state == "missed"]
    slots = sorted(computed + recorded, key=lambda view: view.slot_at, reverse=True)[:limit]
    anchor_due = anchor or now.replace(minute=0, second=0, microsecond=0)
    return ScheduleView(
        name=spec.name,
        starts=f"run {spec.starts}" if spec.starts else f"job {spec.name}",
        rule=schedule.words(config),
        expression=schedule.expression(config),
        timezone="UTC",
        grace_seconds=int(grace.total_seconds()),
        paused=paused_at is not None,
        paused_by=state.paused_by if state is not None else None,
        paused_at=paused_at,
        next_due_at=_next_due(schedule, anchor_due, now, config),
        first_known_at=state.first_known_at if state is not None else None,
        missed=missed_rows + missed_today,
        missed_from=state.missed_from if state is not None else None,
        slots=slots,
        unclaimed_missed=missed_now,
    )


def _views(
    wanted: list[str], limit: int, now: datetime | None, release: bool = True
) -> list[ScheduleView]:
    now = now or utcnow()
    try:
        states = ledger.schedules.states()
        recent = ledger.schedules.recent(wanted, limit)
        anchors = ledger.schedules.newest_by_scheduler(recent)
        missed = ledger.schedules.missed_since(wanted, now - BADGE_WINDOW)
        runs = ledger.runs.statuses(
            row.run_uuid for rows in recent.values() for row in rows if row.run_uuid
        )
        return [
            _view(
                routes.periodic[name],
                states.get(name),
                recent[name],
                anchors[name],
                runs,
                missed.get(name, 0),
                now,
                limit,
            )
            for name in wanted
        ]
    finally:
        if release:
            ledger.session.rollback()  # a read holds no transaction open


def schedules(now: datetime | None = None, limit: int = STRIP) -> list[ScheduleView]:
    """Every declared schedule with its newest ``limit`` slots."""
    return _views(names(), limit, now)


def schedule(
    name: str, now: datetime | None = None, limit: int = DETAIL, release: bool = True
) -> ScheduleView:
    """One schedule with its newest ``limit`` slots; ``UnknownSchedule`` if none is declared.
    ``release=False`` reads inside the caller's transaction."""
    known(name)
    return _views([name], limit, now, release)[0]


def missed_count(now: datetime | None = None) -> int:
    """Schedules with a missed slot in the last 24 h (the navigation's badge).

    Read inside the page's own transaction: releasing it would expire every row the page
    loaded before its navigation, and each would be read again, one query per run.
    """
    return sum(1 for view in _views(names(), 1, now, release=False) if view.missed)


def watch(now: datetime | None = None) -> int:
    """Note every declared schedule, and write the slots no scheduler claimed within their
    grace missed, from where the last watch stopped, and those handed back whose job no
    worker took within it; how many it wrote.

    Gaps before a schedule's newest slot count too: schedulers that were all down for a
    while, then back, left slots nobody ran.
    """
    now = now or utcnow()
    ledger.schedules.register(names(), now)
    try:
        states = ledger.schedules.states()
        newest = ledger.schedules.recent(names(), 1)
        found = {}
        for name in names():
            spec, state = routes.periodic[name], states[name]
            until = now - _grace(spec, current_app.config)
            # A slot handed back whose job no worker took within the grace: its job was
            # lost (a queue that lost its jobs), as a slot nobody claimed.
            never_taken = [] if state.paused_at else ledger.schedules.handed_back(name, until)
            # Nobody owes a slot older than the newest one a scheduler took: no grace
            # (an operator's run-now is no scheduler's: its slot moves nothing).
            last = newest[name][0] if newest[name] else None
            if last is not None and by_scheduler(last.initiator):
                until = max(until, min(now, last.slot - EPSILON))
            gap, reached = _gap(spec, state, until)
            found[name] = (sorted({*gap, *never_taken}), reached)
    finally:
        ledger.session.rollback()
    return sum(
        ledger.schedules.mark_missed(name, missing, until, now)
        for name, (missing, until) in found.items()
    )


def end_lost_bodies(now: datetime | None = None) -> int:
    """End as failed the slots whose body's worker is gone (killed, alone or with its
    host): claimed before the consumers' lost window and run by no live consumer now, on
    a host that reports consumers (a host with none, or long forgotten, tells nothing).
    Such a body is not run again: the next slot catches up. How many it ended."""
    now = now or utcnow()
    try:
        running, hosts = console.workers_running(now)
    finally:
        ledger.session.rollback()

    def lost(claimer: str) -> bool:
        return claimer not in running and claimer.rpartition(":")[0] in hosts

    ended = ledger.schedules.end_lost(console.lost_before(now), lost, now)
    for name, slot in ended:
        logger.warning("Periodic %s, slot %s: its worker is lost", name, slot.isoformat())
    return len(ended)


def _gap(
    spec: PeriodicSpec, state: ScheduleState, until: datetime
) -> tuple[list[datetime], datetime]:
    """The slots of ``spec`` from where the watch stopped to ``until`` that no row holds
    (a paused schedule's excepted), the oldest ``UNCLAIMED_CAP``, and how far they reach:
    a long silence is written from its first slot (its episode's start), over turns."""
    start = max(state.first_known_at, state.watched_until or state.first_known_at)
    if until <= start:
        return [], until
    found = slots_between(spec.schedule, start, until, current_app.config, UNCLAIMED_CAP)
    reached = found[-1] if len(found) == UNCLAIMED_CAP else until
    have = ledger.schedules.slots_in(spec.name, start, reached)
    missing = [
        at for at in found if at not in have and (state.paused_at is None or at < state.paused_at)
    ]
    return missing, reached


def settle_gap(name: str, slot: datetime, now: datetime | None = None) -> int:
    """Before a scheduled slot ends: its schedule's slots before it that no scheduler
    claimed are missed now, grace or not (no scheduler owes a slot older than the newest
    it ran), so schedulers that were all down and then back leave one episode, which this
    slot's end closes. A slot off the schedule's grid (run now) settles nothing."""
    spec = routes.periodic.get(name)
    if spec is None or spec.schedule.first_after(slot - EPSILON, current_app.config) != slot:
        return 0
    written, reached = 0, None
    while reached != slot - EPSILON:  # a long silence, a chunk at a time, oldest first
        try:
            state = ledger.schedules.states().get(name)
            if state is None:
                return written
            missing, reached = _gap(spec, state, slot - EPSILON)
        finally:
            ledger.session.rollback()
        more = reached != slot - EPSILON  # then the next chunk starts past this one
        written += ledger.schedules.mark_missed(name, missing, reached if more else None, now)
    return written
