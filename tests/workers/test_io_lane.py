"""The I/O lane: thread workers, many units waiting at once, with the ledger's guarantees.

Units of ``diagnostics.vendor_probe`` (routed to the ``io`` queue by the routing
table) wait like a vendor call. Real ``huey_consumer -k thread`` processes run them:
the gate and exactly-once close under many threads, hand-back on SIGTERM (Huey fires
the interrupted signal for every task in flight from the consumer's main thread),
and a killed consumer's units found as ``worker lost`` and retried.
"""

from __future__ import annotations

import signal

import pytest

from diagnostics.probe import VENDOR_TYPE
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.operations import run_report
from tasks.queues import queues
from tests.support import Consumers, wait_for

pytestmark = pytest.mark.workers

THREADS = 8


@pytest.fixture
def io_ctx(make_app, tmp_path):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=1)
    pool = Consumers(app, tmp_path)
    with app.app_context():
        yield pool
    pool.stop_all()


def counts(run_uuid: str) -> dict[str, int]:
    db.session.rollback()
    return run_report(ledger.runs.get_run(run_uuid))["units"]


def closed(run_uuid: str) -> bool:
    db.session.rollback()
    return ledger.runs.get_run(run_uuid).status != "running"


def test_vendor_units_are_routed_to_the_io_queue(io_ctx):
    runner.start(VENDOR_TYPE, {"units": 3}, "test")

    assert queues().huey("io").pending_count() == 3
    assert queues().huey("tasks").pending_count() == 0


def test_the_io_lane_runs_units_side_by_side_and_closes_the_run_once(io_ctx):
    handle = runner.start(VENDOR_TYPE, {"units": 24, "sleep_ms": 700, "fail_every": 12}, "test")
    io_ctx.start("io", workers=THREADS, worker_type="thread")

    wait_for(
        lambda: counts(handle.uuid)["running"] >= THREADS - 1,
        timeout=60,
        message="the lane's threads running units at once",
    )
    wait_for(lambda: closed(handle.uuid), timeout=60, message="the run to close")

    run = ledger.runs.get_run(handle.uuid)
    assert (run.status, run.units_completed, run.units_failed) == (
        "completed_with_failures",
        22,
        2,
    )
    assert {u["attempts"] for u in ledger.runs.run_units_page(run, limit=50).items} == {1}
    assert ledger.runs.count_events("tasks.run.failed", run) == 1
    assert ledger.runs.count_events("tasks.unit.failed", run) == 2


def test_sigterm_on_the_io_lane_hands_every_running_unit_back(io_ctx):
    handle = runner.start(VENDOR_TYPE, {"units": 20, "sleep_ms": 3000}, "test")
    first = io_ctx.start("io", workers=THREADS, worker_type="thread")
    wait_for(
        lambda: counts(handle.uuid)["running"] == THREADS,
        timeout=60,
        message="every thread running a unit",
    )

    first.send_signal(signal.SIGTERM)  # a deploy stopping the consumer
    first.wait(timeout=30)

    stopped = counts(handle.uuid)
    assert stopped["running"] == 0
    assert stopped["pending"] == 20 - stopped["completed"]
    assert io_ctx.logs().count("handed back on shutdown as a new job") == THREADS

    io_ctx.start("io", workers=THREADS, worker_type="thread")
    wait_for(lambda: closed(handle.uuid), timeout=90, message="the run to close")
    run = ledger.runs.get_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 20)
    assert run_report(run)["units"]["stale"] == 0
    assert ledger.runs.run_actions(run) == []  # nobody had to retry anything
    assert ledger.runs.count_events("tasks.run.completed", run) == 1


@pytest.mark.chaos
def test_a_killed_io_consumer_leaves_its_units_as_worker_lost_and_a_retry_closes_the_run(
    io_ctx,
):
    handle = runner.start(VENDOR_TYPE, {"units": 16, "sleep_ms": 2500}, "test")
    first = io_ctx.start("io", workers=THREADS, worker_type="thread")
    wait_for(
        lambda: counts(handle.uuid)["running"] == THREADS,
        timeout=60,
        message="every thread running a unit",
    )

    io_ctx.kill(first)  # SIGKILL: no signal, no hand-back

    wait_for(
        lambda: counts(handle.uuid)["stale"] == THREADS,
        timeout=30,
        message="the killed threads' units found as worker lost",
    )
    stale = ledger.runs.run_units_page(
        ledger.runs.get_run(handle.uuid), stale_only=True, limit=50
    ).items
    assert {u["stale_reason"] for u in stale} == {"worker lost"}
    io_ctx.start("io", workers=THREADS, worker_type="thread")
    # What was still queued runs; the lost units wait for the operator's retry.
    wait_for(
        lambda: counts(handle.uuid)["completed"] == 16 - THREADS,
        timeout=60,
        message="the queued units to complete",
    )
    assert runner.retry_stale()[0] == THREADS
    wait_for(lambda: closed(handle.uuid), timeout=60, message="the run to close")
    run = ledger.runs.get_run(handle.uuid)
    assert (run.status, run.units_completed) == ("completed", 16)
    assert ledger.runs.count_events("tasks.run.completed", run) == 1
