"""Several threads call ``advance()`` at once on the same finished stage: one transition.

On PostgreSQL the run lock is ``SELECT … FOR UPDATE``; on SQLite it is the
``BEGIN IMMEDIATE`` write lock. Each thread has its own app context, hence its
own session and connection, as separate workers would.
"""

from __future__ import annotations

import threading
from collections import Counter

import pytest
from sqlalchemy import select, update

from coursebuilder import stages
from coursebuilder.models import STAGES, GenerationEvent, GenerationRun, GenerationStep
from extensions import db
from tenancy.models import Tenant
from tests.conftest import BACKEND, require_postgres

THREADS = 8


@pytest.fixture
def race_app(make_app):
    if BACKEND == "postgres":
        require_postgres()
    return make_app()


def finish_open_stage(run_id: int) -> None:
    run = db.session.get(GenerationRun, run_id)
    db.session.execute(
        update(GenerationStep)
        .where(GenerationStep.run_id == run_id, GenerationStep.stage == run.stage)
        .values(
            status="completed", attempts=1, started_at=run.started_at, finished_at=run.started_at
        )
    )
    db.session.commit()


def advance_from_threads(app, run_id: int) -> list:
    barrier = threading.Barrier(THREADS)
    results: list = []
    errors: list = []

    def worker() -> None:
        with app.app_context():
            barrier.wait()
            try:
                results.append(stages.advance(run_id))
            except Exception as exc:  # surfaced below, with the thread's exception
                errors.append(exc)
            finally:
                db.session.remove()

    threads = [threading.Thread(target=worker) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert not errors, errors
    return results


@pytest.mark.parametrize("quizzes", [2, 0])
def test_concurrent_advance_on_a_finished_stage_makes_exactly_one_transition(race_app, quizzes):
    with race_app.app_context():
        db.session.add(Tenant(id=7, name="Globex"))
        db.session.commit()
        run_uuid = stages.start(7, "Volcanoes", lessons=2, quizzes=quizzes, concurrency=1)
        run_id = db.session.execute(
            select(GenerationRun.id).where(GenerationRun.uuid == run_uuid)
        ).scalar_one()

        stages_with_steps = 4 if quizzes else 3
        for round_ in range(stages_with_steps - 1):  # up to the last stage, open
            finish_open_stage(run_id)
            transitions = [r for r in advance_from_threads(race_app, run_id) if r is not None]
            assert len(transitions) == 1, f"round {round_}: {transitions}"
            assert transitions[0].opened is not None

        db.session.rollback()
        # Only the owner of a transition dispatched: the window (1) holds one queued step.
        queued = (
            db.session.execute(
                select(GenerationStep).where(
                    GenerationStep.run_id == run_id, GenerationStep.status == "queued"
                )
            )
            .scalars()
            .all()
        )
        assert [step.stage for step in queued] == ["review"]

        finish_open_stage(run_id)
        transitions = [r for r in advance_from_threads(race_app, run_id) if r is not None]
        assert len(transitions) == 1 and transitions[0].finished

        db.session.rollback()
        assert db.session.get(GenerationRun, run_id).status == "completed"
        events = list(
            db.session.execute(
                select(GenerationEvent).where(GenerationEvent.run_id == run_id)
            ).scalars()
        )
        assert Counter(e.stage for e in events if e.kind == "STAGE_OPENED") == Counter(STAGES)
        assert Counter(e.stage for e in events if e.kind == "STAGE_CLOSED") == Counter(STAGES)
        assert sum(e.kind == "RUN_FINISHED" for e in events) == 1
        steps = Counter(
            s.stage
            for s in db.session.execute(
                select(GenerationStep).where(GenerationStep.run_id == run_id)
            ).scalars()
        )
        assert steps == Counter(
            {"outline": 2, "lessons": 2, "review": 2, **({"quizzes": 2} if quizzes else {})}
        )
