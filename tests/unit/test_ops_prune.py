"""Pruning: old terminal runs go with their rows and the queues' leftovers; nothing else."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from tasks.queues import queues
from tests.interleave import Hold, InThread
from tests.support import drain


def finished_days_ago(run_uuid: str, days: float) -> None:
    when = utcnow() - timedelta(days=days)
    db.session.execute(
        update(TaskRun).where(TaskRun.uuid == run_uuid).values(started_at=when, finished_at=when)
    )
    db.session.commit()


def units_of(run_uuid: str) -> int:
    db.session.rollback()
    run_id = select(TaskRun.id).where(TaskRun.uuid == run_uuid).scalar_subquery()
    return db.session.execute(
        select(func.count()).select_from(TaskRunUnit).where(TaskRunUnit.task_run_id == run_id)
    ).scalar_one()


@pytest.fixture
def fleet(ctx):
    """Old completed and old cancelled runs, a young completed one, an old running one."""
    old = runner.start("diagnostics.probe", {"units": 3, "fail_every": 3}, "test").uuid
    drain()
    cancelled = runner.start("diagnostics.probe", {"units": 4}, "test").uuid
    runner.cancel(cancelled)  # revokes its 4 queued jobs: their keys outlive them
    young = runner.start("diagnostics.probe", {"units": 1}, "test").uuid
    drain()
    running = runner.start("diagnostics.probe", {"units": 2}, "test").uuid
    queues().huey("tasks").storage.flush_queue()
    finished_days_ago(old, 40)
    finished_days_ago(cancelled, 31)
    finished_days_ago(young, 5)
    db.session.execute(
        update(TaskRun)
        .where(TaskRun.uuid == running)
        .values(started_at=utcnow() - timedelta(days=90))
    )
    db.session.commit()
    return {"old": old, "cancelled": cancelled, "young": young, "running": running}


def test_prune_deletes_old_terminal_runs_and_never_a_running_or_young_one(fleet, cli):
    before = {name: units_of(uuid) for name, uuid in fleet.items()}

    result = cli.invoke(args=["tasks", "prune"])

    assert result.exit_code == 0, result.output
    assert result.output.startswith("pruned 2 runs (7 units, ")
    for name in ("old", "cancelled"):
        assert ledger.runs.find_run(fleet[name]) is None
        assert units_of(fleet[name]) == 0
    for name in ("young", "running"):
        assert ledger.runs.find_run(fleet[name]) is not None, name
        assert units_of(fleet[name]) == before[name]
    assert ledger.runs.find_run(fleet["running"]).status == "running"
    orphans = db.session.execute(
        select(func.count())
        .select_from(OutboxEvent)
        .where(
            OutboxEvent.task_run_id.is_not(None), OutboxEvent.task_run_id.not_in(select(TaskRun.id))
        )
    ).scalar_one()
    assert orphans == 0
    [action] = (
        db.session.execute(select(OperatorAction).where(OperatorAction.action == "prune"))
        .scalars()
        .all()
    )
    assert action.task_run_id is None
    assert action.detail["runs"] == 2 and action.detail["units"] == 7
    assert action.detail["events"] >= 5 and action.detail["actions"] == 1
    assert action.detail["queue_keys"] == 4


def test_prune_with_days_keeps_runs_inside_the_retention_it_was_given(fleet, cli):
    result = cli.invoke(args=["tasks", "prune", "--days", "35"])
    assert result.output.startswith("pruned 1 run (3 units, ")
    assert ledger.runs.find_run(fleet["old"]) is None
    assert ledger.runs.find_run(fleet["cancelled"]) is not None
    assert cli.invoke(args=["tasks", "prune", "--days", "-1"]).exit_code == 2


def test_prune_works_in_small_batches(fleet):
    report = ledger.pruning.prune(utcnow() - timedelta(days=30), run_batch=1, row_batch=2)
    assert (report.runs, report.units) == (2, 7)
    assert ledger.runs.find_run(fleet["running"]) is not None


def test_prune_clears_the_queues_leftovers_and_keeps_what_live_jobs_need(fleet):
    huey = queues().huey("tasks")
    window_key = f"{huey.name}.rl.task-runner.ops.gone.w"
    huey.put(window_key, 5)  # a window of 1970: long over
    huey.storage.incr(f"{huey.name}.rl.task-runner.ops.gone", 30)
    old_lock = f"{huey.name}.lock.sweep-{fleet['old']}"
    live_lock = f"{huey.name}.lock.sweep-{fleet['running']}"
    huey.put_if_empty(old_lock, "1")
    huey.put_if_empty(live_lock, "1")
    # A live unit's queued job revoked by hand: its key must stay while it is queued.
    running = ledger.runs.find_run(fleet["running"])
    [live_unit, _] = db.session.execute(
        select(TaskRunUnit.id, TaskRunUnit.dispatch_token)
        .where(TaskRunUnit.task_run_id == running.id)
        .order_by(TaskRunUnit.id)
    ).all()
    live_revoke = f"r:u{live_unit.id}.{live_unit.dispatch_token}"
    huey.put(live_revoke, (None, False))
    revoke_keys = [k for k in huey.storage.result_items() if k.startswith("r:u")]
    assert len(revoke_keys) == 5

    report = runner.prune()

    keys = set(huey.storage.result_items())
    assert [k for k in keys if k.startswith("r:u")] == [live_revoke]
    assert window_key not in keys and old_lock not in keys
    assert live_lock in keys
    assert report.queue_keys == 6  # 4 revoke keys of the cancelled run, a window, a lock


def test_a_prune_whose_queues_are_down_is_recorded_and_said_in_one_line(make_app):
    # Nothing listens on port 1. The runs were deleted, then clearing the queues raised:
    # a traceback, and the prune went unrecorded although it had deleted them.
    app = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:1/0")
    with app.app_context():
        done = runner.start("diagnostics.probe", {"units": 0}, "test").uuid  # no job to send

        result = app.test_cli_runner().invoke(args=["tasks", "prune", "--days", "0"])

        assert result.exit_code == 1, result.exception
        [line] = result.stderr.splitlines()
        assert line.startswith(
            "error: pruned 1 run, but the queues' leftovers could not be cleared: unhandled "
            "redis.exceptions.ConnectionError"
        )
        assert ledger.runs.find_run(done) is None
        [action] = db.session.scalars(
            select(OperatorAction).where(OperatorAction.action == "prune")
        ).all()
        assert (action.detail["runs"], action.detail["queue_keys"]) == (1, 0)


def hides_runs(statement: str) -> bool:
    return statement.startswith("UPDATE task_runs SET") and "deleted_at=" in statement


def test_two_prunes_at_once_record_between_them_what_was_deleted_once(fleet, app):
    # Prune A hides the old runs, then is held before it deletes anything; prune B finds
    # the hidden runs (a prune that died midway is finished by the next one) and deletes
    # them. A deleted nothing after that, yet recorded the runs it had hidden.
    with Hold(db.engine, "prune-a", hides_runs, at="begin") as hold:
        first = InThread(app, "prune-a", runner.prune)
        hold.wait_reached()
        second = InThread(app, "prune-b", runner.prune)
        second.join()
        hold.release()
        first.join()
    assert second.error is None, second.error
    assert first.error is None

    db.session.rollback()
    details = [
        action.detail
        for action in db.session.scalars(
            select(OperatorAction).where(OperatorAction.action == "prune")
        )
    ]
    assert len(details) == 2
    assert sum(d["runs"] for d in details) == 2
    assert sum(d["units"] for d in details) == 7
    assert sum(d["queue_keys"] for d in details) == 4
    assert sorted(first.result.run_uuids + second.result.run_uuids) == sorted(
        [fleet["old"], fleet["cancelled"]]
    )


def reads_live_unit_tokens(statement: str) -> bool:
    return statement.startswith("SELECT task_run_units.id, task_run_units.dispatch_token")


def test_two_prunes_clearing_the_queues_at_once_count_each_key_once(fleet, app):
    # Both listed the revoke keys of the cancelled run; B removed them while A was held.
    with Hold(db.engine, "prune-a", reads_live_unit_tokens) as hold:
        first = InThread(app, "prune-a", runner.prune)
        hold.wait_reached()
        second = InThread(app, "prune-b", runner.prune)
        second.join()
        hold.release()
        first.join()
    assert first.error is None and second.error is None
    assert first.result.queue_keys + second.result.queue_keys == 4
