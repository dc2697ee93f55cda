"""Schedules read back from their declarations; slots as records; missed, late and paused
computed on read, with one event per missed episode (the clock seam, never a sleep)."""

from __future__ import annotations

import os
import re
import socket
import threading
from dataclasses import replace
from datetime import datetime, timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import DBAPIError

import database
import payments.statements  # noqa: F401 - declares the monthly statements
import taskrunner.periodic  # noqa: F401 - declares the runner's schedules
from database import utcnow
from extensions import db
from taskrunner import events, runner, schedule_actions, schedules, slot_keeper
from taskrunner.ledger import Actor, ledger
from taskrunner.types import Refused
from tasks.presence import Board, ConsumerPresence, Presence
from tasks.queues import queues
from tasks.routing import routes
from tests.conftest import BACKEND
from tests.interleave import WAIT, Hold, InThread, wait_until_blocked_on_a_lock
from tests.support import drain, huey_stop_interrupt

SWEEP = "taskrunner.detect_stuck"  # every 300 s by default: grace 600 s
T0 = datetime(2026, 3, 1, 12, 0)
PERIOD = timedelta(seconds=300)
GRACE = timedelta(seconds=600)


@pytest.fixture
def heard(ctx):
    """The sweep schedule's events the app delivered, in order (the other schedules are
    first known at the first watch too, and miss their own slots)."""
    got: list[dict] = []

    def hear(event) -> None:
        if event["payload"]["schedule"] == SWEEP:
            got.append(dict(event))

    for name in ("tasks.schedule.missed", "tasks.schedule.recovered"):
        events.subscribe(name, hear)
    return got


def ran(name: str, slot: datetime, at: datetime | None = None) -> None:
    """A scheduler's slot: claimed and run to its end."""
    assert ledger.schedules.claim(name, slot, "host-a:1", now=at or slot)
    ledger.schedules.finish(name, slot, None, None, now=at or slot)


def states(view: schedules.ScheduleView) -> list[tuple[datetime, str]]:
    return [(slot.slot_at, slot.state) for slot in view.slots]


def test_every_declared_schedule_is_read_back_with_its_rule_in_words(ctx):
    views = {view.name: view for view in schedules.schedules(now=T0)}
    assert set(views) == set(routes.periodic)
    statements = views["payments.monthly_statements"]
    assert statements.rule == "on day 1 at 02:00 UTC"
    assert statements.expression == "0 2 1 * *"
    assert statements.starts == "run payments.monthly_statements"
    assert statements.timezone == "UTC"
    assert statements.next_due_at == datetime(2026, 4, 1, 2, 0)
    relay = views["taskrunner.relay_events"]
    assert relay.rule == "every 60 s (TASK_RUNNER_RELAY_SECONDS)"
    assert relay.expression == "60s" and relay.starts == "job taskrunner.relay_events"
    assert views["taskrunner.prune"].rule == "daily at 03:17 UTC"
    assert views["coursebuilder.recover"].rule == "every 5 minutes"
    assert not any(view.paused for view in views.values())


def test_a_scheduler_down_for_three_slots_gives_three_missed_slots_and_one_event(ctx, heard):
    ran(SWEEP, T0)
    missing = [T0 + PERIOD * k for k in (1, 2, 3)]
    # The sweep (any host's) watches while the scheduler is down, again and again.
    for slot in missing:
        schedules.watch(now=slot + GRACE + timedelta(seconds=1))
        schedules.watch(now=slot + GRACE + timedelta(seconds=30))
    view = schedules.schedule(SWEEP, now=missing[-1] + GRACE + timedelta(seconds=1))
    assert [slot for slot, state in states(view) if state == "missed"] == missing[::-1]
    assert view.missed == 3 and view.missed_from == missing[0]
    assert heard == [
        {
            **heard[0],
            "name": "tasks.schedule.missed",
            "payload": {"schedule": SWEEP, "slot_at": "2026-03-01T12:05:00Z", "missed_slots": 1},
        }
    ]

    # It is back: the next slot runs, the episode ends once, and nothing more is raised.
    back = T0 + PERIOD * 4
    ran(SWEEP, back, at=back + timedelta(seconds=700))
    for k in (5, 6):
        ran(SWEEP, T0 + PERIOD * k)
        schedules.watch(now=T0 + PERIOD * k + GRACE)
    assert [event["name"] for event in heard] == [
        "tasks.schedule.missed",
        "tasks.schedule.recovered",
    ]
    assert heard[1]["payload"] == {
        "schedule": SWEEP,
        "missed_slots": 3,
        "recovered_at": "2026-03-01T12:31:40Z",
    }
    view = schedules.schedule(SWEEP, now=T0 + PERIOD * 6 + timedelta(seconds=1))
    assert view.missed_from is None
    assert states(view)[:3] == [(T0 + PERIOD * k, "ok") for k in (6, 5, 4)]


def test_schedulers_all_down_for_three_slots_then_back_leave_three_missed_and_one_event(ctx, heard):
    # Nothing ran while they were down, not even the sweep that watches.
    ran(SWEEP, T0)
    schedules.watch(now=T0 + timedelta(seconds=1))
    back = T0 + PERIOD * 4
    # Back: the sweep's own slot is claimed, its body watches, then it ends (through the
    # keeper the wiring calls).
    keeper = slot_keeper.LedgerSlotKeeper()
    assert keeper.claim(SWEEP, back, "host-a:1", back, "schedule")
    schedules.watch(now=back + timedelta(seconds=2))
    keeper.finished(SWEEP, back, None, None)
    for k in (5, 6, 7):
        ran(SWEEP, T0 + PERIOD * k)
        schedules.watch(now=T0 + PERIOD * k + timedelta(seconds=2))
    view = schedules.schedule(SWEEP, now=T0 + PERIOD * 7 + timedelta(seconds=3))
    assert [slot for slot, state in states(view) if state == "missed"] == [
        T0 + PERIOD * k for k in (3, 2, 1)
    ]
    assert [(event["name"], event["payload"]["missed_slots"]) for event in heard] == [
        ("tasks.schedule.missed", 3),
        ("tasks.schedule.recovered", 3),
    ]


