"""Graceful hand-back: a consumer stopped with SIGTERM mid-run loses no unit.

Huey 3.5's consumer answers SIGTERM by sending SIGTERM to its process workers; a
worker running a task raises KeyboardInterrupt inside it and fires
``SIGNAL_INTERRUPTED`` in that worker process, where the wrapper hands the unit back.
"""

from __future__ import annotations

import signal

import pytest
from sqlalchemy import select

from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.models import TaskRunUnit
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


def counts(run_uuid: str) -> dict[str, int]:
    db.session.rollback()
    return run_report(ledger.runs.get_run(run_uuid))["units"]


def run_status(run_uuid: str) -> str:
    db.session.rollback()
    return ledger.runs.get_run(run_uuid).status


def test_sigterm_mid_run_hands_units_back_and_a_new_consumer_completes_them_all(ops_ctx):
    first = ops_ctx.start("tasks", workers=2, **EXTRA_MODULES)
    handle = runner.start(SLOW, {"units": 20, "sleep": 1.0}, "test")
    wait_for(
        lambda: counts(handle.uuid)["completed"] >= 2 and counts(handle.uuid)["running"] == 2,
        timeout=60,
        message="two units running after some completed",
    )

    first.send_signal(signal.SIGTERM)  # a deploy stopping the consumer
    first.wait(timeout=30)

    stopped = counts(handle.uuid)
    assert stopped["running"] == 0
    assert stopped["completed"] < 20
    assert stopped["pending"] == 20 - stopped["completed"]
    assert ops_ctx.logs().count("handed back on shutdown as a new job") == 2

    ops_ctx.start("tasks", workers=2, **EXTRA_MODULES)
    wait_for(lambda: run_status(handle.uuid) != "running", timeout=60, message="the run to close")
    run = ledger.runs.get_run(handle.uuid)
    detail = run_report(run)
    assert (run.status, run.units_completed, run.units_failed) == ("completed", 20, 0)
    assert detail["units"]["stale"] == 0
    assert ledger.runs.run_actions(run) == []  # no retry: nobody had to do anything
    assert ledger.runs.count_events("tasks.unit.stuck", run) == 0
    assert ledger.runs.count_events("tasks.run.completed", run) == 1


def test_a_job_that_sends_sigterm_to_its_own_worker_fails_its_unit_and_is_not_handed_back(
    ops_ctx,
):
    consumer = ops_ctx.start("tasks", workers=2, **EXTRA_MODULES)
    handle = runner.start(SLOW, {"units": 3, "sleep": 0.2, "sigterm_key": "u2"}, "test")

    # Its consumer was not stopping: the signal is the job's doing, not a deploy's.
    wait_for(lambda: run_status(handle.uuid) != "running", timeout=60, message="the run to close")
    run = ledger.runs.get_run(handle.uuid)
    assert (run.units_completed, run.units_failed) == (2, 1)
    failed = db.session.execute(
        select(TaskRunUnit).where(TaskRunUnit.task_run_id == run.id, TaskRunUnit.status == "failed")
    ).scalar_one()
    assert failed.unit_key == "u2" and failed.attempts == 1
    assert "not sent by its consumer" in failed.last_error
    assert "handed back on shutdown" not in ops_ctx.logs()
    assert consumer.poll() is None  # the consumer serves on
