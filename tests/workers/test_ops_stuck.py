"""Stuck detection with real consumers: a SIGKILLed worker, and a long unit on a live one."""

from __future__ import annotations

import pytest

from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.operations import run_report
from tests import ops_types
from tests.ops_types import EXTRA_MODULES, SLOW
from tests.support import Consumers, wait_for

pytestmark = pytest.mark.workers


@pytest.fixture
def ops_ctx(make_app, tmp_path):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=1)
    ops_types.init_app(app)
    pool = Consumers(app, tmp_path)
    with app.app_context():
        yield pool
    pool.stop_all()


def unit(run_uuid: str) -> dict:
    db.session.rollback()
    detail = run_report(ledger.runs.get_run(run_uuid))
    [only] = ledger.runs.run_units_page(ledger.runs.get_run(run_uuid)).items
    stale = {u["unit_key"]: u for u in detail["stale_units"]}
    return stale.get(only["unit_key"], only)


def test_a_killed_worker_is_found_lost_while_a_long_unit_on_a_live_worker_waits_its_threshold(
    ops_ctx,
):
    doomed = ops_ctx.start("tasks", workers=1, **EXTRA_MODULES)
    lost = runner.start(SLOW, {"units": 1, "sleep": 60}, "test").uuid
    wait_for(lambda: unit(lost)["status"] == "running", timeout=30, message="a running unit")
    ops_ctx.kill(doomed)

    ops_ctx.start("tasks", workers=1, **EXTRA_MODULES)
    # ops.slow is stale after 6 s; this unit runs 10 s on a live, beating worker.
    long = runner.start(SLOW, {"units": 1, "sleep": 10}, "test").uuid
    wait_for(lambda: unit(long)["status"] == "running", timeout=30, message="the long unit")

    # Heartbeats every second: lost after three missed beats, found within a few more.
    wait_for(
        lambda: unit(lost)["stale_reason"] == "worker lost",
        timeout=8,
        message="the killed worker's unit to be found lost",
    )
    assert unit(long)["stale"] is False
    assert ledger.sweeps.mark_stuck() == 1

    wait_for(
        lambda: unit(long)["stale_reason"] == "running too long",
        timeout=15,
        message="the long unit to pass its threshold",
    )
    assert ledger.sweeps.mark_stuck() == 1
    assert ledger.sweeps.mark_stuck() == 0
    assert ledger.runs.count_events("tasks.unit.stuck", ledger.runs.get_run(lost)) == 1
    assert ledger.runs.count_events("tasks.unit.stuck", ledger.runs.get_run(long)) == 1

    wait_for(lambda: unit(long)["status"] == "completed", timeout=20, message="completion")
    assert unit(lost)["stale_reason"] == "worker lost"
    runner.cancel(lost)