def test_a_one_minute_schedule_down_for_a_day_has_every_slot_written_missed(ctx):
    relay = "taskrunner.relay_events"  # every 60 s: grace 120 s
    ran(relay, T0)
    back = T0 + timedelta(days=1)
    # More slots than one watch writes: the next turns write the rest, oldest first.
    watches = [back + timedelta(minutes=5 * k) for k in range(3)]
    for at in watches:
        schedules.watch(now=at)
    owed = int((watches[-1] - timedelta(seconds=120) - T0).total_seconds() // 60)
    assert owed > schedules.UNCLAIMED_CAP
    assert ledger.schedules.missed_since([relay], T0) == {relay: owed}
    assert ledger.schedules.states()[relay].missed_slots == owed


def test_schedulers_all_down_for_a_day_then_back_write_every_slot_missed_in_one_episode(ctx):
    relay = "taskrunner.relay_events"  # every 60 s: 1439 slots owed in a day
    got: list[tuple[str, int]] = []
    for name in ("tasks.schedule.missed", "tasks.schedule.recovered"):
        events.subscribe(name, lambda e: got.append((e["name"], e["payload"]["missed_slots"])))
    ran(relay, T0)
    back = T0 + timedelta(days=1)
    keeper = slot_keeper.LedgerSlotKeeper()
    assert keeper.claim(relay, back, "host-a:1", back, "schedule")
    keeper.finished(relay, back, None, None)
    schedules.watch(now=back + timedelta(minutes=1))
    assert ledger.schedules.missed_since([relay], T0) == {relay: 1439}
    # The episode opens with the first thousand written; its end counts them all.
    assert got == [("tasks.schedule.missed", 1000), ("tasks.schedule.recovered", 1439)]


def test_missed_slots_are_computed_on_read_when_no_scheduler_runs_at_all(ctx, heard):
    ran(SWEEP, T0)
    later = T0 + timedelta(hours=2)
    view = schedules.schedule(SWEEP, now=later)
    missed = [slot for slot, state in states(view) if state == "missed"]
    # Two hours of 5-minute slots, less the ones still inside their grace.
    assert len(missed) == 24 - 2 and view.missed == 22
    assert heard == []  # a read writes nothing and raises nothing
    assert schedules.missed_count(now=later) == 1


def test_an_operators_run_now_leaves_a_dead_schedulers_missed_slots_on_the_page_and_badge(ctx):
    ran(SWEEP, T0)
    later = T0 + timedelta(hours=2)
    before = schedules.schedule(SWEEP, now=later)
    # No scheduler runs; an operator runs the sweep by hand, its slot off the schedule's.
    by_hand = later - timedelta(seconds=30, microseconds=-250)
    keeper = slot_keeper.LedgerSlotKeeper()
    assert keeper.claim(SWEEP, by_hand, "host-a:1", by_hand, "operator:ops@example.com")
    keeper.finished(SWEEP, by_hand, None, None)
    after = schedules.schedule(SWEEP, now=later)
    assert after.missed == before.missed == 22
    assert after.unclaimed_missed == before.unclaimed_missed
    assert after.next_due_at == before.next_due_at
    assert states(after)[0] == (by_hand, "ok")
    assert [state for _slot, state in states(after)[1:23]] == ["missed"] * 22
    assert schedules.missed_count(now=later) == 1
    listed = next(view for view in schedules.schedules(now=later) if view.name == SWEEP)
    assert listed.missed == 22 and listed.last_slot.slot_at == by_hand


@pytest.mark.parametrize(
    ("name", "due"),
    [
        ("taskrunner.relay_events", datetime(2026, 3, 1, 12, 38)),  # every 60 s
        ("coursebuilder.recover", datetime(2026, 3, 1, 12, 40)),  # every 5 minutes (cron)
        ("taskrunner.prune", datetime(2026, 3, 2, 3, 17)),  # daily at 03:17
        ("payments.monthly_statements", datetime(2026, 4, 1, 2, 0)),
    ],
)
def test_the_next_due_slot_after_a_year_of_silence_is_found_without_stepping_through_it(
    ctx, monkeypatch, name, due
):
    schedule = routes.periodic[name].schedule
    now = T0 + timedelta(minutes=37, seconds=7)
    # First known a minute ago (a restored database): the read has no missed slot to
    # compute, only the next due after the slot its scheduler last ran, a year ago.
    ledger.schedules.register([name], now=now - timedelta(minutes=1))
    ran(name, schedule.first_after(now - timedelta(days=365), ctx.config))
    looked: list[datetime] = []
    first_after = type(schedule).first_after

    def counted(self, moment, config):
        looked.append(moment)
        return first_after(self, moment, config)

    monkeypatch.setattr(type(schedule), "first_after", counted)
    assert schedules.schedule(name, now=now).next_due_at == due
    assert len(looked) <= 64  # an hour of a 5-minute crontab's slots at most, not a year's


def test_a_crontab_silent_for_a_week_shows_its_newest_missed_slots_and_lights_the_badge(ctx):
    # Every 5 minutes on a crontab: a week is 2,016 slots, past the 1,000 a read looks at.
    # Before, the read took the oldest 1,000 (three and a half days): none in the last
    # 24 h, so 0 missed, no badge, and a strip of slots days old.
    name = "coursebuilder.recover"
    ledger.schedules.register([name], now=T0 - timedelta(minutes=1))
    ran(name, T0)
    now = T0 + timedelta(days=7, minutes=2)

    view = schedules.schedule(name, now=now)

    assert view.missed >= 280  # the last 24 h's slots past their grace
    newest = view.slots[0]
    assert newest.state == "missed" and now - newest.slot_at < timedelta(minutes=20)
    assert schedules.missed_count(now=now) >= 1


def test_a_new_schedule_or_a_deploy_raises_no_false_alarm(ctx, heard):
    # Never known: whatever the clock says, nothing is missed.
    assert all(view.missed == 0 for view in schedules.schedules(now=T0 + timedelta(days=40)))
    # First known now (a deploy's first watch): slots before it are no missed slots.
    schedules.watch(now=T0)
    schedules.watch(now=T0 + GRACE - timedelta(seconds=1))
    ran(SWEEP, T0 + PERIOD)
    ran(SWEEP, T0 + PERIOD * 2)
    schedules.watch(now=T0 + PERIOD * 2 + GRACE)
    view = schedules.schedule(SWEEP, now=T0 + PERIOD * 2 + GRACE)
    assert view.missed == 0 and heard == []
    # The monthly statements were last run long ago, but were first known today.
    statements = schedules.schedule("payments.monthly_statements", now=T0 + timedelta(days=1))
    assert statements.missed == 0 and statements.first_known_at == T0


def test_a_paused_schedules_slots_are_paused_never_missed(ctx, heard):
    ran(SWEEP, T0)
    ops = Actor("ops@example.com", "web")
    assert schedule_actions.pause(SWEEP, ops, now=T0 + timedelta(seconds=1)) is True
    assert schedule_actions.pause(SWEEP, ops) is False
    later = T0 + timedelta(hours=1)
    schedules.watch(now=later)
    view = schedules.schedule(SWEEP, now=later)
    assert view.paused and view.paused_by == "ops@example.com"
    assert {state for _slot, state in states(view)[:-1]} == {"paused"}
    assert view.missed == 0 and heard == []
    assert schedule_actions.resume(SWEEP, Actor("ops@example.com", "web")) is True
    assert not schedules.schedule(SWEEP, now=later).paused


def test_a_slot_claimed_after_its_grace_and_still_running_is_late(ctx):
    schedules.watch(now=T0)
    slot = T0 + PERIOD
    assert ledger.schedules.claim(SWEEP, slot, "host-b:7", now=slot + GRACE + timedelta(seconds=1))
    view = schedules.schedule(SWEEP, now=slot + GRACE + timedelta(seconds=2))
    assert states(view)[0] == (slot, "late")
    assert view.last_slot.host == "host-b:7"
    ledger.schedules.finish(SWEEP, slot, "unhandled KeyError — see logs, ref abc", None)
    failed = schedules.schedule(SWEEP, now=slot + GRACE).last_slot
    assert failed.state == "failed" and failed.reason.startswith("unhandled KeyError")


def test_a_slot_that_started_a_run_follows_the_run(inline_ctx):
    from taskrunner.ledger import ledger as the_ledger

    handle = payments.statements.start_monthly_statements("2026-02", "schedule")
    slot = datetime(2026, 3, 1, 2, 0)
    the_ledger.schedules.claim("payments.monthly_statements", slot, "host-a:1", now=slot)
    the_ledger.schedules.finish("payments.monthly_statements", slot, None, handle.uuid)
    last = schedules.schedule("payments.monthly_statements", now=slot).last_slot
    run = the_ledger.runs.find_run(handle.uuid)
    expected = schedules.RUN_STATES[run.status]
    assert last.run_uuid == handle.uuid and last.state == expected


def test_slot_rows_are_pruned_with_the_retention_like_runs(ctx):
    old, recent = T0 - timedelta(days=400), datetime.now().replace(microsecond=0)
    ran(SWEEP, old)
    ran(SWEEP, recent)
    report = runner.prune(days=30)
    assert report.slots == 1
    assert [row.slot for row in ledger.schedules.recent([SWEEP], 10)[SWEEP]] == [recent]


def test_the_prune_command_says_how_many_schedule_slots_it_deleted(ctx):
    # It deleted them and recorded them, and said nothing of them.
    ran(SWEEP, T0 - timedelta(days=400))
    ran(SWEEP, T0 - timedelta(days=400) + PERIOD)
    ran(SWEEP, datetime.now().replace(microsecond=0))

    result = ctx.test_cli_runner().invoke(args=["tasks", "prune", "--days", "30"])

    assert result.exit_code == 0, result.output
    assert result.output.rstrip().endswith("0 queue leftovers, 2 schedule slots)")


def test_a_prune_of_every_slot_leaves_no_slot_that_ran_reading_missed_nor_claimable(ctx):
    # prune --days 0 deleted every slot row: the views then counted missed slots from when
    # the schedule was first known, so every slot that had run read missed (and the watch
    # wrote them so); a running slot's copy enqueued by another scheduler claimed it again.
    now = datetime.now().replace(second=0, microsecond=0)
    first = now - timedelta(hours=2) - timedelta(minutes=now.minute % 5)
    slots = [first + PERIOD * k for k in range(24)]
    for slot in slots[:-1]:
        ran(SWEEP, slot)
    assert ledger.schedules.claim(SWEEP, slots[-1], "host-a:1", now=slots[-1])  # running
    assert schedules.schedule(SWEEP, now=now).missed == 0

    runner.prune(days=0)

    view = schedules.schedule(SWEEP, now=now)
    assert view.missed == 0 and view.unclaimed_missed == []
    assert schedules.watch(now) == 0
    assert not ledger.schedules.claim(SWEEP, slots[-1], "host-b:1", now=now)
    # Kept: the running slot, the schedule's newest; every slot that ended went.
    assert [row.slot for row in ledger.schedules.recent([SWEEP], 5)[SWEEP]] == [slots[-1]]


def test_an_unknown_schedule_is_refused(ctx):
    with pytest.raises(schedules.UnknownSchedule):
        schedules.schedule("no.such.schedule")


def periodic_task(app, name: str):
    huey = app.extensions["queues"].huey("default")
    [task_class] = [cls for cls in huey._registry._periodic_tasks if cls().name == name]
    return huey, task_class


def test_a_scheduler_skips_a_paused_schedules_slot_at_its_next_check(ctx, monkeypatch):
    name = "taskrunner.relay_events"
    relayed = []
    monkeypatch.setattr("taskrunner.delivery.relay", lambda: relayed.append(1) or 0)
    schedule_actions.pause(name, Actor("ops@example.com", "web"))
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [T0.isoformat()], "enqueued": T0.isoformat()}))
    [row] = ledger.schedules.recent([name], 5)[name]
    assert row.outcome == "paused" and relayed == []


