"""Generation runs executed by 1-4 real ``huey_consumer`` processes on a database queue.

SPEC §13: the run finishes, each stage opens and closes exactly once, no step
runs twice, and the steps running at once never exceed ``concurrency``. Under
``TEST_BACKEND=postgres`` the queue is PostgresHuey and the ledger PostgreSQL;
under ``TEST_BACKEND=sqlite`` the queue is SqliteHuey and the ledger SQLite.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta

import pytest
from sqlalchemy import select

from coursebuilder import stages
from coursebuilder.models import STAGES, GenerationEvent, GenerationRun, GenerationStep
from extensions import db
from tenancy.models import Tenant
from tests.conftest import BACKEND, require_postgres
from tests.support import Consumers, wait_for

pytestmark = pytest.mark.workers

CONCURRENCY = 2
LATENCY_MS = 100
# Each process stamps a step with its own reading of the database's clock (carried
# forward with its monotonic clock), a few milliseconds apart under load: a step claimed
# right after another ended may look begun before it. A step lasts 100 ms: a third at
# once would overlap far longer than this.
SKEW = timedelta(milliseconds=30)


@pytest.fixture
def db_queue_app(make_app):
    """The app on this backend's database queue driver."""
    if BACKEND == "postgres":
        require_postgres()
        return make_app(QUEUE_DRIVER="postgres")
    return make_app()


def finished(run_uuid: str) -> GenerationRun | None:
    db.session.rollback()
    run = db.session.execute(
        select(GenerationRun).where(GenerationRun.uuid == run_uuid)
    ).scalar_one()
    return run if run.status != "running" else None


def max_overlap(intervals: list[tuple]) -> int:
    """The most intervals open at one instant (a finish at t frees its slot before a start at
    t; a finish is taken ``SKEW`` early)."""
    marks = sorted(
        [(start, 1) for start, _ in intervals] + [(end - SKEW, -1) for _, end in intervals],
        key=lambda mark: (mark[0], mark[1]),
    )
    running = peak = 0
    for _, delta in marks:
        running += delta
        peak = max(peak, running)
    return peak


def assert_run_was_clean(run: GenerationRun, lessons: int, quizzes: int) -> None:
    assert run.status == "completed", run.failure_reason
    events = list(
        db.session.execute(
            select(GenerationEvent).where(GenerationEvent.run_id == run.id)
        ).scalars()
    )
    opened = Counter(e.stage for e in events if e.kind == "STAGE_OPENED")
    closed = Counter(e.stage for e in events if e.kind == "STAGE_CLOSED")
    assert opened == Counter(STAGES), opened
    assert closed == Counter(STAGES), closed
    assert sum(e.kind == "RUN_FINISHED" for e in events) == 1

    steps = list(
        db.session.execute(select(GenerationStep).where(GenerationStep.run_id == run.id)).scalars()
    )
    expected = {stage: len(stages.plan(stage, run.options)) for stage in STAGES}
    assert Counter(s.stage for s in steps) == Counter({k: v for k, v in expected.items() if v})
    assert expected["quizzes"] == quizzes and expected["lessons"] == lessons
    assert all(s.status == "completed" and s.attempts == 1 for s in steps)
    step_finished = Counter((e.stage, e.step) for e in events if e.kind == "STEP_FINISHED")
    assert set(step_finished.values()) == {1} and len(step_finished) == len(steps)

    assert max_overlap([(s.started_at, s.finished_at) for s in steps]) <= run.concurrency
    # A stage's steps all finished before the next stage's first step started.
    by_stage = {stage: [s for s in steps if s.stage == stage] for stage in STAGES}
    ran = [stage for stage in STAGES if by_stage[stage]]
    for before, after in zip(ran, ran[1:], strict=False):
        assert max(s.finished_at for s in by_stage[before]) - SKEW <= min(
            s.started_at for s in by_stage[after]
        )


@pytest.mark.parametrize("processes", [1, 2, 3, 4])
def test_runs_finish_with_each_stage_opened_and_closed_once_under_n_consumers(
    db_queue_app, tmp_path, processes
):
    pool = Consumers(db_queue_app, tmp_path)
    try:
        with db_queue_app.app_context():
            db.session.add(Tenant(id=1, name="Acme"))
            db.session.commit()
            fake = {"latency_ms": LATENCY_MS}
            full = stages.start(
                1, "Soil science", lessons=4, quizzes=5, concurrency=CONCURRENCY, fake=fake
            )
            no_quizzes = stages.start(
                1, "Tides", lessons=3, quizzes=0, concurrency=CONCURRENCY, fake=fake
            )
            for _ in range(processes):
                pool.start("builder", workers=1)

            runs = [
                wait_for(lambda u=u: finished(u), timeout=60, message=f"run {u}")
                for u in (full, no_quizzes)
            ]
            assert_run_was_clean(runs[0], lessons=4, quizzes=5)
            assert_run_was_clean(runs[1], lessons=3, quizzes=0)
    finally:
        pool.stop_all()
    assert "Traceback" not in pool.logs()
