"""One clock: every ledger timestamp and cutoff is the database's (issue 23, item 6).

A consumer on a host whose clock is wrong -- a real consumer process under Debian's
``faketime`` -- writes its claims and heartbeats by the PostgreSQL server's clock, so
the sweep and retry run by a host whose clock is right judge them as the others'. On
the code before, a consumer 60 s behind wrote heartbeats a minute old: its live units
looked lost at once and ``tasks retry-stale`` ran them again while they ran; a consumer
ahead wrote heartbeats in the future, hiding its death for a minute. SQLite keeps one
host's clock by nature: PostgreSQL only.
"""

from __future__ import annotations

import shutil
from datetime import timedelta

import pytest
from sqlalchemy import select, text

from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.ledger.stale_rules import LOST_AFTER_BEATS
from taskrunner.models import TaskRunUnit
from tests import ops_types
from tests.conftest import BACKEND
from tests.ops_types import EXTRA_MODULES, SLOW
from tests.support import Consumers, wait_for

pytestmark = [
    pytest.mark.workers,
    pytest.mark.skipif(BACKEND != "postgres", reason="SQLite has one host's clock by nature"),
    pytest.mark.skipif(shutil.which("faketime") is None, reason="Debian's faketime is needed"),
]
HEARTBEAT = 1


@pytest.fixture
def clock_ctx(make_app, tmp_path):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=HEARTBEAT)
    ops_types.init_app(app)
    pool = Consumers(app, tmp_path)
    with app.app_context():
        yield pool
    pool.stop_all()


def units_of(run_uuid: str) -> list[TaskRunUnit]:
    db.session.rollback()
    run = ledger.runs.get_run(run_uuid)
    return list(
        db.session.execute(
            select(TaskRunUnit).where(TaskRunUnit.task_run_id == run.id).order_by(TaskRunUnit.id)
        ).scalars()
    )


def server_now():
    return db.session.execute(text("SELECT clock_timestamp() AT TIME ZONE 'UTC'")).scalar_one()


def closed(run_uuid: str) -> bool:
    db.session.rollback()
    return ledger.runs.get_run(run_uuid).status != "running"


def beating(run_uuid: str) -> bool:
    """Every unit running, each with a heartbeat written after its claim."""
    units = units_of(run_uuid)
    return all(u.status == "running" and u.heartbeat_at > u.started_at for u in units)


def test_a_consumer_60_s_behind_keeps_its_units_alive_and_each_runs_once(clock_ctx):
    clock_ctx.start("tasks", workers=2, clock_offset="-60s", **EXTRA_MODULES)
    handle = runner.start(SLOW, {"units": 2, "sleep": 3 * HEARTBEAT + 1}, "test")
    wait_for(lambda: beating(handle.uuid), timeout=60, message="both units beating")

    # The documented sweep + retry, from a host whose clock is right, while they run.
    assert runner.retry_stale() == (0, [])
    # What the consumer wrote is the server's time, not its own a minute behind.
    now = server_now()
    for unit in units_of(handle.uuid):
        assert abs(unit.heartbeat_at - now) < timedelta(seconds=HEARTBEAT + 2)
        assert abs(unit.started_at - now) < timedelta(seconds=HEARTBEAT + 4)

    wait_for(lambda: closed(handle.uuid), timeout=60, message="the run to close")
    assert runner.retry_stale() == (0, [])
    assert [(u.status, u.attempts) for u in units_of(handle.uuid)] == [("completed", 1)] * 2
    assert ledger.runs.run_actions(ledger.runs.get_run(handle.uuid)) == []


def test_a_consumer_60_s_ahead_does_not_hide_its_death(clock_ctx):
    ahead = clock_ctx.start("tasks", workers=1, clock_offset="+60s", **EXTRA_MODULES)
    handle = runner.start(SLOW, {"units": 1, "sleep": 120}, "test")
    wait_for(lambda: beating(handle.uuid), timeout=60, message="the unit beating")

    clock_ctx.kill(ahead)  # the worker dies with its unit running

    # Judged just past the heartbeats a live worker would have written (the clock seam,
    # not a sleep): lost. The code before saw a heartbeat a minute in the future.
    later = utcnow() + timedelta(seconds=LOST_AFTER_BEATS * HEARTBEAT + 2)
    assert ledger.fleet.stale_counts_by_run(later) == [(handle.uuid, SLOW, 1)]
    assert runner.retry_stale(now=later) == (1, [])
    runner.cancel(handle.uuid)