def relay_slot_with(ctx, monkeypatch, relay) -> schedules.SlotView:
    """The relay's slot at ``T0`` as recorded after its periodic task ran ``relay``."""
    name = "taskrunner.relay_events"
    monkeypatch.setattr("taskrunner.delivery.relay", relay)
    huey, task_class = periodic_task(ctx, name)
    try:
        huey.execute(task_class(kwargs={"slots": [T0.isoformat()]}))
    except (RuntimeError, DBAPIError):
        pass
    return schedules.schedule(name, now=T0).last_slot


def test_a_slot_whose_body_raised_keeps_its_redacted_reason(ctx, monkeypatch):
    def broken() -> int:
        raise RuntimeError("password=hunter2 leaked in a message")

    last = relay_slot_with(ctx, monkeypatch, broken)
    assert last.state == "failed" and last.host
    assert last.reason.startswith("unhandled builtins.RuntimeError")
    assert "hunter2" not in last.reason


def test_a_slot_whose_body_left_a_failed_statement_is_still_recorded_failed(ctx, monkeypatch):
    # On PostgreSQL a statement that failed aborts its transaction: the slot's record went
    # on it, failed too, and the slot showed "running" for good (as after a deploy's
    # SIGTERM cut a body's COMMIT short).
    def broken() -> int:
        ledger.session.execute(text("SELECT * FROM no_such_table"))
        return 0

    last = relay_slot_with(ctx, monkeypatch, broken)
    assert last.state == "failed"
    assert last.reason.startswith("unhandled sqlalchemy.exc.")


