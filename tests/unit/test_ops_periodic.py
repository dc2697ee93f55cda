"""The operational schedules (the runner's in ``tasks/periodic.py``, the packages' beside
their code) and the slots their runs belong to."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import coursebuilder.setup  # noqa: F401 - declares the builder's recovery
import payments.statements  # noqa: F401 - declares the monthly statements
import tasks.periodic  # noqa: F401 - declares the runner's schedules
from config import Config
from tasks.routing import routes
from tasks.schedules import HUEY_TICK_SECONDS, Every, tick_seconds

DEFAULTS = Config().as_dict()


def firings(
    name: str, days: int, start: datetime = datetime(2026, 1, 1), config=DEFAULTS
) -> list[datetime]:
    """The slots a consumer checking once a minute enqueues ``name`` for."""
    schedule = routes.periodic[name].schedule
    minutes = (start + timedelta(minutes=m) for m in range(days * 24 * 60))
    return [
        slot
        for moment in minutes
        if (slot := schedule.slot(moment, HUEY_TICK_SECONDS, config)) is not None
    ]


def test_the_stuck_sweep_runs_every_few_minutes_and_never_less_than_hourly():
    fired = firings("taskrunner.detect_stuck", days=1)
    gaps = {later - earlier for earlier, later in zip(fired, fired[1:], strict=False)}
    assert max(gaps) <= timedelta(minutes=10)
    assert len(fired) >= 24 * 6


def test_the_relay_runs_every_minute_by_default():
    fired = firings("taskrunner.relay_events", days=1)
    assert len(fired) == 24 * 60 and len(set(fired)) == len(fired)


def test_pruning_runs_once_a_day_and_statements_once_a_month():
    pruned = firings("taskrunner.prune", days=3)
    assert len(pruned) == 3
    assert len({moment.date() for moment in pruned}) == 3
    statements = firings("payments.monthly_statements", days=62)
    assert [moment.date() for moment in statements] == [
        date(2026, 1, 1),
        date(2026, 2, 1),
        date(2026, 3, 1),
    ]


def test_the_scheduler_looks_as_often_as_the_shortest_period():
    schedules = [spec.schedule for spec in routes.periodic.values()]
    assert tick_seconds(schedules, DEFAULTS) == 60
    short = DEFAULTS | {"TASK_RUNNER_RELAY_SECONDS": 2, "TASK_RUNNER_SWEEP_SECONDS": 3}
    assert tick_seconds(schedules, short) == 2


def test_every_check_within_one_period_names_the_same_slot():
    every = Every("TASK_RUNNER_SWEEP_SECONDS")
    config = {"TASK_RUNNER_SWEEP_SECONDS": 4}
    start = datetime(2026, 1, 1, 10, 0, 8)
    # Two schedulers ticking every 4 s at different phases both enqueue each slot once.
    for phase in (0.0, 1.3, 3.9):
        moments = [start + timedelta(seconds=phase + 4 * k) for k in range(5)]
        slots = [every.slot(moment, 4, config) for moment in moments]
        assert slots == [start + timedelta(seconds=4 * k) for k in range(5)]
    # Checked every second, only the first second of each period is due.
    due = [every.slot(start + timedelta(seconds=s), 1, config) for s in range(8)]
    assert due == [start, None, None, None, start + timedelta(seconds=4), None, None, None]


def test_a_cron_schedule_checked_often_is_due_once_per_matching_minute():
    schedule = routes.periodic["coursebuilder.recover"].schedule
    start = datetime(2026, 1, 1, 10, 5)
    due = [schedule.slot(start + timedelta(seconds=s), 2, DEFAULTS) for s in range(0, 120, 2)]
    assert due == [start] + [None] * 59


def test_a_built_app_schedules_the_runners_and_every_packages_periodic_tasks(ctx):
    huey = ctx.extensions["queues"].huey("default")
    names = {task.name for task in (cls() for cls in huey._registry._periodic_tasks)}
    assert names == {
        "taskrunner.relay_events",
        "taskrunner.detect_stuck",
        "taskrunner.roll_throughput",
        "taskrunner.prune",
        "payments.monthly_statements",
        "asyncrequests.prune",
        "security.prune",
        "coursebuilder.recover",
    }
