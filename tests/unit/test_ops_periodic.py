"""The operational schedules of ``tasks/periodic.py``."""

from __future__ import annotations

from datetime import date, datetime, timedelta

import tasks.periodic  # noqa: F401 - declares the schedules
from tasks.routing import routes


def firings(name: str, days: int, start: datetime = datetime(2026, 1, 1)) -> list[datetime]:
    schedule = routes.periodic[name].schedule
    minutes = (start + timedelta(minutes=m) for m in range(days * 24 * 60))
    return [moment for moment in minutes if schedule(moment)]


def test_the_stuck_sweep_runs_every_few_minutes_and_never_less_than_hourly():
    fired = firings("taskrunner.detect_stuck", days=1)
    gaps = {later - earlier for earlier, later in zip(fired, fired[1:], strict=False)}
    assert max(gaps) <= timedelta(minutes=10)
    assert len(fired) >= 24 * 6


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
