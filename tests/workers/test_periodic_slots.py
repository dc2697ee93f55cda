"""Periodic tasks run once per schedule slot, even with two consumers scheduling them."""

from __future__ import annotations

import os
import signal
import threading
from datetime import datetime, timedelta

import pytest

from database import utcnow
from diagnostics.effects import effect_summary
from extensions import db
from taskrunner import schedule_actions, schedules
from taskrunner.ledger import Actor, ledger
from tests.support import Consumers, wait_for

PROBE = "tests.periodic_probe"
SHORT_PERIODS = {"TASK_RUNNER_RELAY_SECONDS": 1, "TASK_RUNNER_SWEEP_SECONDS": 1}


def claims(name: str) -> list:
    """The claimed (run) slots of ``name``, oldest first."""
    rows = ledger.schedules.claimed(name)
    db.session.rollback()
    return rows


def slot_rows(name: str) -> list:
    """Every slot row of ``name``, newest first (paused ones too)."""
    rows = ledger.schedules.recent([name], 10_000)[name]
    db.session.rollback()
    return rows


def claim(name: str, slot: datetime) -> bool:
    return ledger.schedules.claim(name, slot, "test:1")


def a_held_body(consumers: Consumers, worker_type: str | None = None, **env: str) -> tuple:
    """A consumer with periodic tasks on, one worker, whose probe bodies hold; and the
    slot row of the body it holds (in the app's context)."""
    first = consumers.start(
        "default", 1, worker_type, periodic=True, PERIODIC_PROBE_HOLD="120", **env
    )
    wait_for(
        lambda: any(row.finished_at is None for row in claims(PROBE)),
        timeout=60,
        message="a probe's body holding",
    )
    [held] = [row for row in claims(PROBE) if row.finished_at is None]
    return first, held


