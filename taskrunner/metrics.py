"""What one scrape of ``GET /metrics`` reads, as plain values.

The ledger's figures (``LedgerMetrics``: units, runs, durations, stale units), each
queue's waiting jobs, pending units and oldest pending unit, the consumers' presence,
parked deliveries and each schedule's last slot. The endpoint (``blueprints.metrics``)
names them and writes them in Prometheus' format; nothing here knows that format.

Everything is read when the scrape comes, from the database (and the queue backend for
the waiting jobs), so every web worker on every host answers alike and none keeps a
count of its own. The reads share one snapshot (``REPEATABLE READ`` on PostgreSQL, a
read transaction on SQLite), so the figures of one scrape agree with each other. They
reuse the pages' definitions: the stale rules, the queues page's pending units per type
and their queue, the workers page's lost consumer, the parked deliveries of the events
page, and the periodic slot claims.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from datetime import datetime

from flask import current_app
from sqlalchemy import select, text

from database import is_sqlite, utcnow
from taskrunner import console, delivery
from taskrunner.dispatch import queue_of
from taskrunner.ledger import (
    DURATION_BOUNDS,
    RUN_STATUSES,
    UNIT_STATUSES,
    ActiveUnits,
    Durations,
    LedgerMetrics,
    ledger,
    stale_counts,
)
from taskrunner.registry import registry
from taskrunner.types import UnitStatus
from tasks.presence import ConsumerPresence
from tasks.routing import QUEUE_NAMES, routes

CONSUMER_STATES = ("live", "lost")
# How long a scrape waits for the queue backend's counts: with the ledger's reads, well
# inside Prometheus' scrape timeout (10 s, README), which a backend dropping packets (the
# connect timeout, 10 s) or never replying (the dead-peer timeout) would otherwise outlast.
QUEUE_COUNT_SECONDS = 3.0

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class QueueFigures:
    name: str
    # Jobs the queue backend holds for this queue (Huey's count); None: not readable.
    waiting: int | None
    pending_units: int
    running_units: int
    # Age of the oldest pending unit of a type that is not paused (0: none waits).
    oldest_pending_seconds: float
    live_consumers: int


@dataclass(frozen=True, slots=True)
class ScheduleFigures:
    name: str
    # When its newest slot that ran without raising finished (None: none yet); a missed,
    # paused or still running slot is no success.
    last_run_at: datetime | None
    # The first slot after the newest a scheduler ran without raising: in the past, it is
    # overdue (None: no slot yet). An operator's run now is no scheduler: it moves nothing.
    next_due_at: datetime | None


@dataclass(frozen=True, slots=True)
class Scrape:
    now: datetime
    runs: dict[tuple[str, str], int]
    last_finished: dict[tuple[str, str], datetime]
    units: dict[tuple[str, str], int]
    durations: list[Durations]
    duration_bounds: tuple[int, ...]
    stale_units: dict[str, int]
    queues: list[QueueFigures]
    consumers: dict[str, int]
    parked_deliveries: int
    paused_types: int
    schedules: list[ScheduleFigures]


def read(now: datetime | None = None) -> Scrape:
    """Everything a scrape exposes, as of ``now`` (default: the clock)."""
    now = now or utcnow()
    session = ledger.session
    session.rollback()  # a scrape is a transaction of its own
    if not is_sqlite(session):
        # One snapshot for every read, as SQLite's read transaction is: a unit that
        # settles during the scrape is counted once, in one status. Said for this
        # transaction only, so the pooled connection has nothing to reset after it.
        session.execute(text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
    reads = LedgerMetrics(session, now)
    try:
        groups = reads.run_groups()
        active = reads.active_units()
        types = sorted(set(registry.types()) | {group.type for group in groups})
        runs = {(type_, status): 0 for type_ in types for status in RUN_STATUSES}
        runs.update({(group.type, group.status): group.runs for group in groups})
        units = {(type_, status): 0 for type_ in types for status in UNIT_STATUSES}
        units.update(reads.units(groups, active))
        paused = ledger.actions.paused_types()
        consumers, live_per_queue = _consumers(now)
        return Scrape(
            now=now,
            runs=runs,
            last_finished={
                (group.type, group.status): group.last_finished_at
                for group in groups
                if group.last_finished_at is not None
            },
            units=units,
            durations=reads.run_durations(),
            duration_bounds=DURATION_BOUNDS,
            stale_units=stale_counts(active),
            queues=_queues(now, active, set(paused), live_per_queue),
            consumers=consumers,
            parked_deliveries=delivery.count_parked(),
            paused_types=len(paused),
            schedules=_schedules(reads),
        )
    finally:
        session.rollback()


def _queues(
    now: datetime, active: list[ActiveUnits], paused: set[str], live: dict[str, int]
) -> list[QueueFigures]:
    """Per queue: waiting jobs, pending and running units, the oldest pending one's age.

    The queues page's figures (``ledger.fleet.active_by_type`` read per type, each type on
    its queue), here from the scrape's one read of the active units.
    """
    counts: dict[str, dict[str, int]] = {name: {} for name in QUEUE_NAMES}
    oldest: dict[str, datetime] = {}
    for group in active:
        name = queue_of(group.type)
        per_status = counts.setdefault(name, {})
        per_status[group.status] = per_status.get(group.status, 0) + group.count
        since = group.oldest_queued_at
        # A paused type's units wait on purpose (as the stale rules say): no long wait.
        pending = group.status == UnitStatus.PENDING
        if pending and since is not None and group.type not in paused:
            oldest[name] = min(since, oldest.get(name, since))
    waiting = _waiting_counts(list(counts))
    return [
        QueueFigures(
            name=name,
            waiting=waiting.get(name),
            pending_units=per_status.get(UnitStatus.PENDING, 0),
            running_units=per_status.get(UnitStatus.RUNNING, 0),
            oldest_pending_seconds=(
                max(0.0, (now - oldest[name]).total_seconds()) if name in oldest else 0.0
            ),
            live_consumers=live.get(name, 0),
        )
        for name, per_status in counts.items()
    ]


def _waiting_counts(names: list[str]) -> dict[str, int]:
    """Each queue's waiting jobs, as the backend counts them; none when it does not answer
    within ``QUEUE_COUNT_SECONDS`` (a backend down or wedged: ``backend_up`` 0)."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    found: dict[str, int] = {}

    def count() -> None:
        with app.app_context():
            for name in names:
                waiting = console.waiting_count(name)
                if waiting is None:
                    # Every queue lives in the same backend: one that cannot be read means
                    # none can, and each further try would wait out its own timeout.
                    return
                found[name] = waiting

    # On a thread of its own: a backend that never replies keeps it (until the network
    # timeouts end it), never the scrape.
    counting = threading.Thread(target=count, name="metrics-queue-count", daemon=True)
    counting.start()
    counting.join(QUEUE_COUNT_SECONDS)
    if counting.is_alive():
        logger.warning("The queue backend did not answer within %s s", QUEUE_COUNT_SECONDS)
        return {}
    return found


