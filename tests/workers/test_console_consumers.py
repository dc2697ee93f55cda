"""Real consumers on the console: they register, say what they run, are lost when killed,
leave when stopped; a paused type waits in front of a live consumer and runs on resume."""

from __future__ import annotations

import signal
import sys

import pytest

from extensions import db
from taskrunner import console, runner
from taskrunner.ledger import ledger
from tests.conftest import BACKEND
from tests.support import Consumers, wait_for

pytestmark = pytest.mark.workers

BEAT = {"CONSUMER_HEARTBEAT_SECONDS": "0.3"}


def consumers_now() -> list[dict]:
    db.session.rollback()
    return console.consumers()["consumers"]


def running_units() -> list[dict]:
    return [r["unit"] for c in consumers_now() for r in c["running"] if r["unit"]]


def test_a_consumer_shows_its_running_units_then_is_lost_when_killed(ctx, consumers):
    ctx.config["CONSUMER_HEARTBEAT_SECONDS"] = 0.3
    process = consumers.start("tasks", workers=2, **BEAT)
    handle = runner.start("diagnostics.probe", {"units": 2, "sleep_ms": 4000}, "test")

    units = wait_for(lambda: len(running_units()) == 2 and running_units(), timeout=30)

    assert sorted(u["unit_key"] for u in units) == ["probe-1", "probe-2"]
    assert {u["run_uuid"] for u in units} == {handle.uuid}
    [me] = consumers_now()
    assert (me["state"], me["queues"], me["workers"], me["worker_type"]) == (
        "live",
        ["tasks"],
        2,
        "process",
    )
    assert me["pid"] == process.pid
    assert all(r["elapsed_seconds"] is not None for r in me["running"])

    consumers.kill(process)
    lost = wait_for(
        lambda: [c for c in consumers_now() if c["state"] == "lost"], timeout=10, interval=0.2
    )
    assert lost[0]["running"] == []


def test_a_consumer_stopped_cleanly_removes_itself(ctx, consumers):
    process = consumers.start("tasks", workers=1, **BEAT)
    wait_for(lambda: consumers_now(), timeout=30, message="the consumer to register")
    consumers.signal_group(process, signal.SIGINT)
    process.wait(timeout=15)
    assert consumers_now() == []


def test_the_lean_consumer_registers_with_every_queue(ctx, consumers, tmp_path):
    import subprocess

    from tests.support import ROOT, process_env

    log = open(tmp_path / "lean.log", "wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "tasks.lean", "--lane", "default,tasks", "--lane", "builder", "-n"],
        cwd=ROOT,
        env=process_env(ctx, **BEAT),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    process.log_path = log.name
    consumers.processes.append(process)
    [me] = wait_for(lambda: consumers_now(), timeout=30, message="the lean consumer")
    assert (me["queues"], me["workers"]) == (["default", "tasks", "builder"], 2)


def test_a_paused_type_waits_before_a_live_consumer_and_runs_on_resume(ctx, consumers):
    consumers.start("tasks", workers=2, **BEAT)
    runner.pause("diagnostics.probe")
    handle = runner.start("diagnostics.probe", {"units": 20}, "test")

    # The consumer takes every job from the queue and the gate turns each away.
    wait_for(lambda: console.waiting_count("tasks") == 0, timeout=30, message="queue drained")
    db.session.rollback()
    counts = ledger.counts.run_counts(ledger.runs.get_run(handle.uuid))
    assert (counts["pending"], counts["completed"]) == (20, 0)

    assert runner.resume("diagnostics.probe") == 20
    wait_for(
        lambda: (db.session.rollback(), ledger.runs.get_run(handle.uuid).status)[1] == "completed",
        timeout=60,
        message="the run to finish after the resume",
    )
    db.session.rollback()
    run = ledger.runs.get_run(handle.uuid)
    assert run.units_completed == 20
    attempts = {u["attempts"] for u in ledger.runs.run_units_page(run, limit=100).items}
    assert attempts == {1}  # the paused time spent no try


@pytest.fixture
def database_queue_app(make_app):
    """Jobs kept in a database: PostgresHuey next to PostgreSQL, SqliteHuey next to SQLite."""
    driver = {"QUEUE_DRIVER": "postgres"} if BACKEND == "postgres" else {}
    return make_app(CONSUMER_HEARTBEAT_SECONDS=0.3, **driver)


def test_workers_and_queues_read_consumers_and_waiting_jobs_of_a_database_queue(
    database_queue_app, tmp_path
):
    pool = Consumers(database_queue_app, tmp_path)
    try:
        with database_queue_app.app_context():
            handle = runner.start("diagnostics.probe", {"units": 6, "sleep_ms": 8000}, "test")
            before = queue_named("tasks")
            assert (before["waiting"], before["pending_units"]) == (6, 6)
            assert before["oldest_pending_seconds"] is not None

            process = pool.start("tasks", workers=2, **BEAT)
            units = wait_for(lambda: len(running_units()) == 2 and running_units(), timeout=30)

            assert {u["run_uuid"] for u in units} == {handle.uuid}
            [me] = consumers_now()
            assert (me["state"], me["pid"], me["queues"]) == ("live", process.pid, ["tasks"])
            during = queue_named("tasks")
            assert (during["waiting"], during["running"], during["pending_units"]) == (4, 2, 4)

            pool.kill(process)
            wait_for(
                lambda: [c for c in consumers_now() if c["state"] == "lost"],
                timeout=10,
                interval=0.2,
                message="the killed consumer shown as lost",
            )
    finally:
        pool.stop_all()


def queue_named(name: str) -> dict:
    db.session.rollback()
    [queue] = [q for q in console.queues()["queues"] if q["name"] == name]
    return queue
