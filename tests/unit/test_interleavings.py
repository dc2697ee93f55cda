"""The races of concurrent operators and duplicated deliveries, forced on PostgreSQL.

Each test holds one real session right before a chosen statement while another commits,
then lets it go (``tests/interleave.py``), and asserts the safe outcome, over many
repetitions. On SQLite these interleavings cannot happen: every ledger transaction that
reads before it writes starts with ``BEGIN IMMEDIATE`` and holds the database lock
from its first statement.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select, update

from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.contract import Refused, TaskUnit
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun, TaskRunUnit
from tasks.queues import queues
from tests.conftest import BACKEND
from tests.interleave import Hold, InThread, meeting, wait_until_blocked_on_a_lock
from tests.web.backoffice_support import finished_run

pytestmark = pytest.mark.skipif(BACKEND != "postgres", reason="forced with PostgreSQL row locks")

REPEATS = 10
PROBE = "diagnostics.probe"


def inserts_a_run(statement: str) -> bool:
    return statement.startswith("INSERT INTO task_runs")


def hides_runs(statement: str) -> bool:
    return statement.startswith("UPDATE task_runs SET") and "deleted_at=" in statement


def locks_a_run(statement: str) -> bool:
    return "FROM task_runs" in statement and statement.rstrip().endswith(
        ("FOR UPDATE", "FOR NO KEY UPDATE")
    )


def run_row(run_uuid: str) -> TaskRun | None:
    db.session.rollback()
    return db.session.execute(select(TaskRun).where(TaskRun.uuid == run_uuid)).scalar_one_or_none()


def unit_statuses(run_id: int) -> list[str]:
    return sorted(
        db.session.execute(
            select(TaskRunUnit.status).where(TaskRunUnit.task_run_id == run_id)
        ).scalars()
    )


def old_failed_run() -> str:
    """A run closed with one failure ten days ago: old enough for any prune below."""
    run_uuid = finished_run(PROBE, ["probe-1", "probe-2"], {"probe-2": "probe unit 2 failed"})
    when = utcnow() - timedelta(days=10)
    db.session.execute(update(TaskRun).where(TaskRun.uuid == run_uuid).values(finished_at=when))
    db.session.commit()
    return run_uuid


def test_two_first_attempts_of_one_single_tracked_job_open_one_run(race_app):
    for attempt in range(REPEATS):
        unit = TaskUnit(f"document-{attempt}", 7)
        attempt_args = ("tests.single", unit, f"dispatch-{attempt}", "queue")
        with meeting(db.engine, ["first", "second"], inserts_a_run):
            racers = [
                InThread(race_app, name, ledger.single_jobs.begin_single_attempt, *attempt_args)
                for name in ("first", "second")
            ]
            claims = [racer.join() for racer in racers]

        assert [r.error for r in racers] == [None, None]
        # One runs the attempt; the other found it running on a live worker: nothing to do.
        [taken] = [claim for claim in claims if claim is not None]
        db.session.rollback()
        assert len(ledger.single_jobs.single_runs("tests.single", unit.key)) == 1
        # Huey's next retry of the same dispatch, once the attempt failed, finds that one run.
        ledger.single_jobs.release_attempt(taken, "try again")
        later = ledger.single_jobs.begin_single_attempt(*attempt_args)
        assert later.run.uuid == taken.run.uuid and later.attempts == 2
        db.session.rollback()


def test_a_retry_committed_between_prunes_read_and_its_update_keeps_the_run(race_app):
    for _ in range(REPEATS):
        run_uuid = old_failed_run()

        with Hold(db.engine, "prune", hides_runs) as hold:
            prune = InThread(race_app, "prune", ledger.pruning.prune, utcnow() - timedelta(days=1))
            hold.wait_reached()
            assert runner.retry(run_uuid, failed_only=True) == 1
            hold.release()
            report = prune.join()

        assert prune.error is None
        run = run_row(run_uuid)
        assert run is not None and run.deleted_at is None and run.status == "running"
        assert unit_statuses(run.id) == ["completed", "pending"]
        assert report.runs == 0
        queues().huey("tasks").flush()


def test_a_retry_waiting_for_prunes_lock_is_refused_once_prune_hid_the_run(race_app):
    for _ in range(REPEATS):
        run_uuid = old_failed_run()

        with Hold(db.engine, "prune", hides_runs, at="commit") as hold:
            prune = InThread(race_app, "prune", ledger.pruning.prune, utcnow() - timedelta(days=1))
            hold.wait_reached()  # the run is hidden and locked, not yet committed
            retry = InThread(race_app, "retry", runner.retry, run_uuid, failed_only=True)
            wait_until_blocked_on_a_lock()
            hold.release()
            report = prune.join()
            retry.join()

        assert prune.error is None and report.runs == 1
        assert isinstance(retry.error, Refused), retry.error
        assert run_row(run_uuid) is None
        assert queues().huey("tasks").pending_count() == 0  # nothing orphaned was enqueued


def test_a_retry_cannot_resurrect_a_run_cancelled_while_it_waited(race_app):
    for _ in range(REPEATS):
        handle = runner.start(PROBE, {"units": 3, "fail_every": 1}, "test")
        huey = queues().huey("tasks")
        huey.execute(huey.dequeue())  # one unit failed, two still pending

        with Hold(db.engine, "retry", locks_a_run) as hold:
            retry = InThread(race_app, "retry", runner.retry, handle.uuid)
            hold.wait_reached()
            runner.cancel(handle.uuid)
            hold.release()
            retry.join()

        assert isinstance(retry.error, Refused), retry.error
        run = run_row(handle.uuid)
        assert run.status == "cancelled"
        assert unit_statuses(run.id) == ["failed", "skipped", "skipped"]
        huey.flush()


def test_a_cancel_waiting_for_a_retrys_lock_cancels_the_reopened_run(race_app):
    for _ in range(REPEATS):
        handle = runner.start(PROBE, {"units": 2, "fail_every": 1}, "test")
        huey = queues().huey("tasks")
        huey.execute(huey.dequeue())

        with Hold(db.engine, "retry", locks_a_run, at="commit") as hold:
            retry = InThread(race_app, "retry", runner.retry, handle.uuid)
            hold.wait_reached()
            cancel = InThread(race_app, "cancel", runner.cancel, handle.uuid)
            wait_until_blocked_on_a_lock()
            hold.release()
            retry.join()
            cancel.join()

        assert (retry.error, cancel.error) == (None, None)
        run = run_row(handle.uuid)
        assert run.status == "cancelled"
        assert unit_statuses(run.id) == ["skipped", "skipped"]
        huey.flush()