def test_a_slot_whose_body_a_deploy_stopped_is_handed_back_and_run_again_once(ctx, monkeypatch):
    # A deploy's SIGTERM interrupts the body (Huey's own stop): the slot and the one the
    # job still owed are enqueued anew, and run once each by the next worker.
    name, due = "taskrunner.relay_events", utcnow().replace(microsecond=0)
    later = due + timedelta(seconds=5)
    relayed: list[int] = []

    def stopped() -> int:
        raise huey_stop_interrupt()

    monkeypatch.setattr("taskrunner.delivery.relay", stopped)
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [due.isoformat(), later.isoformat()]}))
    [again] = huey.pending()
    assert again.kwargs["slots"] == [due.isoformat(), later.isoformat()]
    waiting = schedules.schedule(name, now=due).last_slot
    assert waiting.state == "running" and "handed back on shutdown" in waiting.reason

    monkeypatch.setattr("taskrunner.delivery.relay", lambda: relayed.append(1) or 0)
    huey.execute(huey.dequeue())
    rows = ledger.schedules.recent([name], 5)[name]
    assert [(row.slot, row.outcome, row.reason) for row in rows] == [
        (later, "ok", None),
        (due, "ok", None),
    ]
    assert relayed == [1, 1] and huey.pending() == []


def test_a_run_started_before_a_deploy_stopped_its_slots_body_is_not_started_again(
    ctx, monkeypatch
):
    # The run is linked to its slot in the run's own transaction: a stop after that
    # commit finishes the slot with the run instead of handing it back.
    name, slot = "payments.monthly_statements", datetime(2026, 3, 1, 2, 0)
    started = []

    def stopped_after_its_run(initiator: str = "schedule") -> None:
        started.append(payments.statements.start_monthly_statements("2026-02", initiator))
        raise huey_stop_interrupt()

    monkeypatch.setitem(
        routes.periodic, name, replace(routes.periodic[name], fn=stopped_after_its_run)
    )
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [slot.isoformat()]}))
    [run] = started
    [row] = ledger.schedules.recent([name], 5)[name]
    assert (row.outcome, row.run_uuid) == ("ok", run.uuid)
    assert [task for task in huey.pending() if task.name == name] == []
    assert not ledger.schedules.claim(name, slot, "host-b:2")


def test_a_run_started_within_a_sweeps_body_does_not_keep_its_slot_from_a_hand_back(
    ctx, monkeypatch
):
    # A sweep declares no run of its own (an event subscriber it calls may start one).
    name, due = "taskrunner.relay_events", utcnow().replace(microsecond=0)

    def stopped_after_a_subscriber_started_a_run() -> int:
        runner.start("diagnostics.probe", {"units": 1}, "schedule")
        raise huey_stop_interrupt()

    monkeypatch.setattr("taskrunner.delivery.relay", stopped_after_a_subscriber_started_a_run)
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [due.isoformat()]}))
    [row] = ledger.schedules.recent([name], 5)[name]
    assert (row.outcome, row.run_uuid) == ("handed_back", None)
    assert [task.kwargs["slots"] for task in huey.pending() if task.name == name] == [
        [due.isoformat()]
    ]


@pytest.mark.parametrize(
    ("step", "committed"),
    [("paused", False), ("claim", False), ("claim", True)],
    ids=["in-the-pause-check", "in-the-claim", "after-the-claims-commit"],
)
def test_a_deploys_stop_landing_before_the_body_hands_the_slot_back_and_it_runs_once(
    ctx, monkeypatch, step, committed
):
    # SIGTERM raises in a process worker wherever it is: before the body too.
    name, due = "taskrunner.relay_events", utcnow().replace(microsecond=0)
    relayed: list[int] = []
    real_step = getattr(slot_keeper.LedgerSlotKeeper, step)

    def stopped(self, *args) -> bool:
        if committed:
            assert real_step(self, *args)
        raise huey_stop_interrupt()

    monkeypatch.setattr("taskrunner.delivery.relay", lambda: relayed.append(1) or 0)
    monkeypatch.setattr(slot_keeper.LedgerSlotKeeper, step, stopped)
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [due.isoformat()]}))
    assert relayed == []
    [again] = huey.pending()
    assert again.kwargs["slots"] == [due.isoformat()]

    monkeypatch.setattr(slot_keeper.LedgerSlotKeeper, step, real_step)
    huey.execute(huey.dequeue())
    [row] = ledger.schedules.recent([name], 5)[name]
    assert (row.slot, row.outcome) == (due, "ok")
    assert relayed == [1] and huey.pending() == []


