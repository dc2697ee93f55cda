"""The stale rules, defined once: one run's pages, the pages across runs, the badges, the
metrics and the sweep judge the same units the same way, at the moment they are given."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

import pytest
from sqlalchemy import update

from database import utcnow
from extensions import db
from taskrunner import metrics, runner
from taskrunner.ledger import ledger
from taskrunner.ledger.stale_rules import NEVER_STARTED, RUNNING_TOO_LONG, WORKER_LOST
from taskrunner.models import TaskRunUnit

HEARTBEAT_LOST = timedelta(seconds=3 * 30)  # three missed beats of the tests' 30 s interval
STUCK_AFTER = timedelta(minutes=30)  # the controlled type's stuck_after_minutes
STALE_REASONS = (WORKER_LOST, RUNNING_TOO_LONG, NEVER_STARTED)


@pytest.fixture
def started(ctx, controlled):
    """A run of four units: k1 and k2 claimed (running), k3 and k4 pending; and when."""
    dispatch = ledger.transitions.create_run(
        controlled.type(), {}, "test", controlled.units({"units": 4}), 100
    )
    for unit_id in ledger.transitions.dispatch_batch(dispatch, 0, 2):
        assert ledger.transitions.claim(unit_id, dispatch.token) is not None
    db.session.commit()
    return dispatch, utcnow()


def beat(unit_key: str, at: datetime) -> None:
    db.session.execute(
        update(TaskRunUnit).where(TaskRunUnit.unit_key == unit_key).values(heartbeat_at=at)
    )
    db.session.commit()


def reasons_everywhere(run_uuid: str, now: datetime) -> dict[str, dict[str, str]]:
    """What each reader makes of the run's units at ``now``, by unit key."""
    db.session.rollback()
    run = ledger.runs.get_run(run_uuid)
    one_run = ledger.runs.run_units_page(run, stale_only=True, now=now).items
    across = ledger.fleet.stale_units_page(now=now).items
    return {
        "run page": {u["unit_key"]: u["stale_reason"] for u in one_run},
        "stale-units page": {u["unit_key"]: u["stale_reason"] for u in across},
        "unit page": {
            key: found["stale_reason"]
            for key in ("k1", "k2", "k3", "k4")
            if (found := ledger.runs.find_unit(run, key, now)) and found["stale"]
        },
    }


def agree(run_uuid: str, now: datetime, expected: dict[str, str]) -> None:
    seen = reasons_everywhere(run_uuid, now)
    assert seen == dict.fromkeys(seen, expected)
    run = ledger.runs.get_run(run_uuid)
    assert ledger.counts.run_counts(run, now)["stale"] == len(expected)
    # The run page's preview: its first stale unit (id order) and the count, in one read.
    preview, total = ledger.runs.stale_preview(run, limit=1, now=now)
    assert total == len(expected)
    first = sorted(expected)[:1]
    assert {u["unit_key"]: u["stale_reason"] for u in preview.items} == {
        key: expected[key] for key in first
    }
    assert (preview.next_cursor is not None) == (len(expected) > 1)
    assert ledger.attention.stale_per_run([run], now).get(run.id, 0) == len(expected)
    assert ledger.attention.attention(now).stale_units == len(expected)
    assert ledger.fleet.stale_counts_by_run(now) == (
        [(run.uuid, run.type, len(expected))] if expected else []
    )
    per_reason = Counter(expected.values())
    assert metrics.read(now).stale_units == {r: per_reason[r] for r in STALE_REASONS}


def test_nothing_is_stale_at_the_moment_the_units_were_claimed(started):
    dispatch, t0 = started
    agree(dispatch.run_uuid, t0, {})
    assert ledger.sweeps.mark_stuck(now=t0) == 0


def test_a_silent_worker_is_lost_after_three_beats_before_anything_else(started):
    dispatch, t0 = started
    agree(dispatch.run_uuid, t0 + HEARTBEAT_LOST - timedelta(seconds=5), {})
    lost = t0 + HEARTBEAT_LOST + timedelta(seconds=5)
    agree(dispatch.run_uuid, lost, {"k1": "worker lost", "k2": "worker lost"})


def test_each_reason_at_the_moment_past_its_threshold(started):
    dispatch, t0 = started
    later = t0 + STUCK_AFTER + timedelta(minutes=1)
    beat("k2", later)  # k2's worker still beats: it only runs too long
    expected = {
        "k1": "worker lost",
        "k2": "running too long",
        "k3": "never started",
        "k4": "never started",
    }
    agree(dispatch.run_uuid, later, expected)

    # The sweep judges alike, once per episode, and the retry takes what it shows.
    assert ledger.sweeps.mark_stuck(now=later) == 4
    assert ledger.sweeps.mark_stuck(now=later) == 0
    assert ledger.runs.count_events("tasks.unit.stuck", ledger.runs.get_run(dispatch.run_uuid)) == 4
    run = ledger.runs.get_run(dispatch.run_uuid)
    assert ledger.actions.count_retryable(run, False, stale_only=True, now=later) == 4
    assert ledger.actions.count_retryable(run, False, stale_only=True, now=t0) == 0


def test_a_paused_types_pending_units_are_not_never_started(started, controlled):
    dispatch, t0 = started
    runner.pause(controlled.type())
    later = t0 + STUCK_AFTER + timedelta(minutes=1)
    beat("k2", later)
    agree(dispatch.run_uuid, later, {"k1": "worker lost", "k2": "running too long"})


def test_the_drain_horizon_is_judged_at_the_moment_given(ctx, controlled):
    handle = runner.start(controlled.type(), {"units": 2}, "test")
    horizon = timedelta(hours=ctx.config["TASK_RUNNER_RETRY_HORIZON_HOURS"])
    now = utcnow()
    assert ledger.sweeps.expire_beyond_horizon(now=now + horizon - timedelta(minutes=1)) == []
    [run_id] = ledger.sweeps.expire_beyond_horizon(now=now + horizon + timedelta(minutes=1))
    run = ledger.runs.get_run(handle.uuid)
    assert run.id == run_id
    assert {u["last_error"] for u in ledger.runs.run_units_page(run).items} == {
        "expired: drain horizon exceeded"
    }
