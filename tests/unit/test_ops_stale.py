"""Stale units: episodes, their one event, what status shows, and retries that heal.

The unit jobs run through Huey's own ``execute`` on the test's real queue backend; a
held unit runs in a thread, as it would in a worker, until the test releases it.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timedelta

import pytest

from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.reports import UNIT_LIST_CAP
from tasks.queues import queues
from tests.ops_types import HELD, HeldTask, register_unchecked
from tests.support import drain, wait_for

# Past the held type's thresholds (1.2 s), well inside every default one (minutes) and a
# live heartbeat's interval: a moment to judge staleness at without waiting for it.
PAST_HELD_THRESHOLDS = timedelta(minutes=1)


@pytest.fixture
def held(ctx):
    task = HeldTask()
    register_unchecked(task)
    yield task
    task.release.set()


def fresh_run(run_uuid: str):
    db.session.rollback()
    return ledger.runs.get_run(run_uuid)


def stale_reasons(run_uuid: str, now: datetime | None = None) -> list[str | None]:
    """The reasons of the run's stale units as status lists them, judged at ``now``."""
    page = ledger.runs.run_units_page(
        fresh_run(run_uuid), stale_only=True, limit=UNIT_LIST_CAP, now=now
    )
    return [u["stale_reason"] for u in page.items]


def execute_in_thread() -> threading.Thread:
    """Take the next queued job and run it in a thread, as a worker would."""
    huey = queues().huey("tasks")
    task = huey.dequeue()
    assert task is not None, "no job was queued"
    thread = threading.Thread(target=huey.execute, args=(task,), daemon=True)
    thread.start()
    return thread


def stuck_events(run_uuid: str) -> int:
    return ledger.runs.count_events("tasks.unit.stuck", fresh_run(run_uuid))


def test_a_unit_held_past_its_threshold_is_stale_once_per_episode_and_a_retry_heals_it(held, cli):
    handle = runner.start(HELD, {"units": 1}, "test")
    first = execute_in_thread()
    assert held.started.acquire(timeout=10)

    wait_for(
        lambda: stale_reasons(handle.uuid) == ["running too long"],
        timeout=10,
        message="the held unit to be running too long",
    )
    assert ledger.sweeps.mark_stuck() == 1
    assert ledger.sweeps.mark_stuck() == 0
    assert stuck_events(handle.uuid) == 1

    # A new episode: the retried unit runs again and is held again.
    result = cli.invoke(args=["tasks", "retry", handle.uuid])
    assert result.exit_code == 0, result.output
    assert "re-dispatched 1 unit " in result.output
    second = execute_in_thread()
    assert held.started.acquire(timeout=10)
    wait_for(
        lambda: stale_reasons(handle.uuid) == ["running too long"],
        timeout=10,
        message="the second episode",
    )
    assert ledger.sweeps.mark_stuck() == 1
    assert ledger.sweeps.mark_stuck() == 0
    assert stuck_events(handle.uuid) == 2

    # The retry that heals: this execution is not held.
    held.hold = False
    assert cli.invoke(args=["tasks", "retry", handle.uuid]).exit_code == 0
    assert drain() == 1
    healed = fresh_run(handle.uuid)
    assert healed.status == "completed"

    # The two originals finish late: they hold superseded tokens and change nothing.
    held.release.set()
    first.join(10)
    second.join(10)
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed, run.units_failed) == ("completed", 1, 0)
    assert run.finished_at == healed.finished_at
    [unit] = ledger.runs.run_units_page(run).items
    assert (unit["status"], unit["attempts"], unit["last_error"]) == ("completed", 3, None)
    assert sorted(held.finished) == ["u1", "u1", "u1"]
    assert ledger.runs.count_events("tasks.run.completed", run) == 1
    assert ledger.runs.count_events("tasks.unit.failed", run) == 0
    assert stuck_events(handle.uuid) == 2


def test_status_shows_stale_units_with_their_reason_in_text_and_json(held, cli):
    handle = runner.start(HELD, {"units": 2}, "test")
    thread = execute_in_thread()
    assert held.started.acquire(timeout=10)
    wait_for(lambda: len(stale_reasons(handle.uuid)) == 2, timeout=10, message="two stale")

    result = cli.invoke(args=["tasks", "status", handle.uuid, "--json"])
    assert result.exit_code == 0, result.output
    detail = json.loads(result.output)
    assert detail["units"]["stale"] == 2
    by_key = {u["unit_key"]: u for u in detail["stale_units"]}
    assert by_key["u1"]["stale_reason"] == "running too long"
    assert by_key["u2"]["stale_reason"] == "never started"
    assert all(u["stale"] for u in by_key.values())

    text = cli.invoke(args=["tasks", "status", handle.uuid]).output
    assert "stale units:" in text
    assert "running too long" in text and "never started" in text

    swept = cli.invoke(args=["tasks", "detect-stuck"])
    assert swept.exit_code == 0
    assert swept.output.strip() == "2 units newly stale"
    assert cli.invoke(args=["tasks", "detect-stuck"]).output.strip() == "0 units newly stale"
    held.release.set()
    thread.join(10)


def test_units_whose_queued_jobs_were_lost_are_never_started_and_a_retry_heals_them(held, cli):
    held.hold = False
    handle = runner.start(HELD, {"units": 3}, "test")
    queues().huey("tasks").storage.flush_queue()  # the queue lost every job
    later = utcnow() + PAST_HELD_THRESHOLDS

    assert stale_reasons(handle.uuid, later) == ["never started"] * 3
    assert ledger.sweeps.mark_stuck(now=later) == 3
    assert drain() == 0

    result = cli.invoke(args=["tasks", "retry", handle.uuid])
    assert result.exit_code == 0, result.output
    assert "re-dispatched 3 units" in result.output
    assert drain() == 3
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 3)
    assert {u["attempts"] for u in ledger.runs.run_units_page(run).items} == {1}
    assert stale_reasons(handle.uuid) == []


def test_the_sweep_finds_stale_units_behind_a_large_batch_of_healthy_ones(held):
    # Healthy pending units of a big run first, by id; the stale ones come after them.
    held.hold = False
    healthy = runner.start("diagnostics.probe", {"units": 30}, "test")
    handle = runner.start(HELD, {"units": 3}, "test")
    huey = queues().huey("tasks")
    huey.storage.flush_queue()
    later = utcnow() + PAST_HELD_THRESHOLDS
    assert len(stale_reasons(handle.uuid, later)) == 3

    assert ledger.sweeps.mark_stuck(limit=2, now=later) == 3
    assert stuck_events(handle.uuid) == 3
    assert ledger.runs.count_events("tasks.unit.stuck", fresh_run(healthy.uuid)) == 0