@pytest.mark.parametrize("committed", [True, False], ids=["after-its-commit", "before-it"])
def test_a_deploys_stop_landing_in_the_record_of_a_bodys_end_records_it_once_more(
    ctx, monkeypatch, committed
):
    # The body ran: its end is recorded (not handed back, which would run it twice), and
    # the slot the job still owed after it is enqueued anew.
    name, due = "taskrunner.relay_events", utcnow().replace(microsecond=0)
    later = due + timedelta(seconds=5)
    relayed: list[int] = []
    real_finished = slot_keeper.LedgerSlotKeeper.finished
    records: list[datetime] = []

    def stopped_in_the_first_record(self, name_, slot, error, run_uuid) -> None:
        records.append(slot)
        if len(records) > 1:
            return real_finished(self, name_, slot, error, run_uuid)
        if committed:
            real_finished(self, name_, slot, error, run_uuid)
        else:  # cut short mid-statement: a connection beyond a rollback
            ledger.session.connection().connection.dbapi_connection.close()
        raise huey_stop_interrupt()

    monkeypatch.setattr("taskrunner.delivery.relay", lambda: relayed.append(1) or 0)
    monkeypatch.setattr(slot_keeper.LedgerSlotKeeper, "finished", stopped_in_the_first_record)
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [due.isoformat(), later.isoformat()]}))
    assert relayed == [1] and records == [due, due]
    [row] = ledger.schedules.recent([name], 5)[name]
    assert (row.slot, row.outcome, row.reason) == (due, "ok", None)
    [again] = huey.pending()
    assert again.kwargs["slots"] == [later.isoformat()]

    huey.execute(huey.dequeue())
    ledger.session.rollback()  # a fresh look: the job ran in an app context of its own
    rows = ledger.schedules.recent([name], 5)[name]
    assert [(row.slot, row.outcome) for row in rows] == [(later, "ok"), (due, "ok")]
    assert relayed == [1, 1] and huey.pending() == []


@pytest.mark.parametrize("ended", ["by-a-stop", "by-an-error"])
def test_a_claim_another_worker_won_then_cut_short_leaves_its_slot_alone(ctx, monkeypatch, ended):
    name, due = "taskrunner.relay_events", utcnow().replace(microsecond=0)
    assert ledger.schedules.claim(name, due, "host-b:2", now=due)  # it runs the body now
    real_claim = slot_keeper.LedgerSlotKeeper.claim

    def lost_the_claim_then_cut_short(self, *args) -> bool:
        assert not real_claim(self, *args)
        raise huey_stop_interrupt() if ended == "by-a-stop" else RuntimeError("connection lost")

    monkeypatch.setattr(slot_keeper.LedgerSlotKeeper, "claim", lost_the_claim_then_cut_short)
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [due.isoformat()]}))
    [row] = ledger.schedules.recent([name], 5)[name]
    assert (row.claimed_by, row.outcome) == ("host-b:2", None)  # still the other's, running

    monkeypatch.setattr(slot_keeper.LedgerSlotKeeper, "claim", real_claim)
    while huey.pending():
        huey.execute(huey.dequeue())
    [row] = ledger.schedules.recent([name], 5)[name]
    assert (row.claimed_by, row.outcome) == ("host-b:2", None)  # never claimed twice


def test_a_slot_handed_back_then_paused_is_paused_when_its_job_comes_again(ctx):
    keeper = slot_keeper.LedgerSlotKeeper()
    assert keeper.claim(SWEEP, T0, "host-a:1", T0, "schedule")
    assert keeper.handed_back(SWEEP, T0, "host-a:1") is True
    schedule_actions.pause(SWEEP, Actor("ops@example.com", "cli"))
    assert keeper.paused(SWEEP, T0, "host-b:2")
    [row] = ledger.schedules.recent([SWEEP], 5)[SWEEP]
    assert (row.outcome, row.reason, row.claimed_by) == ("paused", None, "host-b:2")


def test_a_slot_written_missed_is_still_run_by_its_late_job_once(ctx, heard):
    ran(SWEEP, T0)
    late = T0 + PERIOD
    schedules.watch(now=late + GRACE + timedelta(seconds=1))
    assert states(schedules.schedule(SWEEP, now=late + GRACE))[0] == (late, "missed")
    # The queue ran behind: the slot's job comes now, and runs it (once).
    at = late + GRACE + timedelta(seconds=5)
    assert ledger.schedules.claim(SWEEP, late, "host-a:1", now=at)
    assert not ledger.schedules.claim(SWEEP, late, "host-b:2", now=at)
    assert states(schedules.schedule(SWEEP, now=at))[0] == (late, "late")
    ledger.schedules.finish(SWEEP, late, None, None, now=at)
    assert states(schedules.schedule(SWEEP, now=at))[0] == (late, "ok")
    assert [event["name"] for event in heard] == [
        "tasks.schedule.missed",
        "tasks.schedule.recovered",
    ]


