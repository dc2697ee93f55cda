"""The ledger's rules, driven through Huey's own execute() on a real queue backend."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from extensions import db
from taskrunner import delivery, events, runner
from taskrunner.contract import Refused
from taskrunner.ledger import ledger
from taskrunner.models import TaskRunUnit
from tasks.queues import queues
from tests.support import drain, queued_jobs, see_logs


def fresh_run(run_uuid: str):
    """The run as committed now (jobs write through their own sessions)."""
    db.session.rollback()
    return ledger.runs.get_run(run_uuid)


def units(run_uuid: str) -> dict[str, TaskRunUnit]:
    run = fresh_run(run_uuid)
    rows = db.session.execute(select(TaskRunUnit).where(TaskRunUnit.task_run_id == run.id))
    return {u.unit_key: u for u in rows.scalars()}


def test_the_same_job_delivered_twice_runs_once(ctx, controlled):
    handle = runner.start("tests.controlled", {"units": 3}, "test")
    huey = queues().huey("tasks")
    queued = queued_jobs()
    for task in queued + queued:  # every job delivered twice
        huey.execute(task)

    assert dict(controlled.executions) == {"k1": 1, "k2": 1, "k3": 1}
    assert {u.attempts for u in units(handle.uuid).values()} == {1}
    assert fresh_run(handle.uuid).status == "completed"


def test_a_job_holding_a_superseded_token_changes_nothing(ctx, controlled):
    controlled.failing = {"k2"}
    handle = runner.start("tests.controlled", {"units": 2}, "test")
    huey = queues().huey("tasks")
    stale_jobs = queued_jobs()
    # The operator retries before the first jobs ever ran: new tokens for pending units.
    runner.retry(handle.uuid)
    controlled.failing = set()
    drain()
    before = {k: (u.status, u.attempts, u.finished_at) for k, u in units(handle.uuid).items()}

    controlled.failing = {"k1", "k2"}
    for task in stale_jobs:  # the originals arrive late
        huey.execute(task)

    after = {k: (u.status, u.attempts, u.finished_at) for k, u in units(handle.uuid).items()}
    assert after == before
    assert {status for status, _, _ in after.values()} == {"completed"}
    assert dict(controlled.executions) == {"k1": 1, "k2": 1}


def test_retry_failed_only_reruns_exactly_the_failed_units_and_closes_again(ctx, controlled, cli):
    controlled.failing = {"k2", "k5"}
    handle = runner.start("tests.controlled", {"units": 6}, "test")
    drain()
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed, run.units_failed) == ("completed_with_failures", 4, 2)

    controlled.failing = set()
    result = cli.invoke(args=["tasks", "retry", handle.uuid, "--failed-only"])
    assert result.exit_code == 0, result.output
    assert "re-dispatched 2 units" in result.output
    assert fresh_run(handle.uuid).status == "running"
    drain()

    run = fresh_run(handle.uuid)
    assert (run.status, run.units_completed, run.units_failed) == ("completed", 6, 0)
    attempts = {k: u.attempts for k, u in units(handle.uuid).items()}
    assert attempts == {"k1": 1, "k2": 2, "k3": 1, "k4": 1, "k5": 2, "k6": 1}
    assert controlled.executions["k2"] == 2 and controlled.executions["k1"] == 1
    assert ledger.runs.count_events("tasks.run.failed", run) == 1
    assert ledger.runs.count_events("tasks.run.completed", run) == 1
    assert [a.action for a in ledger.runs.run_actions(run)] == ["retry"]


def test_retry_refuses_a_run_with_nothing_to_retry(ctx, controlled, cli):
    handle = runner.start("tests.controlled", {"units": 2}, "test")
    drain()

    result = cli.invoke(args=["tasks", "retry", handle.uuid, "--failed-only"])

    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: run {handle.uuid} has nothing to retry"


def test_retry_refuses_a_run_of_an_unregistered_type(ctx, controlled, cli):
    controlled.failing = {"k1"}
    handle = runner.start("tests.controlled", {"units": 1}, "test")
    drain()
    from taskrunner.registry import registry

    registry.unregister("tests.controlled")
    result = cli.invoke(args=["tasks", "retry", handle.uuid])

    assert result.exit_code == 1
    assert "not a registered task type" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_cancel_mid_run_leaves_no_unit_pending_or_running(ctx, controlled, cli):
    handle = runner.start("tests.controlled", {"units": 10}, "test")
    drain(limit=3)

    result = cli.invoke(args=["tasks", "cancel", handle.uuid])
    assert result.exit_code == 0, result.output
    drain()  # whatever is still queued must not run

    statuses = [u.status for u in units(handle.uuid).values()]
    assert statuses.count("completed") == 3
    assert statuses.count("skipped") == 7
    assert sum(controlled.executions.values()) == 3
    run = fresh_run(handle.uuid)
    assert (run.status, run.units_skipped) == ("cancelled", 7)
    assert ledger.runs.count_events("tasks.run.failed", run) == 1


def test_cancel_refuses_a_finished_run(ctx, controlled, cli):
    handle = runner.start("tests.controlled", {"units": 1}, "test")
    drain()

    result = cli.invoke(args=["tasks", "cancel", handle.uuid])

    assert result.exit_code == 1
    assert result.stderr.strip() == f"error: run {handle.uuid} is completed, not running"


def test_a_run_closes_exactly_once_when_its_last_units_finish_together(ctx, controlled):
    handle = runner.start("tests.controlled", {"units": 4}, "test")
    huey = queues().huey("tasks")
    jobs = [huey.dequeue() for _ in range(4)]
    barrier = threading.Barrier(4)
    app = ctx

    def finish(task):
        with app.app_context():
            controlled.during = None
            barrier.wait()
            huey.execute(task)

    threads = [threading.Thread(target=finish, args=(job,)) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    run = fresh_run(handle.uuid)
    assert run.status == "completed"
    assert ledger.runs.count_events("tasks.run.completed", run) == 1


def test_finalize_called_concurrently_closes_once(ctx, controlled):
    handle = runner.start("tests.controlled", {"units": 3}, "test")
    drain()
    run = fresh_run(handle.uuid)
    # Reopen the closed run's books as if its last units had just finished.
    from taskrunner.models import TaskRun

    db.session.execute(TaskRun.__table__.update().values(status="running", finished_at=None))
    db.session.commit()
    results = []
    app, run_id = ctx, run.id

    def close():
        with app.app_context():
            results.append(ledger.transitions.finalize(run_id))

    threads = [threading.Thread(target=close) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert results.count("completed") == 1 and results.count(None) == 3
    db.session.rollback()
    assert ledger.runs.count_events("tasks.run.completed", run) == 2  # the first close + this one


def test_an_event_committed_but_not_delivered_is_delivered_by_the_relay(
    ctx, controlled, monkeypatch
):
    received = []
    events.subscribe("tasks.run.completed", received.append)
    # The process "stops" right after the commit: nothing is delivered.
    monkeypatch.setattr(delivery, "deliver", lambda outbox: None)
    handle = runner.start("tests.controlled", {"units": 1}, "test")
    drain()
    assert received == []
    monkeypatch.undo()

    assert delivery.relay(older_than_seconds=0) >= 1
    assert delivery.relay(older_than_seconds=0) == 0  # delivered once, then marked

    assert [e["payload"]["run_uuid"] for e in received] == [handle.uuid]
    assert received[0]["name"] == "tasks.run.completed"


def test_events_are_delivered_after_commit_by_the_owner(ctx, controlled):
    received = []
    events.subscribe("tasks.unit.failed", received.append)
    controlled.failing = {"k1"}
    handle = runner.start("tests.controlled", {"units": 2}, "test")
    drain()

    assert [e["payload"]["unit_key"] for e in received] == ["k1"]
    assert received[0]["payload"]["reason"] == "unit k1 broke"
    assert received[0]["payload"]["run_uuid"] == handle.uuid
    assert delivery.relay(older_than_seconds=0) == 0


def test_a_dispatch_failure_after_commit_closes_the_run_and_raises(make_app, controlled):
    # Nothing listens on port 1: every enqueue fails after the run was committed.
    app = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:1/0")
    with app.app_context():
        with pytest.raises(Exception) as raised:
            runner.start("tests.controlled", {"units": 5}, "test")
        assert "Connection" in type(raised.value).__name__

        run = ledger.runs.runs_page(limit=1).items[0]
        assert run.status == "failed"
        assert run.units_failed == 5 and run.finished_at is not None
        reasons = {u["last_error"] for u in ledger.runs.run_units_page(run, status="failed").items}
        # One exception failed them all: one reason, one error reference.
        [reason] = reasons
        assert see_logs(r"redis\.exceptions\.ConnectionError", "dispatch failed: ").fullmatch(
            reason
        )


def test_the_cli_reports_a_dispatch_failure_in_one_line(make_app, controlled):
    app = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:1/0")
    result = app.test_cli_runner().invoke(
        args=["tasks", "start", "tests.controlled", "--context", '{"units": 2}']
    )

    assert result.exit_code == 1
    assert result.stderr.startswith("error: dispatch failed")
    assert len(result.stderr.strip().splitlines()) == 1


def test_retry_of_an_unknown_run_is_refused(ctx):
    with pytest.raises(Refused):
        runner.retry("00000000-0000-0000-0000-000000000000")
