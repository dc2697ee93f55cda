"""A step's paid answer and the database that refuses to record it: never paid for twice."""

from __future__ import annotations

import sqlite3
import threading
from datetime import timedelta

import pytest
from sqlalchemy import event, select, text

import database
from coursebuilder import stages
from coursebuilder import steps as builder_steps
from coursebuilder.llm import FakeDriver
from coursebuilder.models import GenerationRun, GenerationStep
from database import utcnow
from extensions import db
from tenancy.models import Tenant
from tests.conftest import BACKEND
from tests.support import drain

# The refusals are SQLite's: a trigger calling a function of this process, a file lock.
pytestmark = pytest.mark.skipif(BACKEND != "sqlite", reason="the SQLite backend")


def start_build() -> tuple[str, int]:
    db.session.add(Tenant(id=1, name="Tenant 1"))
    db.session.commit()
    run_uuid = stages.start(1, "Tides", lessons=1, quizzes=0, concurrency=1)
    step = db.session.execute(select(GenerationStep)).scalar_one()
    return run_uuid, step.id


def state(run_uuid: str) -> tuple[GenerationRun, GenerationStep]:
    db.session.rollback()
    run = db.session.execute(
        select(GenerationRun).where(GenerationRun.uuid == run_uuid)
    ).scalar_one()
    step = db.session.execute(
        select(GenerationStep).where(GenerationStep.key == "outline-1")
    ).scalar_one()
    return run, step


@pytest.fixture
def model_calls(monkeypatch) -> list:
    """The model's calls: outside the machine, the one thing counted by a stand-in."""
    calls: list = []
    complete = FakeDriver.complete
    monkeypatch.setattr(FakeDriver, "complete", lambda d, p: calls.append(p) or complete(d, p))
    return calls


def outline_calls(calls: list) -> int:
    """The model's calls for the step under test (the build's later steps call it too)."""
    return sum(prompt.step == "outline-1" for prompt in calls)


def run_step_then_recover() -> None:
    """The step's job as a consumer runs it, then the recovery once the step would be
    stuck, then whatever is queued (the rest of the build)."""
    drain("builder", limit=1)
    later = utcnow() + timedelta(minutes=builder_steps.STEP_STUCK_AFTER_MINUTES + 1)
    builder_steps.recover(later)
    drain("builder")


@pytest.fixture
def refusals(ctx):
    """A trigger refusing the write of a step's answer while ``left[0]`` is above zero."""
    left = [0]

    def refuse() -> int:
        left[0] -= 1
        return int(left[0] >= 0)

    def install(dbapi_connection, _record) -> None:
        dbapi_connection.create_function("refuse_answer", 0, refuse)

    event.listen(db.engine, "connect", install)
    db.engine.dispose()  # every connection from now on knows the function
    db.session.execute(
        text(
            "CREATE TRIGGER refuse_answer BEFORE UPDATE OF output ON builder_steps "
            "WHEN NEW.output IS NOT NULL AND refuse_answer() "
            "BEGIN SELECT RAISE(ABORT, 'the answer is refused'); END"
        )
    )
    db.session.commit()
    yield left
    db.session.rollback()
    db.session.execute(text("DROP TRIGGER refuse_answer"))
    db.session.commit()
    event.remove(db.engine, "connect", install)
    db.engine.dispose()


def test_an_answer_refused_once_is_recorded_and_the_model_paid_once(refusals, model_calls):
    run_uuid, _ = start_build()
    refusals[0] = 1

    run_step_then_recover()

    run, step = state(run_uuid)
    assert refusals[0] < 0, "the answer's write was never refused"
    assert outline_calls(model_calls) == 1
    assert (step.status, step.attempts) == ("completed", 1)
    assert step.output.startswith("[outline/outline-1 ")
    assert run.status == "completed"


def test_an_answer_always_refused_fails_its_step_and_the_model_is_not_paid_again(
    refusals, model_calls
):
    run_uuid, _ = start_build()
    refusals[0] = 1_000

    run_step_then_recover()

    run, step = state(run_uuid)
    assert outline_calls(model_calls) == 1
    assert (step.status, step.attempts, step.output) == ("failed", 1, None)
    reason = "step outline/outline-1 failed: its answer could not be recorded: unhandled "
    assert step.error.startswith(reason + "sqlalchemy.exc.IntegrityError — see logs, ref ")
    assert (run.status, run.failure_reason) == ("failed", step.error)


def test_an_answer_the_database_is_too_busy_to_take_is_recorded_once_it_is_free(
    make_app, monkeypatch
):
    # A real lock held by another connection past the busy timeout (shortened here).
    monkeypatch.setattr(database, "BUSY_TIMEOUT_MS", 100)
    app = make_app()
    path = app.config["SQLALCHEMY_DATABASE_URI"].removeprefix("sqlite:///")
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    complete = FakeDriver.complete
    model_calls = []

    def answered_while_locked(driver, prompt):
        model_calls.append(prompt)
        holder.execute("BEGIN IMMEDIATE")
        threading.Timer(1.5, lambda: holder.execute("ROLLBACK")).start()
        return complete(driver, prompt)

    with app.app_context():
        run_uuid, _ = start_build()
        monkeypatch.setattr(FakeDriver, "complete", answered_while_locked)
        try:
            run_step_then_recover()
        finally:
            holder.close()
        run, step = state(run_uuid)
    assert outline_calls(model_calls) == 1
    assert (step.status, step.attempts) == ("completed", 1)
    assert run.status == "completed"
