"""Course-builder throughput: a 200-step run through 4 real consumers on PostgreSQL + Redis.

Figures: steps per second from the run's start to its RUN_FINISHED, and the time
from the last step's finish to RUN_FINISHED (the cost of the final stage change).
The fake driver answers with zero latency, so what is measured is the builder's
own machinery: the step gate, the completion, ``advance()`` and
``dispatch_window()`` under the run lock, and the Huey round trips.

``python -m bench.bench_builder [--quick]``. Settings: BENCH_BUILDER_DATABASE_URL
(default: database ``bench_builder`` on the local server), BENCH_BUILDER_REDIS_URL
(default: Redis db 2).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text

from harness import (
    ProcessPool,
    build_app,
    ensure_postgres_database,
    process_env,
    reset_postgres_schema,
)

DATABASE_URL = os.environ.get(
    "BENCH_BUILDER_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/bench_builder"
)
REDIS_URL = os.environ.get("BENCH_BUILDER_REDIS_URL", "redis://127.0.0.1:6379/2")
CONSUMERS = 4
CONCURRENCY = 8
TARGET_STEPS_PER_SECOND = 50.0
TARGET_FINISH_LAG_MS = 250.0


def _wait_finished(run_uuid: str, timeout: float) -> Any:
    from coursebuilder.models import GenerationRun
    from extensions import db

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        db.session.rollback()
        run = db.session.execute(
            select(GenerationRun).where(GenerationRun.uuid == run_uuid)
        ).scalar_one()
        if run.status != "running":
            return run
        time.sleep(0.05)
    raise TimeoutError(f"builder run {run_uuid} did not finish within {timeout:g} s")


def _reset(db) -> None:
    db.session.execute(
        text(
            "TRUNCATE builder_events, builder_steps, builder_runs, tenants RESTART IDENTITY CASCADE"
        )
    )
    db.session.commit()


def run(quick: bool = False) -> dict:
    """Measure one run of 200 steps (40 when quick) with 4 consumers of the builder queue."""
    from coursebuilder import stages
    from coursebuilder.models import EventKind, GenerationEvent, GenerationStep
    from extensions import db
    from tasks.workers import consumer_command
    from tenancy.models import Tenant

    lessons, quizzes = (10, 10) if quick else (50, 50)
    steps_total = 3 * lessons + quizzes
    ensure_postgres_database(DATABASE_URL)
    # The benchmark owns its database: a schema left by an older migration chain goes.
    reset_postgres_schema(DATABASE_URL)
    workdir = Path(tempfile.mkdtemp(prefix="bench-builder-"))
    app = build_app(
        {
            "SQLALCHEMY_DATABASE_URI": DATABASE_URL,
            "QUEUE_DRIVER": "redis",
            "REDIS_URL": REDIS_URL,
            "SECRET_KEY": "bench",
            "LLM_DRIVER": "fake",
        }
    )
    app.instance_path = str(workdir)
    pool = ProcessPool(process_env(app, LLM_DRIVER="fake", LOG_LEVEL="WARNING"), workdir / "logs")
    try:
        with app.app_context():
            _reset(db)
            app.extensions["queues"].huey("builder").flush()
            db.session.add(Tenant(id=1, name="Bench"))
            db.session.commit()
            for _ in range(CONSUMERS):
                pool.spawn(consumer_command("builder", workers=1), name="builder")
            # Warm-up: every consumer has booted once this small run has finished.
            warm = stages.start(1, "Warm-up", lessons=2, quizzes=2, concurrency=CONSUMERS)
            _wait_finished(warm, timeout=60)

            started = time.perf_counter()
            run_uuid = stages.start(
                1, "Benchmark", lessons=lessons, quizzes=quizzes, concurrency=CONCURRENCY
            )
            finished = _wait_finished(run_uuid, timeout=600)
            wall = time.perf_counter() - started
            assert finished.status == "completed", finished.failure_reason

            last_step = db.session.execute(
                select(func.max(GenerationStep.finished_at)).where(
                    GenerationStep.run_id == finished.id
                )
            ).scalar_one()
            run_finished_at = db.session.execute(
                select(GenerationEvent.at).where(
                    GenerationEvent.run_id == finished.id,
                    GenerationEvent.kind == EventKind.RUN_FINISHED,
                )
            ).scalar_one()
            counted = db.session.execute(
                select(func.count())
                .select_from(GenerationStep)
                .where(GenerationStep.run_id == finished.id, GenerationStep.attempts == 1)
            ).scalar_one()
            assert counted == steps_total, counted
    finally:
        pool.stop_all()

    db_seconds = (finished.finished_at - finished.started_at).total_seconds()
    steps_per_second = steps_total / db_seconds
    lag_ms = (run_finished_at - last_step).total_seconds() * 1000
    return {
        "figures": [
            {
                "name": "builder steps per second",
                "value": round(steps_per_second, 1),
                "unit": "steps/s",
                "target": f">= {TARGET_STEPS_PER_SECOND:g}",
                "ok": steps_per_second >= TARGET_STEPS_PER_SECOND,
            },
            {
                "name": "builder last step finished -> RUN_FINISHED",
                "value": round(lag_ms, 1),
                "unit": "ms",
                "target": f"<= {TARGET_FINISH_LAG_MS:g}",
                "ok": lag_ms <= TARGET_FINISH_LAG_MS,
            },
        ],
        "notes": (
            f"PostgreSQL ledger + RedisHuey, {CONSUMERS} huey_consumer processes x 1 process "
            f"worker on the builder queue, concurrency {CONCURRENCY}, zero-latency fake "
            f"driver; {lessons} lessons and {quizzes} quizzes = {steps_total} steps over 4 "
            f"stages, each stage change one transaction under the run lock. Run wall time "
            f"{wall:.2f} s as seen by the caller (start() to observed completion)."
        ),
    }


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv[1:]), indent=2))
