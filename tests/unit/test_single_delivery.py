"""A single tracked job runs once per dispatch, however often it is delivered (issue 23,
item 8).

A queue may deliver the same dispatch twice (the same Huey task id) while its first
attempt still runs. The code before took the attempt from the ``running`` unit and ran
the job again, next to the first. Now an attempt is taken from a pending unit, or from a
running one whose worker is lost by the stale rule; a delivery that finds the attempt
running on a live worker does nothing. Two real sessions: the first attempt runs in a
thread of its own, holding its job open, while the second delivery arrives.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from types import SimpleNamespace

from sqlalchemy import update

from database import utcnow
from extensions import db
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from taskrunner.ledger.stale_rules import LOST_AFTER_BEATS
from taskrunner.models import TaskRunUnit
from taskrunner.single import execute_attempt
from tests.interleave import InThread

TYPE = "tests.single"
UNIT = TaskUnit("document-7", 7)


def delivery(dispatch: str) -> SimpleNamespace:
    """What the wrapper reads of a Huey task: its id (the dispatch), retries, timeout and
    kwargs (which carry to later deliveries that the dispatch's run was made)."""
    return SimpleNamespace(id=dispatch, retries=2, timeout=60, kwargs={})


def unit_row() -> tuple[str, int]:
    db.session.rollback()
    [run] = ledger.single_jobs.single_runs(TYPE, UNIT.key)
    [unit] = ledger.runs.run_units_page(run).items
    return unit["status"], unit["attempts"]


def test_a_second_delivery_while_the_first_attempt_runs_does_not_run_the_job(app):
    inside, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def job(name: str) -> str:
        calls.append(name)
        if name == "first":
            inside.set()
            assert release.wait(30)
        return name

    with app.app_context():
        first = InThread(
            app, "first", execute_attempt, TYPE, UNIT, delivery("d-1"), lambda: job("first"), "q"
        )
        assert inside.wait(30)

        again = execute_attempt(TYPE, UNIT, delivery("d-1"), lambda: job("second"), "queue")

        assert again is None and calls == ["first"]
        assert unit_row() == ("running", 1)
        release.set()
        assert first.join() == "first" and first.error is None
        assert calls == ["first"]
        assert unit_row() == ("completed", 1)


def test_a_delivery_after_the_first_attempts_worker_died_runs_the_job(app):
    calls: list[str] = []
    with app.app_context():
        claim = ledger.single_jobs.begin_single_attempt(TYPE, UNIT, "d-2", "queue")
        # Its worker died: no heartbeat for longer than the stale rule's "worker lost".
        beats = LOST_AFTER_BEATS * app.config["TASK_RUNNER_HEARTBEAT_SECONDS"]
        db.session.execute(
            update(TaskRunUnit)
            .where(TaskRunUnit.id == claim.unit_id)
            .values(heartbeat_at=utcnow() - timedelta(seconds=beats + 1))
        )
        db.session.commit()

        execute_attempt(TYPE, UNIT, delivery("d-2"), lambda: calls.append("again"), "queue")

        assert calls == ["again"]
        assert unit_row() == ("completed", 2)
