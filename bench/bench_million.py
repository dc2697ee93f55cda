"""A million-unit run on PostgreSQL + Redis, from its start to its prune.

One run of ``diagnostics.effects`` (1,000,000 units; 100,000 with ``--quick``) started by
a process of its own, as ``flask tasks start`` would (``start_run`` through the contract),
while consumers (``-k process -w 2``) wait on the queue:

- persisted: from the call of ``start_run`` until the run is visible (its one transaction
  committed), polled every few milliseconds from here;
- the first unit running after it is persisted (its ``diagnostic_effects.first_at``);
- the peak RSS of the starting process, sampled throughout (persisting and dispatching);
- the run page's p95 while the consumers run it (the Flask test client, signed in);
- finalization per unit at the size of the run against a 1,000-unit run
  (``bench_runner.finalization_costs``: the same method, the same tail);
- the run cancelled (``runner.cancel``, as the operator's button) and then pruned with the
  product's prune (``runner.prune``, what ``flask tasks prune --days 0`` runs): units
  deleted per second, with the queues' leftovers cleared.

Database ``BENCH_MILLION_DATABASE_URL`` (default ``…/bench_million``, created and reset by
the benchmark) and ``BENCH_MILLION_REDIS_URL`` (default db 9).
Run alone: ``python -m bench.bench_million [--quick] [--json]``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import func, select, text

from bench.bench_runner import analyze, figure, finalization_costs, flat_finalization
from bench.figures import percentile, print_figures
from harness import ProcessPool, fresh_postgres_app, huey_consumer, process_env, wait_for

DATABASE_URL = os.environ.get(
    "BENCH_MILLION_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/bench_million"
)
REDIS_URL = os.environ.get("BENCH_MILLION_REDIS_URL", "redis://127.0.0.1:6379/9")
WORKERS = 2
PAGE_REQUESTS = 50
RSS_LIMIT_MB = 250
TYPE = "diagnostics.effects"


class PeakRss:
    """The peak resident set of a process (the kernel's ``VmHWM``), read until it exits."""

    def __init__(self, pid: int, interval: float = 0.01) -> None:
        self.pid = pid
        self.interval = interval
        self.peak_kb = 0
        self.samples = 0
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        path = Path(f"/proc/{self.pid}/status")
        while True:
            try:
                status = path.read_text()
            except OSError:
                return  # it exited: the last sample holds its peak so far
            for line in status.splitlines():
                if line.startswith(("VmHWM:", "VmRSS:")):
                    self.peak_kb = max(self.peak_kb, int(line.split()[1]))
            self.samples += 1
            time.sleep(self.interval)

    def join(self) -> float:
        self._thread.join(timeout=5)
        return self.peak_kb / 1024


class MillionBench:
    def __init__(self, quick: bool) -> None:
        self.n = 100_000 if quick else 1_000_000
        self.log_dir = Path(tempfile.mkdtemp(prefix="bench-million-"))
        self.app = fresh_postgres_app(
            DATABASE_URL,
            self.log_dir,
            QUEUE_DRIVER="redis",
            REDIS_URL=REDIS_URL,
            WTF_CSRF_ENABLED=False,
        )
        self.pool = ProcessPool(process_env(self.app), self.log_dir)
        self.values: dict[str, float] = {}

    def measure(self) -> dict[str, Any]:
        try:
            with self.app.app_context():
                from accounts.permissions import PERMISSIONS
                from accounts.services import create_user

                create_user("bench@example.com", "bench password", PERMISSIONS)
                self.queue = self.app.extensions["queues"].huey("tasks")
                self.queue.flush()
                self._big_run()
                self._finalization()
                self._prune()
        finally:
            self.pool.stop_all()
            with self.app.app_context():
                self.queue.flush()
        return self._report()

    # -- the run, from its start ------------------------------------------------------

    def _big_run(self) -> None:
        from database import utcnow
        from extensions import db

        self.pool.spawn(huey_consumer("tasks.consumer.tasks", WORKERS), name="consumer")
        self._warm_up()
        batch = uuid.uuid4().hex
        context = {"units": self.n, "batch": batch}
        starter = self.pool.spawn(
            [sys.executable, "-m", "bench.bench_million", "--start", json.dumps(context)],
            name="starter",
        )
        rss = PeakRss(starter.pid)
        called = wait_for(
            lambda: _line_of(starter, "calling"), timeout=60, interval=0.005, message="the call"
        )
        run_uuid = wait_for(
            lambda: self._visible(batch), timeout=300, interval=0.005, message="the run's commit"
        )
        persisted = time.time()
        persisted_at = utcnow()  # the clock the units' first_at is written with
        self.values["persist"] = persisted - called
        # What autovacuum does after a big insert (this benchmark's server runs without
        # it): planned on the statistics of an empty table, every unit took seconds.
        analyze()
        first = wait_for(
            lambda: self._first_effect(batch), timeout=120, interval=0.01, message="a first unit"
        )
        self.values["first_unit"] = (first - persisted_at).total_seconds()
        self.run_uuid = run_uuid
        self.values.update(self._run_page(run_uuid))
        starter.wait(timeout=900)
        assert starter.returncode == 0, self.pool.log_of(starter)
        returned = _line_of(starter, "returned")
        self.values["dispatched"] = returned - called
        self.values["start_rss"] = rss.join()
        self.values["rss_samples"] = rss.samples
        self.values["ran"] = db.session.execute(
            text("SELECT count(*) FROM task_run_units WHERE status = 'completed'")
        ).scalar_one()
        db.session.rollback()
        self.pool.stop_all()
        from taskrunner import runner

        began = time.perf_counter()
        self.values["skipped"] = runner.cancel(run_uuid)
        self.values["cancel"] = time.perf_counter() - began

    def _warm_up(self) -> None:
        from taskrunner import runner

        handle = runner.start(TYPE, {"units": 4, "batch": "warm-up"}, "bench")
        wait_for(lambda: _closed(handle.uuid), timeout=60, interval=0.05, message="the warm-up")

    def _visible(self, batch: str) -> str | None:
        from extensions import db

        found = db.session.execute(
            text("SELECT uuid FROM task_runs WHERE context ->> 'batch' = :batch"),
            {"batch": batch},
        ).scalar_one_or_none()
        db.session.rollback()
        return found

    def _first_effect(self, batch: str) -> datetime | None:
        from diagnostics.effects import DiagnosticEffect
        from extensions import db

        first = db.session.execute(
            select(func.min(DiagnosticEffect.first_at)).where(DiagnosticEffect.batch == batch)
        ).scalar_one()
        db.session.rollback()
        return first

    def _run_page(self, run_uuid: str) -> dict[str, float]:
        client = self.app.test_client()
        response = client.post(
            "/login", data={"email": "bench@example.com", "password": "bench password"}
        )
        assert response.status_code == 302, response.status_code
        path = f"/backoffice/task-runs/{run_uuid}"
        samples = []
        for attempt in range(3 + PAGE_REQUESTS):
            began = time.perf_counter()
            response = client.get(path)
            if attempt >= 3:
                samples.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, response.status_code
        return {"page_p95": percentile(samples, 0.95), "page_p50": percentile(samples, 0.5)}

    # -- finalization and prune -------------------------------------------------------

    def _finalization(self) -> None:
        analyze()
        sizes = (1_000, self.n)
        costs = finalization_costs(sizes, self.app.config["TASK_RUNNER_INSERT_CHUNK"])
        for size, (check, close) in zip(sizes, costs, strict=True):
            self.values[f"final_per_unit_{size}"] = check + close / size

    def _prune(self) -> None:
        from taskrunner import runner

        began = time.perf_counter()
        report = runner.prune(days=0)
        self.values["prune"] = time.perf_counter() - began
        self.values["pruned_units"] = report.units
        self.values["queue_keys"] = report.queue_keys

    # -- the figures ------------------------------------------------------------------

    def _report(self) -> dict[str, Any]:
        v = self.values
        label = f"{self.n:,}-unit run"
        full = self.n == 1_000_000
        small, big = v["final_per_unit_1000"], v[f"final_per_unit_{self.n}"]
        prune_rate = v["pruned_units"] / v["prune"]
        figures = [
            figure(
                f"{label}: persisted",
                v["persist"],
                "s",
                "≤ 15 s",
                v["persist"] <= 15.0 if full else None,
            ),
            figure(
                f"{label}: first unit running, after persisted",
                v["first_unit"],
                "s",
                "≤ 1 s",
                v["first_unit"] <= 1.0,
            ),
            figure(f"{label}: persisted and dispatched", v["dispatched"], "s"),
            figure(
                f"{label}: starting process, peak RSS",
                v["start_rss"],
                "MB",
                f"< {RSS_LIMIT_MB} MB",
                v["start_rss"] < RSS_LIMIT_MB,
                digits=0,
            ),
            figure(
                f"{label}: run page p95 while it runs",
                v["page_p95"],
                "ms",
                "≤ 100 ms",
                v["page_p95"] <= 100,
                digits=1,
            ),
            figure(f"{label}: run page p50 while it runs", v["page_p50"], "ms", digits=1),
            *flat_finalization(small, big, f"{self.n:,}"),
            figure(f"{label}: cancelled", v["cancel"], "s"),
            figure("prune of the cancelled run and the finalization runs", v["prune"], "s"),
            figure(
                "prune, units deleted per second",
                prune_rate,
                "units/s",
                "≥ 50,000 units/s",
                prune_rate >= 50_000,
                digits=0,
            ),
        ]
        notes = (
            f"PostgreSQL ledger, Redis queues; consumers `-k process -w {WORKERS}`. The run "
            "was started by a process of its own (`start_run`, as `flask tasks start`), its "
            f"RSS sampled {int(v['rss_samples']):,} times until it exited; persisted = its "
            "call until the run's row is visible (polled every 5 ms), then ANALYZE as "
            "autovacuum would (the server runs without it). "
            f"{PAGE_REQUESTS} signed-in requests of the run page through the Flask test "
            f"client while consumers ran it; {int(v['ran']):,} units had run when the "
            f"starter exited, {int(v['skipped']):,} were skipped by the cancel. Finalization "
            "as in bench_runner (the last 200 units of a fresh run of each size). Prune: "
            f"`runner.prune(days=0)`, {int(v['pruned_units']):,} units and "
            f"{int(v['queue_keys']):,} queue leftovers. Logs: {self.log_dir}"
        )
        return {"figures": figures, "notes": notes}


def _closed(run_uuid: str) -> bool:
    from taskrunner.ledger import ledger

    ledger.session.rollback()
    return ledger.runs.get_run(run_uuid).status != "running"


def _line_of(process: Any, key: str) -> float | None:
    """The time the starter printed under ``key`` (its log is line-buffered JSON)."""
    for line in Path(process.log_path).read_text(errors="replace").splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            if key in record:
                return float(record[key])
    return None


def start(context: dict[str, Any]) -> None:
    """The starting process: an app from the environment, one ``start_run``, times printed."""
    from app import create_app
    from startup import prepare_process
    from taskrunner.contract import start_run

    app = create_app()
    prepare_process(app)
    with app.app_context():
        print(json.dumps({"calling": time.time()}), flush=True)
        handle = start_run(TYPE, context, "bench")
        print(json.dumps({"returned": time.time(), "run": handle.uuid}), flush=True)


def run(quick: bool = False) -> dict[str, Any]:
    return MillionBench(quick).measure()


if __name__ == "__main__":
    if "--start" in sys.argv:
        start(json.loads(sys.argv[sys.argv.index("--start") + 1]))
        sys.exit(0)
    result = run(quick="--quick" in sys.argv)
    print_figures(result)
    if "--json" in sys.argv:
        print(json.dumps(result, indent=2))
