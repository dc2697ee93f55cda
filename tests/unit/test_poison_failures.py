"""Failures whose reason cannot be stored as it is still end ``failed`` (issue 23, item 4).

A domain error whose ``__str__`` raises, a message with a NUL byte (PostgreSQL refuses it
in text and JSON), a lone surrogate (no driver encodes it), other control characters;
and a reason the database refuses outright. Before, the failure could not be written:
the exception escaped the unit job and the unit stayed ``running`` forever, each retry
adding an attempt. Now redaction always yields a text, stored text is sanitised in every
column and event payload, and a reason the database refuses is replaced by a fixed one.

Unit jobs run through Huey's own ``execute`` on the test's real queue backend (SqliteHuey,
or RedisHuey next to PostgreSQL), in this process; so do the single tracked job's
attempts; the course builder's steps run inline.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from sqlalchemy import select, text

from coursebuilder import stages
from coursebuilder.llm import FakeDriver
from coursebuilder.models import GenerationRun, GenerationStep
from documents.forwarding import FORWARD, forward
from extensions import db
from taskrunner import runner
from taskrunner.contract import TaskOptions, TaskReportableError, TaskUnit, UnitJob, subscribe
from taskrunner.ledger import ledger
from taskrunner.models import OutboxEvent
from taskrunner.redaction import UNSTORABLE
from taskrunner.single import execute_attempt
from tasks.queues import queues
from tenancy.models import Tenant
from tests.support import drain

POISONED = "tests.poisoned"
REFUSED_MARK = "refused by the database"


class UnreadableError(TaskReportableError):
    """A domain error whose message cannot even be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message today")


def poison(kind: str) -> BaseException:
    return {
        "unreadable": lambda: UnreadableError("x"),
        "nul": lambda: TaskReportableError("tenant 7\x00 declined\x00"),
        "surrogate": lambda: TaskReportableError("tenant 7 \udc9f declined"),
        "controls": lambda: TaskReportableError("bell\x07 escape\x1b[31m CR\r\nnext\tline\x85"),
        "refused": lambda: TaskReportableError(f"tenant 7: {REFUSED_MARK}"),
    }[kind]()


# What each poison leaves, wherever its reason is stored.
STORED = {
    "unreadable": "UnreadableError (its message could not be read)",
    "nul": "tenant 7 declined",
    "surrogate": "tenant 7 \ufffd declined",
    "controls": "bell escape[31m CR\nnext\tline",
    "refused": UNSTORABLE,
}
KINDS = sorted(STORED)


class PoisonedTask:
    """Units ``p1..pN``; each raises ``poison(context["kind"])``."""

    def type(self) -> str:
        return POISONED

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for i in range(1, int(context.get("units", 1)) + 1):
            yield TaskUnit(f"p{i}")

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        def job() -> None:
            raise poison(context["kind"])

        return job

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=30, timeout=60)


@pytest.fixture
def refusing_database(app):
    """The database refuses any stored text carrying ``REFUSED_MARK`` (a trigger of its own),
    in the unit, builder and delivery tables; dropped afterwards whatever happens."""
    tables = ("task_run_units", "builder_runs", "builder_steps")
    columns = {"task_run_units": "last_error", "builder_runs": "failure_reason"}
    columns["builder_steps"] = "error"
    with app.app_context():
        postgres = db.engine.dialect.name == "postgresql"
        if postgres:
            for table, column in columns.items():
                db.session.execute(
                    text(
                        f"CREATE FUNCTION refuse_{table}() RETURNS trigger AS $$ BEGIN "
                        f"IF NEW.{column} LIKE '%{REFUSED_MARK}%' THEN "
                        f"RAISE EXCEPTION 'stored text refused'; END IF; RETURN NEW; END "
                        f"$$ LANGUAGE plpgsql"
                    )
                )
                db.session.execute(
                    text(
                        f"CREATE TRIGGER refuse_{table} BEFORE UPDATE ON {table} "
                        f"FOR EACH ROW EXECUTE FUNCTION refuse_{table}()"
                    )
                )
        else:
            for table, column in columns.items():
                db.session.execute(
                    text(
                        f"CREATE TRIGGER refuse_{table} BEFORE UPDATE ON {table} "
                        f"WHEN NEW.{column} LIKE '%{REFUSED_MARK}%' "
                        f"BEGIN SELECT RAISE(ABORT, 'stored text refused'); END"
                    )
                )
        db.session.commit()
    try:
        yield
    finally:
        with app.app_context():
            db.session.rollback()
            for table in tables:
                db.session.execute(
                    text(
                        f"DROP TRIGGER IF EXISTS refuse_{table}"
                        + (f" ON {table}" if postgres else "")
                    )
                )
                if postgres:
                    db.session.execute(text(f"DROP FUNCTION IF EXISTS refuse_{table}()"))
            db.session.commit()