def test_of_many_concurrent_claims_of_one_slot_exactly_one_wins(app):
    slot = datetime(2026, 1, 1, 10, 5)
    barrier = threading.Barrier(6)
    results: list[bool] = []

    def contend() -> None:
        with app.app_context():
            barrier.wait()
            results.append(claim("taskrunner.detect_stuck", slot))
            db.session.remove()

    threads = [threading.Thread(target=contend) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert sorted(results) == [False] * 5 + [True]
    with app.app_context():
        [row] = claims("taskrunner.detect_stuck")
        assert row.slot == slot
        # The next slot is a new claim.
        assert claim("taskrunner.detect_stuck", datetime(2026, 1, 1, 10, 10)) is True


@pytest.mark.workers
def test_two_consumers_with_periodic_tasks_run_each_slot_once(make_app, tmp_path):
    app = make_app(**SHORT_PERIODS)
    consumers = Consumers(app, tmp_path)
    extra = {"TASKLEDGER_EXTRA_MODULES": "tests.periodic_probe"}
    first = consumers.start("default", workers=2, periodic=True, **extra)
    second = consumers.start("default", workers=2, periodic=True, **extra)

    try:
        with app.app_context():
            wait_for(lambda: len(claims(PROBE)) >= 6, timeout=60, message="six slots")
    finally:
        consumers.stop_all()

    with app.app_context():
        claimed = claims(PROBE)
        runs = effect_summary("periodic-probe")["rows"]
        sweeps = claims("taskrunner.detect_stuck")
    logs = consumers.logs()
    # Both schedulers enqueued the same slots: the second copy found its slot taken.
    assert f"Periodic {PROBE}, slot" in logs and "skipped (claimed by" in logs
    # Every run of the probe is a claimed slot; no slot ran twice.
    assert runs == len(claimed)
    assert len({row.slot for row in claimed}) == len(claimed)
    assert all(row.slot.microsecond == 0 for row in claimed)
    assert sweeps, "the stuck sweep ran under the same rule"
    assert {first.returncode, second.returncode} == {0}


@pytest.mark.workers
def test_a_slot_whose_body_a_deploy_stops_runs_once_on_the_next_consumer(make_app, tmp_path):
    app = make_app(**SHORT_PERIODS)
    consumers = Consumers(app, tmp_path)
    extra = {"TASKLEDGER_EXTRA_MODULES": "tests.periodic_probe"}
    try:
        with app.app_context():
            first, held_row = a_held_body(consumers, **extra)
            held = held_row.slot
            first.send_signal(signal.SIGTERM)  # a deploy stopping the consumer
            first.wait(timeout=30)
            [stopped] = [row for row in claims(PROBE) if row.slot == held]
            consumers.start("default", workers=2, **extra)  # no scheduler of its own
            wait_for(
                lambda: [row.outcome for row in claims(PROBE) if row.slot == held] == ["ok"],
                timeout=60,
                message="the held slot run again",
            )
            claimed = claims(PROBE)
            runs = effect_summary("periodic-probe")["rows"]
    finally:
        consumers.stop_all()

    assert first.returncode == 0
    assert (stopped.outcome, stopped.finished_at) == ("handed_back", None)
    assert f"Periodic {PROBE}, slot {held.isoformat()}: handed back on shutdown" in (
        consumers.log_of(first)
    )
    [again] = [row for row in claimed if row.slot == held]
    assert again.claimed_by != stopped.claimed_by  # the next consumer's worker ran it
    # Nothing was lost to the stop: every slot the first scheduler claimed ended, once.
    assert all(row.outcome == "ok" for row in claimed if row.finished_at is not None)
    assert runs == sum(row.outcome == "ok" for row in claimed)


@pytest.mark.workers
def test_a_slot_whose_bodys_worker_is_killed_is_ended_failed_and_not_run_again(make_app, tmp_path):
    beats = {"CONSUMER_HEARTBEAT_SECONDS": "1"}
    app = make_app(**SHORT_PERIODS, **beats)
    consumers = Consumers(app, tmp_path)
    extra = {"TASKLEDGER_EXTRA_MODULES": "tests.periodic_probe", **beats}
    try:
        with app.app_context():
            first, held = a_held_body(consumers, "process", **extra)
            worker = int(held.claimed_by.rpartition(":")[2])
            assert worker != first.pid
            os.kill(worker, signal.SIGKILL)  # the body's worker dies; its consumer lives
            consumers.start("default", 2, **extra)  # no scheduler, no hold: runs the sweeps
            wait_for(
                lambda: (
                    [row.outcome for row in claims(PROBE) if row.slot == held.slot] == ["raised"]
                ),
                timeout=60,
                message="the held slot ended",
            )
            claimed = claims(PROBE)
            runs = effect_summary("periodic-probe")["rows"]
    finally:
        consumers.stop_all()

    [ended] = [row for row in claimed if row.slot == held.slot]
    assert ended.reason == (
        f"worker lost: {held.claimed_by} stopped running it; the next slot catches up"
    )
    assert ended.finished_at is not None  # shown failed (the probe is declared in consumers)
    # Only the killed body is lost: the bodies its restarted worker holds, and the ones
    # the other consumer ran, are not.
    lost = [row.slot for row in claimed if (row.reason or "").startswith("worker lost")]
    assert lost == [held.slot]
    assert "worker(s) died and were restarted" in consumers.log_of(first)
    # Not run again: every run of the probe is a slot that ended ok.
    assert runs == sum(row.outcome == "ok" for row in claimed)


@pytest.mark.workers
def test_a_pause_is_honoured_by_every_scheduler_within_one_tick(make_app, tmp_path):
    app = make_app(**SHORT_PERIODS)
    consumers = Consumers(app, tmp_path)
    extra = {"TASKLEDGER_EXTRA_MODULES": "tests.periodic_probe"}
    first = consumers.start("default", workers=1, periodic=True, **extra)
    second = consumers.start("default", workers=1, periodic=True, **extra)
    try:
        with app.app_context():
            wait_for(lambda: len(claims(PROBE)) >= 2, timeout=60, message="two slots run")
            # The probe is declared in the consumers only: paused through the ledger.
            ledger.schedules.set_paused(PROBE, True, Actor("ops@example.com", "cli"))
            paused_at = utcnow()
            wait_for(
                lambda: sum(row.outcome == "paused" for row in slot_rows(PROBE)) >= 4,
                timeout=60,
                message="four slots skipped as paused",
            )
            rows = slot_rows(PROBE)
            runs = effect_summary("periodic-probe")["rows"]
    finally:
        consumers.stop_all()

    tick = timedelta(seconds=SHORT_PERIODS["TASK_RUNNER_RELAY_SECONDS"])
    ran = [row for row in rows if row.outcome != "paused"]
    # No scheduler ran a slot that began a tick after the pause; every run is a run slot.
    assert [row.slot for row in ran if row.slot > paused_at + tick] == []
    assert runs == len(ran)
    assert {first.returncode, second.returncode} == {0}


@pytest.mark.workers
def test_run_now_runs_one_slot_through_a_real_consumer(make_app, tmp_path):
    app = make_app()
    consumers = Consumers(app, tmp_path)
    consumer = consumers.start("default", workers=1)  # no scheduler of its own
    name = "taskrunner.relay_events"
    try:
        with app.app_context():
            slot = schedule_actions.run_now(name, Actor("ops@example.com", "web"))
            wait_for(
                lambda: any(row.finished_at for row in slot_rows(name)),
                timeout=60,
                message="the slot run by the consumer",
            )
            last = schedules.schedule(name).last_slot
    finally:
        consumers.stop_all()

    assert (last.slot_at, last.state) == (slot, "ok")
    assert last.initiator == "operator:ops@example.com"
    assert last.host and last.host.split(":")[1] != str(os.getpid())
    assert consumer.returncode == 0
