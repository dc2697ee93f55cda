"""The operational schedules (the runner's in ``taskrunner/periodic.py``, the packages' beside
their code) and the slots their runs belong to."""

from __future__ import annotations

import ast
import re
from datetime import date, datetime, timedelta
from pathlib import Path

from huey import crontab

import coursebuilder.setup  # noqa: F401 - declares the builder's recovery
import payments.statements  # noqa: F401 - declares the monthly statements
import taskrunner.periodic  # noqa: F401 - declares the runner's schedules
from config import Config
from tasks.routing import routes
from tasks.schedules import (
    CATCH_UP_SLOTS,
    CRON_HORIZON_MINUTES,
    HUEY_TICK_SECONDS,
    Cron,
    DueSlots,
    Every,
    tick_seconds,
)
from tasks.schedules import crontab as tasks_crontab
from tests.support import ROOT

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


def test_the_slot_after_each_slot_is_the_next_one_the_scheduler_fires():
    """What the metrics call a schedule's next due slot (after its newest run)."""
    for name, days in (
        ("taskrunner.detect_stuck", 1),
        ("taskrunner.prune", 3),
        ("payments.monthly_statements", 62),
    ):
        schedule = routes.periodic[name].schedule
        fired = firings(name, days=days)
        after = [schedule.first_after(slot, DEFAULTS) for slot in fired]
        assert after[:-1] == fired[1:], name
        # Between two slots, too: the next one is the one still to come.
        assert schedule.first_after(fired[0] + timedelta(seconds=1), DEFAULTS) == fired[1]


def test_a_crontab_that_never_matches_has_no_next_slot():
    never = Cron(crontab(month="2", day="30"))
    assert never.first_after(datetime(2026, 1, 1), DEFAULTS) is None


def test_a_yearly_crontab_finds_its_next_slot_without_trying_each_minute_of_the_year():
    yearly, tried = tasks_crontab(minute="0", hour="0", day="1", month="1"), []

    def counted(moment: datetime) -> bool:
        tried.append(moment)
        return yearly(moment)

    counted.fields = yearly.fields
    assert Cron(counted).first_after(datetime(2026, 1, 1, 0, 0, 30), DEFAULTS) == datetime(
        2027, 1, 1
    )
    assert len(tried) < 100  # a minute at a time, it tried 525,600
    leap = Cron(tasks_crontab(minute="30", hour="6", day="29", month="2"))
    assert leap.first_after(datetime(2027, 3, 1), DEFAULTS) == datetime(2028, 2, 29, 6, 30)


def test_a_crontabs_next_slot_across_midnight_and_month_ends_is_the_next_matching_minute():
    def brute(rule, after: datetime) -> datetime | None:
        minute = after.replace(second=0, microsecond=0)
        for _ in range(CRON_HORIZON_MINUTES):
            minute += timedelta(minutes=1)
            if rule(minute):
                return minute
        return None

    rules = [
        {},
        {"minute": "*/15"},
        {"minute": "59", "hour": "23"},
        {"minute": "0", "hour": "0", "day": "31"},
        {"minute": "5", "hour": "*/6", "day_of_week": "1"},
        {"minute": "17", "hour": "3", "day": "1", "month": "3"},
    ]
    starts = [
        datetime(2026, 1, 31, 23, 59, 59),
        datetime(2026, 2, 28, 23, 58),
        datetime(2026, 4, 30, 12, 0),
        datetime(2026, 12, 31, 23, 59, 30),
    ]
    for fields in rules:
        rule = tasks_crontab(**fields)
        for start in starts:
            assert Cron(rule).first_after(start, DEFAULTS) == brute(rule, start), (fields, start)


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


def owed_at(schedule, ticks: list[datetime], tick: float, config) -> list[datetime]:
    """Every slot one scheduler checking at ``ticks`` enqueues, in order."""
    owed = DueSlots(tick, config)
    return [slot for moment in ticks for slot in owed.due("probe", schedule, moment)]


def test_a_scheduler_whose_checks_jitter_across_slot_starts_owes_each_slot_once():
    every = Every("TASK_RUNNER_SWEEP_SECONDS")
    config = {"TASK_RUNNER_SWEEP_SECONDS": 2}
    start = datetime(2026, 1, 1, 10, 0, 4)
    # A tick every 2 s whose clock reading lands a few ms either side of a slot start:
    # 05.999 then 08.009 straddle 06, 12.004 then 13.999 fall either side of 14.
    offsets = [0.001, 1.999, 4.009, 5.999, 8.004, 9.999, 11.999, 14.006]
    ticks = [start + timedelta(seconds=s) for s in offsets]
    assert owed_at(every, ticks, 2, config) == [start + timedelta(seconds=2 * k) for k in range(8)]


