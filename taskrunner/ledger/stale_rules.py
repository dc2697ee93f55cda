"""The stale rules (docs/operations.md), defined once: the sweep, the pages and the API use them.

A unit is stale, with a reason an operator can read, when it is

- running with a heartbeat older than three intervals: ``worker lost``;
- running longer than its type's ``stuck_after_minutes``: ``running too long``;
- pending long after its dispatch (its type not paused): ``never started``.

The same rule judges any table of tracked work (``Tracked``: where it keeps its status
and times): the course builder's steps are lost by it too (through the contract).

``stale_cutoffs`` turns the thresholds into moments before ``now`` for one type;
``cutoffs_by_type`` does the same as SQL that picks each unit's own type from a
type column the caller joined (``task_runs.type``). Either feeds ``stale_reason``
(the reason, or NULL) and ``stale_filter`` (the same rule as a predicate). Nothing
here reads the type through a correlated sub-select per unit row: the type is known
up front or joined, so the planner can use the per-run status index and the
partial index of active units.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import and_, case, literal, or_, select
from sqlalchemy.orm import Session

from taskrunner.ledger.records import not_deleted
from taskrunner.models import TaskRun, TaskRunUnit, TaskTypePause
from taskrunner.registry import registry
from taskrunner.types import RunStatus, UnitStatus

WORKER_LOST = "worker lost"
RUNNING_TOO_LONG = "running too long"
NEVER_STARTED = "never started"
# How many heartbeat intervals a running unit may miss before its worker counts as lost.
LOST_AFTER_BEATS = 3


@dataclass(frozen=True, slots=True)
class StaleCutoffs:
    """Moments before which a unit is stale: datetimes, or SQL choosing them per type."""

    lost: Any
    too_long: Any
    never_started: Any
    # The latest of the per-type ``never_started`` moments, when those are SQL: a bound
    # the partial index of active units serves, so a count reads only the units queued
    # before it, never every pending unit of a million-unit run.
    never_started_bound: datetime | None = None


@dataclass(frozen=True, slots=True)
class Tracked:
    """Where a table of tracked work keeps what the stale rule reads: a status that is
    ``running`` or ``waiting`` (not started yet), and when it started, was queued and (if
    it keeps one) last beat."""

    status: Any
    started_at: Any
    queued_at: Any
    heartbeat_at: Any = None
    running: str = str(UnitStatus.RUNNING)
    waiting: str = str(UnitStatus.PENDING)


UNITS = Tracked(
    TaskRunUnit.status, TaskRunUnit.started_at, TaskRunUnit.queued_at, TaskRunUnit.heartbeat_at
)


def lost_cutoff(now: datetime) -> datetime:
    """Heartbeats older than this are a lost worker's (also: a run's close is overdue)."""
    seconds = LOST_AFTER_BEATS * current_app.config["TASK_RUNNER_HEARTBEAT_SECONDS"]
    return now - timedelta(seconds=seconds)


def paused_type_names(session: Session) -> set[str]:
    return set(session.execute(select(TaskTypePause.type)).scalars())


def stale_cutoffs(type_: str, now: datetime, paused: Collection[str]) -> StaleCutoffs:
    """The one place stale thresholds are computed, for one task type ("": the defaults)."""
    config = current_app.config
    default_minutes = config["TASK_RUNNER_STUCK_AFTER_MINUTES"]
    minutes = default_minutes
    throttled = False
    definition = registry.find(type_)
    if definition is not None:
        options = definition.options()
        minutes = options.stuck_after_minutes or default_minutes
        throttled = bool(options.rate_per_minute)
    if throttled:
        # A throttled fleet legitimately waits up to its drain horizon.
        never_after = timedelta(
            minutes=max(minutes, config["TASK_RUNNER_RETRY_HORIZON_HOURS"] * 60)
        )
    elif config.get("TASK_RUNNER_NEVER_STARTED_SECONDS"):
        # A deployment may flag lost queued jobs sooner than running ones.
        never_after = timedelta(seconds=config["TASK_RUNNER_NEVER_STARTED_SECONDS"])
    else:
        never_after = timedelta(minutes=minutes)
    if type_ and type_ in paused:
        # A paused type's units wait on purpose: not "never started" while it lasts.
        never_started = datetime.min
    else:
        never_started = now - never_after
    return StaleCutoffs(
        lost=lost_cutoff(now),
        too_long=now - timedelta(minutes=minutes),
        never_started=never_started,
    )


def cutoffs_by_type(type_column: Any, now: datetime, paused: Collection[str]) -> StaleCutoffs:
    """Each unit's own type's cutoffs, as SQL over ``type_column`` (the joined run type).

    Registered types and paused ones get their own; any other type the defaults.
    """
    types = set(registry.types()) | set(paused)
    cuts = {type_: stale_cutoffs(type_, now, paused) for type_ in sorted(types)}
    default = stale_cutoffs("", now, paused)

    def per_type(attr: str) -> Any:
        whens = [(type_column == t, getattr(c, attr)) for t, c in cuts.items()]
        return case(*whens, else_=getattr(default, attr)) if whens else getattr(default, attr)

    bound = max(c.never_started for c in [default, *cuts.values()])
    # The heartbeat rule is the same for every type.
    return StaleCutoffs(default.lost, per_type("too_long"), per_type("never_started"), bound)


def joined_cutoffs(session: Session, now: datetime) -> StaleCutoffs:
    """``cutoffs_by_type`` over the joined ``task_runs.type``, paused types read now."""
    return cutoffs_by_type(TaskRun.type, now, paused_type_names(session))


def stale_in_running_runs(cut: StaleCutoffs) -> tuple[Any, ...]:
    """Conditions for the stale units of running, undeleted runs (``task_runs`` joined):
    what the badges, the stale page and the per-run counts show."""
    return (
        TaskRun.status == RunStatus.RUNNING,
        not_deleted(TaskRun, TaskRunUnit),
        stale_filter(cut),
    )


def _rules(cut: StaleCutoffs, work: Tracked) -> list[tuple[str, Any]]:
    """(reason, condition) in the order they are tried: the first that holds names it."""
    running = work.status == work.running
    rules = [(RUNNING_TOO_LONG, and_(running, work.started_at < cut.too_long))]
    if work.heartbeat_at is not None:
        rules.insert(0, (WORKER_LOST, and_(running, work.heartbeat_at < cut.lost)))
    waiting = and_(work.status == work.waiting, work.queued_at < cut.never_started)
    if cut.never_started_bound is not None:
        waiting = and_(waiting, work.queued_at < cut.never_started_bound)
    return [*rules, (NEVER_STARTED, waiting)]


def stale_reason(cut: StaleCutoffs, work: Tracked = UNITS) -> Any:
    """SQL for a unit's stale reason, or NULL when it is not stale."""
    rules = _rules(cut, work)
    return case(*[(condition, literal(reason)) for reason, condition in rules], else_=None)


def stale_filter(cut: StaleCutoffs, work: Tracked = UNITS) -> Any:
    """SQL true exactly when ``stale_reason(cut)`` is not NULL, in a form indexes serve.

    The explicit status clause lets the planner take the per-run status index or the
    partial index of active units rather than test every unit row.
    """
    return and_(
        work.status.in_((work.waiting, work.running)),
        or_(*[condition for _, condition in _rules(cut, work)]),
    )


def lost_before(now: datetime, running_minutes: float, waiting_minutes: float) -> StaleCutoffs:
    """Cutoffs of work that keeps no heartbeat: running longer than ``running_minutes``,
    or waiting to start longer than ``waiting_minutes``."""
    return StaleCutoffs(
        lost=None,
        too_long=now - timedelta(minutes=running_minutes),
        never_started=now - timedelta(minutes=waiting_minutes),
    )