def _consumers(now: datetime) -> tuple[dict[str, int], dict[str, int]]:
    """Consumers live and lost (the workers page's rule), and the live ones per queue."""
    lost_before = console.lost_before(now)
    states = dict.fromkeys(CONSUMER_STATES, 0)
    per_queue: dict[str, int] = {}
    rows = ledger.session.execute(select(ConsumerPresence.heartbeat_at, ConsumerPresence.queues))
    for heartbeat_at, queues in rows:
        live = heartbeat_at >= lost_before
        states["live" if live else "lost"] += 1
        if live:
            for name in queues or []:
                per_queue[str(name)] = per_queue.get(str(name), 0) + 1
    return states, per_queue


def _schedules(reads: LedgerMetrics) -> list[ScheduleFigures]:
    """Every declared schedule: when its newest slot that ran without raising ended, and
    the slot due after the newest of those a scheduler ran."""
    config = current_app.config
    names = sorted(routes.periodic)
    claimed = reads.last_success(names)
    scheduled = reads.last_success(names, scheduled=True)
    figures = []
    for name in names:
        last, ran = claimed.get(name), scheduled.get(name)
        schedule = routes.periodic[name].schedule
        figures.append(
            ScheduleFigures(
                name=name,
                last_run_at=last.finished_at if last else None,
                next_due_at=schedule.first_after(ran.slot, config) if ran else None,
            )
        )
    return figures