def test_an_operators_run_now_settles_no_scheduled_slot_as_missed(ctx, heard):
    ran(SWEEP, T0)
    schedules.watch(now=T0 + timedelta(seconds=1))
    due = T0 + PERIOD  # its job still waits in the queue
    by_hand = due + timedelta(seconds=5)
    keeper = slot_keeper.LedgerSlotKeeper()
    assert keeper.claim(SWEEP, by_hand, "host-a:1", by_hand, "operator:ops@example.com")
    keeper.finished(SWEEP, by_hand, None, None)
    schedules.watch(now=by_hand + timedelta(seconds=1))
    assert ledger.schedules.claim(SWEEP, due, "host-a:1", now=by_hand + timedelta(seconds=9))
    assert heard == []
    view = schedules.schedule(SWEEP, now=by_hand + timedelta(seconds=10))
    assert "missed" not in {state for _slot, state in states(view)}


def test_an_operators_run_now_ends_no_missed_episode_and_the_next_scheduled_slot_does(ctx, heard):
    ran(SWEEP, T0)
    missing = [T0 + PERIOD * k for k in (1, 2)]
    schedules.watch(now=missing[-1] + GRACE + timedelta(seconds=1))
    # No scheduler is back: an operator runs the sweep by hand.
    by_hand = missing[-1] + GRACE + timedelta(seconds=5, microseconds=250)
    keeper = slot_keeper.LedgerSlotKeeper()
    assert keeper.claim(SWEEP, by_hand, "host-a:1", by_hand, "operator:ops@example.com")
    keeper.finished(SWEEP, by_hand, None, None)
    assert [event["name"] for event in heard] == ["tasks.schedule.missed"]
    assert ledger.schedules.states()[SWEEP].missed_from == missing[0]

    back = T0 + PERIOD * 5  # a scheduler is back: its slot settles the gap and ends it
    assert keeper.claim(SWEEP, back, "host-a:1", back, "schedule")
    keeper.finished(SWEEP, back, None, None)
    assert [(event["name"], event["payload"]["missed_slots"]) for event in heard] == [
        ("tasks.schedule.missed", 2),
        ("tasks.schedule.recovered", 4),
    ]
    assert ledger.schedules.states()[SWEEP].missed_from is None


def test_run_now_again_is_refused_while_its_slot_waits_for_a_worker_unless_confirmed(ctx):
    ops = Actor("ops@example.com")
    first = schedule_actions.run_now(SWEEP, ops, now=T0)
    later = T0 + timedelta(seconds=30)
    named = schedule_actions.slot_text(first)
    assert named == "2026-03-01T12:00:00.000001Z"  # off the scheduled slot at 12:00:00
    with pytest.raises(Refused, match=re.escape(f"the slot {named} an earlier run now enqueued")):
        schedule_actions.run_now(SWEEP, ops, now=later)  # a second click, the job still queued
    second = schedule_actions.run_now(SWEEP, ops, confirmed=True, now=later)
    assert schedule_actions.unfinished(SWEEP, later)[0] == schedule_actions.slot_text(second)

    assert ledger.schedules.claim(SWEEP, second, "host-a:1", now=later)  # a worker took it
    assert schedule_actions.unfinished(SWEEP, later) is None
    third = schedule_actions.run_now(SWEEP, ops, now=later + timedelta(seconds=1))
    # Never taken within the schedule's grace: its job was lost, and asking again is free.
    assert schedule_actions.unfinished(SWEEP, third + GRACE) is not None
    assert schedule_actions.unfinished(SWEEP, third + GRACE + timedelta(seconds=1)) is None


def test_two_run_nows_at_once_start_one_slot_and_refuse_the_other(ctx, monkeypatch):
    """A double-clicked confirmation: the first is held after it found nothing waiting,
    right before it records its run now; the second asks meanwhile, up to the write lock."""
    ops = Actor("ops@example.com")
    engine = db.engine
    asked_for_the_lock = threading.Event()
    began = database.began_in_short_waits

    def beginning(raw) -> bool:
        if threading.current_thread().name == "second":
            asked_for_the_lock.set()
        return began(raw)

    monkeypatch.setattr(database, "began_in_short_waits", beginning)
    checked = lambda sql: "FROM operator_actions" in sql  # noqa: E731
    with Hold(engine, "first", checked, at="commit") as hold:
        first = InThread(ctx, "first", schedule_actions.run_now, SWEEP, ops, now=T0)
        hold.wait_reached()
        later = T0 + timedelta(seconds=1)
        second = InThread(ctx, "second", schedule_actions.run_now, SWEEP, ops, now=later)
        if BACKEND == "postgres":
            wait_until_blocked_on_a_lock()
        else:
            assert asked_for_the_lock.wait(WAIT)
        hold.release()
        first.join()
        second.join()

    assert first.error is None
    assert isinstance(second.error, schedule_actions.Unconfirmed)
    asked = [a for a in ledger.actions.on_schedule(SWEEP) if a.action == "schedule-run-now"]
    assert len(asked) == 1
    assert drain("default") == 1


def test_a_run_now_confirmed_beside_a_slot_that_another_now_follows_is_refused_again(ctx):
    ops = Actor("ops@example.com")
    named = schedule_actions.slot_text(schedule_actions.run_now(SWEEP, ops, now=T0))
    later = T0 + timedelta(seconds=30)
    second = schedule_actions.run_now(SWEEP, ops, confirmed=True, beside=named, now=later)
    # The same confirmation submitted again, at once: it named the first slot, and the
    # second waits now.
    with pytest.raises(Refused, match=re.escape(schedule_actions.slot_text(second))):
        schedule_actions.run_now(SWEEP, ops, confirmed=True, beside=named, now=later)
    assert schedule_actions.run_now(SWEEP, ops, confirmed=True, now=later)  # --yes


def test_each_confirmed_run_now_runs_a_slot_of_its_own_beside_the_scheduled_one(ctx):
    ops = Actor("ops@example.com")
    due = T0 + PERIOD
    # Two confirmed within one second, then one at second 0 of the scheduled slot, which
    # its scheduler enqueued too: four slots, each run.
    first = schedule_actions.run_now(SWEEP, ops, now=due - timedelta(milliseconds=700))
    second = schedule_actions.run_now(
        SWEEP, ops, confirmed=True, now=due - timedelta(milliseconds=200)
    )
    third = schedule_actions.run_now(SWEEP, ops, confirmed=True, now=due)
    queues().enqueue_slot(SWEEP, due, "schedule")
    assert drain("default") == 4
    by_hand = "operator:ops@example.com"
    rows = ledger.schedules.recent([SWEEP], 10)[SWEEP]
    assert [(row.slot, row.outcome, row.initiator) for row in rows] == [
        (third, "ok", by_hand),
        (due, "ok", "schedule"),
        (second, "ok", by_hand),
        (first, "ok", by_hand),
    ]


