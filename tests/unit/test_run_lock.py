"""The run lock against the row locks of its units, with real concurrent PostgreSQL sessions."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from sqlalchemy import create_engine, insert, text, update

from database import utcnow
from extensions import db
from taskrunner import runner
from taskrunner.models import OutboxEvent, TaskRun, TaskRunUnit
from tests.conftest import BACKEND

pytestmark = pytest.mark.skipif(
    BACKEND != "postgres", reason="row locks are PostgreSQL's (SQLite has one database lock)"
)


def run_of_lost_units(make_app, units: int):
    """A run whose units all lost their worker (running, heartbeat an hour old): the app,
    the run's handle, one unit's id, and an engine for sessions of our own."""
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=1)
    with app.app_context():
        handle = runner.start("diagnostics.probe", {"units": units}, "test")
        long_ago = utcnow() - timedelta(hours=1)
        db.session.execute(
            update(TaskRunUnit).values(status="running", started_at=long_ago, heartbeat_at=long_ago)
        )
        db.session.commit()
        unit_id = db.session.execute(db.select(TaskRunUnit.id).limit(1)).scalar_one()
        url = db.engine.url
        db.session.remove()
    return app, handle, unit_id, create_engine(url)


def test_a_cancel_never_deadlocks_with_a_transition_holding_a_unit_and_writing_its_event(
    make_app,
):
    app, handle, unit_id, engine = run_of_lost_units(make_app, 2)
    with app.app_context():
        run_id = db.session.execute(db.select(TaskRun.id)).scalar_one()
        db.session.remove()
    outcome: dict = {}

    def operator_cancels_the_run() -> None:
        with app.app_context():
            try:
                outcome["skipped"] = runner.cancel(handle.uuid)
            except Exception as exc:
                outcome["error"] = exc
            db.session.remove()

    # A transition (the stuck sweep, a unit failing) holds a unit row of the run...
    with engine.connect() as transition, engine.connect() as observer:
        transition.execute(
            update(TaskRunUnit).where(TaskRunUnit.id == unit_id).values(stuck_notified_at=utcnow())
        )
        cancel = threading.Thread(target=operator_cancels_the_run)
        cancel.start()
        # ...the cancel holds the run and waits for that unit...
        deadline = time.monotonic() + 20
        while not observer.execute(
            text(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            )
        ).scalar_one():
            assert time.monotonic() < deadline, "the cancel never waited for the unit"
            time.sleep(0.05)
        # ...and the transition writes its event: the run's key must not be locked against it.
        transition.execute(
            insert(OutboxEvent).values(
                event_id="9a3c5f5e-0000-4000-8000-000000000001",
                name="tasks.unit.stuck",
                task_run_id=run_id,
                payload={},
                created_at=utcnow(),
            )
        )
        transition.commit()
        cancel.join(timeout=30)
    engine.dispose()

    assert "error" not in outcome, outcome.get("error")
    assert outcome["skipped"] == 2


def test_a_retry_leaves_a_unit_another_transaction_holds_and_never_waits_for_it(make_app):
    app, handle, held, engine = run_of_lost_units(make_app, 3)
    outcome: dict = {}

    def operator_retries_the_stale_units() -> None:
        with app.app_context():
            outcome["retried"] = runner.retry(handle.uuid, stale_only=True)
            db.session.remove()

    # A worker cut off in the middle of its commit: its transaction holds the unit's row.
    with engine.connect() as lost_worker:
        lost_worker.execute(
            update(TaskRunUnit).where(TaskRunUnit.id == held).values(updated_at=utcnow())
        )
        retry = threading.Thread(target=operator_retries_the_stale_units, daemon=True)
        retry.start()
        retry.join(timeout=10)
        waited = retry.is_alive()
        lost_worker.rollback()  # the server dropped the lost session
    retry.join(timeout=10)

    assert not waited, "the retry waited for the held unit"
    assert outcome["retried"] == 2
    with app.app_context():
        # Once the row is free, the next retry takes the unit that was left.
        assert runner.retry(handle.uuid, stale_only=True) == 1
        db.session.remove()
    engine.dispose()
