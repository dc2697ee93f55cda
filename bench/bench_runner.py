"""The task runner against bare Huey, side by side on PostgreSQL + Redis.

Measured in one run, on the same Redis, database and consumer settings (the
production ``tasks`` consumer: ``-k process -w 2``):

- bare Huey: enqueue rate and drain rate of no-op tasks, and the drain rate of
  tasks doing the wrapper's two statements per unit (``bench/bare_huey.py``);
- ours: dispatch rate of a run's units, and completion rate of tracked no-op
  units (``diagnostics.probe``), as ratios to the bare figures; beside them, the
  ceiling the two statements leave (bare with them / bare no-op);
- a 100,000-unit run: time to persist, time to dispatch, time until the first
  unit runs (consumers already waiting);
- finalization cost per unit at the end of a 1,000- and a 100,000-unit run.

Database ``BENCH_RUNNER_DATABASE_URL`` (default ``…/bench_runner``, created and
reset by the benchmark) and ``BENCH_RUNNER_REDIS_URL`` (default db 6).
Run alone: ``python -m bench.bench_runner [--quick] [--json]``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from flask import Flask
from sqlalchemy import func, select, text

from bench.figures import print_figures
from harness import (
    ProcessPool,
    fresh_postgres_app,
    huey_consumer,
    process_env,
    wait_for,
)

DATABASE_URL = os.environ.get(
    "BENCH_RUNNER_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/bench_runner"
)
REDIS_URL = os.environ.get("BENCH_RUNNER_REDIS_URL", "redis://127.0.0.1:6379/6")
WORKERS = 2
FINALIZE_SAMPLES = 200


def figure(
    name: str, value: float, unit: str, target: str = "", ok: bool | None = None, digits: int = 3
) -> dict[str, Any]:
    return {"name": name, "value": round(value, digits), "unit": unit, "target": target, "ok": ok}


class RunnerBench:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.n = 2_000 if quick else 10_000
        self.big = 20_000 if quick else 100_000
        self.log_dir = Path(tempfile.mkdtemp(prefix="bench-runner-"))
        self.app = self._app()
        self.pool = ProcessPool(process_env(self.app), self.log_dir)
        self.values: dict[str, float] = {}

    def _app(self) -> Flask:
        app = fresh_postgres_app(
            DATABASE_URL, self.log_dir, QUEUE_DRIVER="redis", REDIS_URL=REDIS_URL
        )
        os.environ["BENCH_BARE_REDIS_URL"] = REDIS_URL
        from bench import bare_huey

        self.bare_tasks = bare_huey
        with app.app_context():
            from extensions import db

            for statement in bare_huey.CREATE_TABLES:
                db.session.execute(text(statement))
            db.session.commit()
            self.ours = app.extensions["queues"].huey("tasks")
            self.ours.flush()
        self.bare = bare_huey.huey
        self.bare.flush()
        return app

    # -- measuring ---------------------------------------------------------------------

    def measure(self) -> dict[str, Any]:
        try:
            with self.app.app_context():
                self._bare_noop()
                self._bare_transactions()
                self._tracked()
                self._big_run()
                self._finalization()
        finally:
            self.pool.stop_all()
            with self.app.app_context():
                self.ours.flush()
            self.bare.flush()
        return self._report()

    def _drain(self, huey, n: int, command: list[str], done: Callable[[], bool]) -> float:
        """Units per second from the first dequeue until ``done``, on one fresh consumer."""
        assert huey.pending_count() == n, "the queue must hold exactly the measured tasks"
        process = self.pool.spawn(command, name="consumer")

        def dequeued() -> tuple[int] | None:
            waiting = huey.pending_count()
            return (waiting,) if waiting < n else None

        (left,) = wait_for(dequeued, timeout=120, interval=0.002, message="the first dequeue")
        began = time.perf_counter()
        wait_for(done, timeout=900, interval=0.005, message="the drain")
        elapsed = time.perf_counter() - began
        self.pool.stop(process)
        return left / elapsed

    def _bare_noop(self) -> None:
        token = uuid.uuid4().hex
        horizon = time.time() + 6 * 3600
        began = time.perf_counter()
        for i in range(self.n):
            self.bare_tasks.noop(1, i, token, horizon)
        self.values["bare_enqueue"] = self.n / (time.perf_counter() - began)
        self.values["bare_noop_drain"] = self._drain(
            self.bare,
            self.n,
            huey_consumer("bench.bare_huey.huey", WORKERS),
            lambda: self.bare.pending_count() == 0,
        )

    def _bare_transactions(self) -> None:
        from extensions import db

        token = uuid.uuid4().hex
        run_id = 1_000_000 + int(time.time())
        db.session.execute(
            text(
                "INSERT INTO bench_runs (id, uuid, type, status, initiator, context, units_total, "
                "units_completed, units_failed, units_skipped, started_at, created_at, updated_at) "
                "VALUES (:id, :uuid, 'bench.bare', 'running', 'bench', '{}', :n, 0, 0, 0, "
                "now(), now(), now())"
            ),
            {"id": run_id, "uuid": str(uuid.uuid4()), "n": self.n},
        )
        first = (
            db.session.execute(
                text(
                    "INSERT INTO bench_units (task_run_id, unit_key, status, attempts, "
                    "dispatch_token, queued_at, created_at, updated_at) "
                    "SELECT :run, 'bare-' || i, 'pending', 0, :token, now(), now(), now() "
                    "FROM generate_series(1, :n) AS i RETURNING id"
                ),
                {"run": run_id, "token": token, "n": self.n},
            )
            .scalars()
            .all()
        )
        db.session.execute(text("ANALYZE bench_units"))
        db.session.commit()
        horizon = time.time() + 6 * 3600
        for unit_id in first:
            self.bare_tasks.transactions(run_id, unit_id, token, horizon)

        def all_completed() -> bool:
            done = db.session.execute(
                text(
                    "SELECT count(*) FROM bench_units WHERE task_run_id = :run "
                    "AND status = 'completed'"
                ),
                {"run": run_id},
            ).scalar_one()
            db.session.rollback()
            return done == self.n

        self.values["bare_tx_drain"] = self._drain(
            self.bare, self.n, huey_consumer("bench.bare_huey.huey", WORKERS), all_completed
        )

    def _tracked(self) -> None:
        from diagnostics.probe import TYPE, ProbeTask
        from taskrunner import dispatch as dispatching
        from taskrunner.ledger import ledger

        context = {"units": self.n}
        dispatch = ledger.transitions.create_run(
            TYPE,
            context,
            "bench",
            ProbeTask().units(context),
            self.app.config["TASK_RUNNER_INSERT_CHUNK"],
        )
        analyze()
        began = time.perf_counter()
        sent = dispatching.enqueue_dispatch(dispatch)
        self.values["tracked_dispatch"] = sent / (time.perf_counter() - began)

        def closed() -> bool:
            ledger.session.rollback()
            return ledger.runs.get_run(dispatch.run_uuid).status != "running"

        self.values["tracked_completion"] = self._drain(
            self.ours, self.n, huey_consumer("tasks.consumer.tasks", WORKERS), closed
        )
        ledger.session.rollback()
        run = ledger.runs.get_run(dispatch.run_uuid)
        assert (run.status, run.units_completed) == ("completed", self.n), run.status

    def _big_run(self) -> None:
        from database import utcnow
        from diagnostics.effects import TYPE, DiagnosticEffect, EffectsTask, effect_summary
        from diagnostics.probe import ProbeTask
        from extensions import db
        from taskrunner import dispatch as dispatching
        from taskrunner.ledger import ledger

        # Consumers up and idle first: the figure is the runner's latency, not a boot.
        self.pool.spawn(huey_consumer("tasks.consumer.tasks", WORKERS), name="consumer")
        warmup = ledger.transitions.create_run(
            "diagnostics.probe", {"units": 4}, "bench", ProbeTask().units({"units": 4}), 1000
        )
        dispatching.enqueue_dispatch(warmup)
        wait_for(
            lambda: _closed(warmup.run_uuid), timeout=60, interval=0.05, message="the warm-up run"
        )

        batch = uuid.uuid4().hex
        context = {"units": self.big, "batch": batch}
        began = time.perf_counter()
        dispatch = ledger.transitions.create_run(
            TYPE,
            context,
            "bench",
            EffectsTask().units(context),
            self.app.config["TASK_RUNNER_INSERT_CHUNK"],
        )
        persisted_at = utcnow()
        self.values["big_persist"] = time.perf_counter() - began
        began = time.perf_counter()
        dispatching.enqueue_dispatch(dispatch)
        self.values["big_dispatch"] = time.perf_counter() - began

        def first_effect() -> datetime | None:
            first = db.session.execute(
                select(func.min(DiagnosticEffect.first_at)).where(DiagnosticEffect.batch == batch)
            ).scalar_one()
            db.session.rollback()
            return first

        first = wait_for(
            first_effect, timeout=60, interval=0.01, message="the first unit of the big run"
        )
        self.values["big_first_unit"] = (first - persisted_at).total_seconds()
        self.values["big_ran_meanwhile"] = effect_summary(batch)["rows"]
        self.pool.stop_all()
        self.ours.flush()

    def _finalization(self) -> None:
        sizes = (1_000, self.big)
        costs = finalization_costs(sizes, self.app.config["TASK_RUNNER_INSERT_CHUNK"])
        for n, (check, close) in zip(sizes, costs, strict=True):
            self.values[f"final_check_{n}"] = check
            self.values[f"final_close_{n}"] = close
            self.values[f"final_per_unit_{n}"] = check + close / n

    # -- the figures ---------------------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        v = self.values
        dispatch_ratio = v["tracked_dispatch"] / v["bare_enqueue"]
        completion_ratio = v["tracked_completion"] / v["bare_tx_drain"]
        small, big = v["final_per_unit_1000"], v[f"final_per_unit_{self.big}"]
        big_label = f"{self.big:,}"
        figures = [
            figure("bare Huey enqueue, no-op tasks", v["bare_enqueue"], "tasks/s", digits=0),
            figure("bare Huey drain, no-op tasks", v["bare_noop_drain"], "tasks/s", digits=0),
            figure(
                "bare Huey drain, the wrapper's transactions per task",
                v["bare_tx_drain"],
                "tasks/s",
                digits=0,
            ),
            figure("tracked dispatch", v["tracked_dispatch"], "units/s", digits=0),
            figure(
                "tracked dispatch / bare enqueue",
                dispatch_ratio * 100,
                "%",
                "≥ 80 %",
                dispatch_ratio >= 0.8,
                digits=1,
            ),
            figure("tracked completion, no-op units", v["tracked_completion"], "units/s", digits=0),
            figure(
                "tracked completion / bare with the same transactions",
                completion_ratio * 100,
                "%",
                "≥ 60 %",
                completion_ratio >= 0.6,
                digits=1,
            ),
            figure(
                "tracked completion / bare no-op drain",
                v["tracked_completion"] / v["bare_noop_drain"] * 100,
                "%",
                "≥ 50 %",
                v["tracked_completion"] / v["bare_noop_drain"] >= 0.5,
                digits=1,
            ),
            # What the two statements alone allow: bare Huey paying them, with no wrapper,
            # against its no-op drain. Tracked completion cannot pass it by much.
            figure(
                "ceiling: bare with the same transactions / bare no-op drain",
                v["bare_tx_drain"] / v["bare_noop_drain"] * 100,
                "%",
                digits=1,
            ),
            figure(
                f"{big_label}-unit run: persisted",
                v["big_persist"],
                "s",
                "≤ 5 s",
                v["big_persist"] <= 5.0 if self.big == 100_000 else None,
            ),
            figure(f"{big_label}-unit run: dispatched", v["big_dispatch"], "s"),
            figure(
                f"{big_label}-unit run: first unit ran, after persisted",
                v["big_first_unit"],
                "s",
                "≤ 1 s",
                v["big_first_unit"] <= 1.0,
            ),
            figure(
                "finalization check, 1,000-unit run", v["final_check_1000"] * 1e6, "µs", digits=0
            ),
            figure(
                f"finalization check, {big_label}-unit run",
                v[f"final_check_{self.big}"] * 1e6,
                "µs",
                digits=0,
            ),
            figure("closing recount, 1,000-unit run", v["final_close_1000"] * 1e3, "ms", digits=1),
            figure(
                f"closing recount, {big_label}-unit run",
                v[f"final_close_{self.big}"] * 1e3,
                "ms",
                digits=1,
            ),
            *flat_finalization(small, big, big_label),
        ]
        notes = (
            f"{self.n:,} tasks per rate; consumers `-k process -w {WORKERS}` on Redis, the "
            f"ledger on PostgreSQL; {v['big_ran_meanwhile']:,} units of the big run had run "
            "by the time its first unit was seen. Finalization: the median existence check "
            f"over the last {FINALIZE_SAMPLES} units of a run, plus the one closing recount "
            "shared by all its units. Logs: " + str(self.log_dir)
        )
        return {"figures": figures, "notes": notes}


def _closed(run_uuid: str) -> bool:
    from taskrunner.ledger import ledger

    ledger.session.rollback()
    return ledger.runs.get_run(run_uuid).status != "running"


def analyze() -> None:
    """What autovacuum does after a big insert (this benchmark's server may run without it)."""
    from extensions import db

    db.session.execute(text("ANALYZE task_runs, task_run_units, diagnostic_effects"))
    db.session.commit()


def flat_finalization(small: float, big: float, big_label: str) -> list[dict[str, Any]]:
    """Finalization's cost per unit at 1,000 units and at ``big_label`` units, and their
    ratio against its target (flat: within 1.25×)."""
    return [
        figure("finalization per unit, 1,000-unit run", small * 1e6, "µs", digits=0),
        figure(f"finalization per unit, {big_label}-unit run", big * 1e6, "µs", digits=0),
        figure(
            f"finalization per unit, {big_label} / 1,000",
            big / small,
            "×",
            "≤ 1.25 ×",
            big / small <= 1.25,
            digits=2,
        ),
    ]


def finalization_costs(sizes: tuple[int, ...], chunk: int) -> list[tuple[float, float]]:
    """Per run size: (median check while units remain, the closing call) at a run's tail.

    Each run is brought to its tail through the ledger itself: its last
    ``FINALIZE_SAMPLES`` units are held back (they pass the gate and are handed back,
    pending again) and every other unit is settled at once. Then the held-back units
    run one by one as a worker would (gate, complete, finalize), the runs taking turns
    unit by unit so that both sizes are timed under the same load.
    """
    from diagnostics.probe import TYPE, ProbeTask
    from taskrunner.ledger import ledger

    tails = []
    for n in sizes:
        context = {"units": n}
        dispatch = ledger.transitions.create_run(
            TYPE, context, "bench", ProbeTask().units(context), chunk
        )
        # Statistics as autovacuum would leave them after the insert: by the run's tail
        # they are stale (every unit pending), the planner's worst case.
        analyze()
        held = ledger.transitions.dispatch_batch(dispatch, 0, n)[-FINALIZE_SAMPLES:]
        for unit_id in held:
            ledger.transitions.claim(unit_id, dispatch.token)
        ledger.transitions.fail_undispatched(dispatch.run_id, "bench: settled in bulk")
        tokens = [ledger.transitions.hand_back(unit_id, dispatch.token)[0] for unit_id in held]
        tails.append((dispatch, list(zip(held, tokens, strict=True)), []))
    for turn in range(FINALIZE_SAMPLES):
        for dispatch, units, timings in tails:
            unit_id, token = units[turn]
            ledger.transitions.complete(ledger.transitions.claim(unit_id, token))
            began = time.perf_counter()
            ledger.transitions.finalize(dispatch.run_id)
            timings.append(time.perf_counter() - began)
    costs = []
    for dispatch, _units, timings in tails:
        ledger.session.rollback()
        assert ledger.runs.get_run(dispatch.run_uuid).status != "running"
        costs.append((statistics.median(timings[:-1]), timings[-1]))
    ledger.session.rollback()
    return costs


def run(quick: bool = False) -> dict[str, Any]:
    return RunnerBench(quick).measure()


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    print_figures(result)
    if "--json" in sys.argv:
        print(json.dumps(result, indent=2))