def test_a_slot_whose_bodys_worker_is_gone_is_ended_failed_and_a_live_one_is_left_running(ctx):
    here = socket.gethostname()
    board = Board(2)  # this process is a worker running the sweep's body now
    board.executing("executing", SimpleNamespace(name=SWEEP, id="periodic-1"))
    Presence(ctx, ["default"], "process", 1, board).beat()
    gone_host = Presence(ctx, ["default"], "process", 1, board)
    gone_host.beat()
    ledger.session.execute(  # a host killed whole: its row stops beating, stays a while
        update(ConsumerPresence)
        .where(ConsumerPresence.id == gone_host.id)
        .values(host="gone-host", heartbeat_at=utcnow() - timedelta(minutes=2))
    )
    ledger.session.commit()
    now = utcnow()
    long_ago = now - timedelta(minutes=5)
    me, dead_worker = f"{here}:{os.getpid()}", f"{here}:{2**22 + 1}"
    claims = {
        now - timedelta(minutes=10): (me, long_ago),  # running here now
        now - timedelta(minutes=9): (dead_worker, long_ago),  # killed; the consumer lives
        now - timedelta(minutes=8): (f"gone-host:{os.getpid()}", long_ago),
        now - timedelta(minutes=7): (dead_worker, now - timedelta(seconds=5)),  # not beaten yet
        now - timedelta(minutes=6): ("no-presence-host:7", long_ago),  # tells nothing
        now - timedelta(minutes=4): (dead_worker, long_ago),  # handed back, queued again
    }
    for slot, (claimer, at) in claims.items():
        assert ledger.schedules.claim(SWEEP, slot, claimer, now=at)
    handed = now - timedelta(minutes=4)
    assert ledger.schedules.hand_back(SWEEP, handed, dead_worker) is None

    assert schedules.end_lost_bodies() == 2
    assert schedules.end_lost_bodies() == 0  # ended once

    view = schedules.schedule(SWEEP, now=now)
    shown = {slot.slot_at: (slot.state, slot.reason) for slot in view.slots}
    lost = [at for at, (state, _reason) in shown.items() if state == "failed"]
    assert sorted(lost) == [now - timedelta(minutes=9), now - timedelta(minutes=8)]
    assert shown[now - timedelta(minutes=9)][1] == (
        f"worker lost: {dead_worker} stopped running it; the next slot catches up"
    )
    for still in (10, 7, 6, 4):
        assert shown[now - timedelta(minutes=still)][0] == "running"
    # A body judged lost that ends after all (its consumer beat again) keeps its own end.
    ledger.schedules.finish(SWEEP, now - timedelta(minutes=8), None, None)
    shown = dict(states(schedules.schedule(SWEEP, now=now)))
    assert shown[now - timedelta(minutes=8)] == "ok"


def test_a_body_the_sweep_judged_lost_that_is_handed_back_after_all_is_run_again_once(
    ctx, monkeypatch
):
    # The body's consumer was stopping (its row gone before the body's hand-back) or its
    # beats had stalled: the stuck sweep ended the slot failed while the body still ran.
    # The body's own hand-back is the truth: its job, enqueued anew, runs the slot.
    name, due = "taskrunner.relay_events", utcnow().replace(microsecond=0)
    relayed: list[int] = []

    def judged_lost_then_stopped() -> int:
        ended = ledger.schedules.end_lost(utcnow() + PERIOD, lambda claimer: True)
        assert [tuple(row) for row in ended] == [(name, due)]
        raise huey_stop_interrupt()

    monkeypatch.setattr("taskrunner.delivery.relay", judged_lost_then_stopped)
    huey, task_class = periodic_task(ctx, name)
    huey.execute(task_class(kwargs={"slots": [due.isoformat()]}))
    waiting = schedules.schedule(name, now=due).last_slot
    assert waiting.state == "running" and "handed back on shutdown" in waiting.reason

    monkeypatch.setattr("taskrunner.delivery.relay", lambda: relayed.append(1) or 0)
    huey.execute(huey.dequeue())
    [row] = ledger.schedules.recent([name], 5)[name]
    assert (row.slot, row.outcome, row.reason) == (due, "ok", None)
    assert relayed == [1] and huey.pending() == []


def test_a_slot_handed_back_whose_job_never_comes_again_is_missed_after_its_grace(ctx, heard):
    ran(SWEEP, T0)
    schedules.watch(now=T0 + timedelta(seconds=1))
    held = T0 + PERIOD
    assert ledger.schedules.claim(SWEEP, held, "host-a:1", now=held)
    stopped = held + timedelta(seconds=30)  # a deploy: handed back, its job enqueued anew
    assert ledger.schedules.hand_back(SWEEP, held, "host-a:1", now=stopped) is None

    # The queue lost that job: no worker takes it. Within its grace it is still owed.
    schedules.watch(now=stopped + GRACE - timedelta(seconds=1))
    assert dict(states(schedules.schedule(SWEEP, now=stopped + GRACE)))[held] == "running"
    assert heard == []

    schedules.watch(now=stopped + GRACE + timedelta(seconds=1))
    view = schedules.schedule(SWEEP, now=stopped + GRACE + timedelta(seconds=1))
    [shown] = [slot for slot in view.slots if slot.slot_at == held]
    assert shown.state == "missed"
    assert shown.reason == (
        f"handed back on shutdown at {stopped:%Y-%m-%dT%H:%M:%S}Z; queued again"
        "; not taken again within its grace"
    )
    assert [event["name"] for event in heard] == ["tasks.schedule.missed"]
    schedules.watch(now=stopped + GRACE + timedelta(seconds=2))
    assert len(heard) == 1  # once

    # The job found after all (a queue restored) still runs the slot, once.
    late = stopped + GRACE + timedelta(seconds=5)
    assert ledger.schedules.claim(SWEEP, held, "host-b:2", now=late)
    assert not ledger.schedules.claim(SWEEP, held, "host-c:3", now=late)
    ledger.schedules.finish(SWEEP, held, None, None, now=late)
    assert dict(states(schedules.schedule(SWEEP, now=late)))[held] == "ok"
    assert [event["name"] for event in heard][-1] == "tasks.schedule.recovered"