def test_a_cron_slot_between_two_late_minute_checks_is_still_owed():
    schedule = routes.periodic["coursebuilder.recover"].schedule
    start = datetime(2026, 1, 1, 10, 0)
    # Checked once a minute at 59.999 s, then 61.01 s later: 10:05 has no check of its own.
    ticks = [start + timedelta(minutes=m, seconds=59.999) for m in range(5)]
    ticks.append(start + timedelta(minutes=6, seconds=0.009))
    assert owed_at(schedule, ticks, 60, DEFAULTS) == [start, start + timedelta(minutes=5)]


def test_after_a_stall_a_scheduler_owes_only_the_newest_slots():
    every = Every("TASK_RUNNER_SWEEP_SECONDS")
    config = {"TASK_RUNNER_SWEEP_SECONDS": 4}
    start = datetime(2026, 1, 1, 10, 0, 0)
    owed = DueSlots(4, config)
    assert owed.due("probe", every, start) == [start]
    later = start + timedelta(hours=1, seconds=1)
    assert owed.due("probe", every, later) == [
        later - timedelta(seconds=1 + 4 * k) for k in reversed(range(CATCH_UP_SLOTS))
    ]
    # Its first check of a task follows the first-tick rule: checking every second, 3 s
    # into a period owes nothing yet.
    assert DueSlots(1, config).due("probe", every, start + timedelta(seconds=3)) == []


def test_a_job_owed_two_slots_runs_each_once_and_skips_a_taken_one(ctx, caplog):
    from taskrunner.ledger import ledger

    name = "taskrunner.relay_events"
    first, second = datetime(2026, 1, 1, 10, 0), datetime(2026, 1, 1, 10, 1)
    assert ledger.schedules.claim(name, first, "elsewhere:1")  # another scheduler's copy
    huey = ctx.extensions["queues"].huey("default")
    [periodic] = [cls for cls in huey._registry._periodic_tasks if cls().name == name]
    with caplog.at_level("INFO", logger="tasks.queues"):
        huey.execute(periodic(kwargs={"slots": [first.isoformat(), second.isoformat()]}))
    claimed = reversed(ledger.schedules.recent([name], 10)[name])
    assert [row.slot for row in claimed] == [first, second]
    ran = [r.getMessage() for r in caplog.records if r.getMessage().endswith(": ran")]
    assert ran == [f"Periodic {name}, slot {second.isoformat()}: ran"]


def declared_periodic_tasks(root: Path = ROOT) -> set[str]:
    """Every ``@periodic("name", …)`` of the house, read from its source (tests aside)."""
    names = set()
    for path in root.rglob("*.py"):
        if path.relative_to(root).parts[0] in {"tests", "migrations", ".venv"}:
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            for decorator in getattr(node, "decorator_list", []):
                func = getattr(decorator, "func", None)
                named = getattr(func, "id", None) or getattr(func, "attr", None)
                if named == "periodic" and decorator.args:
                    names.add(decorator.args[0].value)
    return names


def test_the_declarations_are_read_from_any_package(tmp_path):
    (tmp_path / "invoices").mkdir()
    (tmp_path / "invoices" / "sweep.py").write_text(
        "from taskrunner.contract import Every, periodic\n"
        "@periodic('invoices.sweep', Every('INVOICES_SECONDS'))\n"
        "def sweep():\n    pass\n"
    )
    assert declared_periodic_tasks(tmp_path) == {"invoices.sweep"}


def test_a_built_app_schedules_the_runners_and_every_packages_periodic_tasks(ctx):
    """Every schedule declared anywhere in the tree, whoever added it, and no other."""
    huey = ctx.extensions["queues"].huey("default")
    names = {task.name for task in (cls() for cls in huey._registry._periodic_tasks)}
    assert names == declared_periodic_tasks()
    assert "taskrunner.detect_stuck" in names


def test_the_operations_guide_lists_every_declared_schedule():
    """Its table of periodic tasks is what an operator reads to know what runs by itself."""
    guide = (ROOT / "docs" / "operations.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_.]+)` \|", guide, flags=re.MULTILINE))
    assert declared_periodic_tasks() <= listed, declared_periodic_tasks() - listed