@pytest.fixture
def poisoned(app, make_app, refusing_database):
    make_app.register(PoisonedTask())
    taken: list[Mapping[str, Any]] = []
    with app.app_context():
        subscribe("tasks.unit.failed", taken.append)
        yield taken


@pytest.mark.parametrize("kind", KINDS)
def test_a_unit_whose_failure_holds_poison_still_ends_failed(poisoned, kind):
    handle = runner.start(POISONED, {"kind": kind, "units": 2}, "test")

    assert drain() == 2

    db.session.rollback()
    run = ledger.runs.get_run(handle.uuid)
    units = ledger.runs.run_units_page(run).items
    assert {(u["status"], u["attempts"], u["last_error"]) for u in units} == {
        ("failed", 1, STORED[kind])
    }
    assert (run.status, run.units_failed) == ("failed", 2)
    payloads = db.session.execute(
        select(OutboxEvent.payload).where(OutboxEvent.name == "tasks.unit.failed")
    ).scalars()
    assert {p["reason"] for p in payloads} == {STORED[kind]}
    assert {event["payload"]["reason"] for event in poisoned} == {STORED[kind]}


@pytest.mark.parametrize("kind", KINDS)
def test_a_single_tracked_jobs_poisoned_attempts_are_recorded_and_its_last_fails_it(
    app, refusing_database, kind
):
    with app.app_context():
        forward("00000000-0000-4000-8000-00000000d0c5")
        task = queues().huey("default").dequeue()
        assert task.name == FORWARD and task.retries
        unit = TaskUnit("document-poisoned", 1)

        def attempt() -> None:
            raise poison(kind)

        # An attempt with retries left: recorded, handed back to Huey to retry.
        with pytest.raises(type(poison(kind))):
            execute_attempt(FORWARD, unit, task, attempt, "queue")
        [run] = ledger.single_jobs.single_runs(FORWARD, unit.key)
        [pending] = ledger.runs.run_units_page(run).items
        assert (pending["status"], pending["attempts"]) == ("pending", 1)
        assert pending["last_error"] == STORED[kind]

        # The last attempt: the unit fails, and the run closes.
        task.retries = 0
        with pytest.raises(type(poison(kind))):
            execute_attempt(FORWARD, unit, task, attempt, "queue")
        db.session.rollback()
        [run] = ledger.single_jobs.single_runs(FORWARD, unit.key)
        [failed] = ledger.runs.run_units_page(run).items
        assert (failed["status"], failed["attempts"], run.status) == ("failed", 2, "failed")
        assert failed["last_error"] == STORED[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_a_builder_step_whose_failure_holds_poison_fails_its_run(
    inline_app, refusing_database, monkeypatch, kind
):
    def poisoned_step(self, prompt):
        raise poison(kind)

    monkeypatch.setattr(FakeDriver, "complete", poisoned_step)
    with inline_app.app_context():
        db.session.add(Tenant(id=1, name="Tenant 1"))
        db.session.commit()
        run_uuid = stages.start(1, "Tides", lessons=1, quizzes=0)

        db.session.rollback()
        run = db.session.execute(
            select(GenerationRun).where(GenerationRun.uuid == run_uuid)
        ).scalar_one()
        steps = db.session.execute(
            select(GenerationStep.status).where(GenerationStep.run_id == run.id)
        ).scalars()
        assert run.status == "failed"
        assert "running" not in set(steps)
        expected = (
            UNSTORABLE if kind == "refused" else f"step outline/outline-1 failed: {STORED[kind]}"
        )
        assert run.failure_reason == expected