def test_the_stuck_sweep_by_hand_ends_lost_slot_bodies_and_writes_missed_slots(ctx):
    cli = ctx.test_cli_runner()
    assert cli.invoke(args=["tasks", "detect-stuck"]).output == "0 units newly stale\n"
    Presence(ctx, ["default"], "process", 1, Board(2)).beat()  # a live consumer here
    now = utcnow()
    killed = f"{socket.gethostname()}:{2**22 + 1}"  # one of its workers, killed mid-body
    assert ledger.schedules.claim(SWEEP, now - PERIOD, killed, now=now - timedelta(minutes=5))
    held = now - 3 * GRACE  # a deploy handed it back; the queue lost its job since
    assert ledger.schedules.claim(SWEEP, held, killed, now=held)
    assert ledger.schedules.hand_back(SWEEP, held, killed, now=held) is None

    swept = cli.invoke(args=["tasks", "detect-stuck"])

    assert (swept.exit_code, swept.output) == (
        0,
        "0 units newly stale, 1 schedule slot missed, 1 schedule slot ended: worker lost\n",
    )
    shown = dict(states(schedules.schedule(SWEEP)))
    assert (shown[now - PERIOD], shown[held]) == ("failed", "missed")


def test_a_minute_schedule_silent_for_two_days_counts_each_slot_it_missed_in_24_hours(ctx):
    # Every 60 s: 1,440 slots a day, past the 1,000 a read or a watch looks at. Before, the
    # page and the CLI said "1000 missed in 24 h" for them, and a watch wrote the newest
    # 1,000 missed and never the slots before: its episode read "missing since" 17 hours
    # after the schedule stopped, and the day's count stayed 1,000.
    name = "taskrunner.relay_events"
    ledger.schedules.register([name], now=T0 - timedelta(minutes=1))
    ran(name, T0)
    now = T0 + timedelta(days=2, seconds=30)
    grace = schedules.schedule(name, now=now).grace_seconds
    day = [
        T0 + timedelta(minutes=k)
        for k in range(1, 3 * 24 * 60)
        if now - timedelta(hours=24) <= T0 + timedelta(minutes=k) <= now - timedelta(seconds=grace)
    ]
    assert len(day) > 1_000

    assert schedules.schedule(name, now=now).missed == len(day)

    for turn in range(4):  # a watch writes 1,000 at most, the oldest first
        schedules.watch(now=now + timedelta(seconds=turn))
    view = schedules.schedule(name, now=now + timedelta(seconds=4))
    assert view.missed == len(day)
    assert view.missed_from == T0 + timedelta(minutes=1)
    silent = (now - timedelta(seconds=grace) - T0) // timedelta(minutes=1)
    assert ledger.schedules.states()[name].missed_slots == silent
    shown = ctx.test_cli_runner().invoke(args=["schedules", "show", name]).output
    assert f"; {len(day)} missed in 24 h" in shown


def test_a_minute_schedule_back_after_two_days_settles_every_slot_it_missed_in_one_episode(ctx):
    # Its first slot back settles the silence before it at once. Before, only its newest
    # 1,000 slots: the episode read 1,000 missed, from 17 hours after it began.
    name = "taskrunner.relay_events"
    got: list[dict] = []

    def hear(event) -> None:
        if event["payload"]["schedule"] == name:
            got.append(dict(event))

    for event_name in ("tasks.schedule.missed", "tasks.schedule.recovered"):
        events.subscribe(event_name, hear)
    ledger.schedules.register([name], now=T0 - timedelta(minutes=1))
    ran(name, T0)
    back = T0 + timedelta(days=2)
    keeper = slot_keeper.LedgerSlotKeeper()
    assert keeper.claim(name, back, "host-a:1", back, "schedule")
    keeper.finished(name, back, None, None)

    silent = 2 * 24 * 60 - 1
    assert ledger.schedules.missed_since([name], T0)[name] == silent
    assert [(e["name"], e["payload"].get("slot_at")) for e in got] == [
        ("tasks.schedule.missed", "2026-03-01T12:01:00Z"),
        ("tasks.schedule.recovered", None),
    ]
    assert got[1]["payload"]["missed_slots"] == silent


def test_a_run_now_by_an_operator_with_a_long_address_starts_its_run(ctx):
    # "operator:" and an address of 150 characters (an account holds 191) was the run's
    # initiator: longer than a run row holds, PostgreSQL refused the run at its insert.
    statements = "payments.monthly_statements"
    ops = Actor("o" * 64 + "@" + "d" * 73 + ".example.com")
    schedule_actions.run_now(statements, ops, now=T0)
    drain("default")

    [row] = ledger.schedules.recent([statements], 1)[statements]
    assert row.outcome == "ok"
    [run] = ledger.runs.runs_page(type_="payments.monthly_statements").items
    assert run.initiator == f"operator:{ops.name}"[: runner.INITIATOR_LENGTH]


def test_a_run_started_with_an_initiator_no_run_row_holds_is_refused_with_nothing_written(ctx):
    with pytest.raises(Refused, match="an initiator is at most 120 characters, not 121"):
        runner.start("diagnostics.probe", {"units": 1}, "x" * 121)
    assert ledger.runs.runs_page().items == []
