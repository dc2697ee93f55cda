"""Operations at scale, on PostgreSQL + Redis: the stuck sweep and pruning.

- the stuck sweep over a running 100,000-unit run: once with 1,000 stale units to
  notify, then in the steady state (nothing new to notify);
- pruning a terminal 100,000-unit run plus 1,000 small runs: the total time, and the
  longest single transaction it held (pruning must never lock the tables for long).

Database ``BENCH_OPS_DATABASE_URL`` (default ``…/bench_ops``, created and reset by the
benchmark) and ``BENCH_OPS_REDIS_URL`` (default db 7). Figures go to
``bench/results/bench_ops.json``. Run alone: ``python -m bench.bench_ops [--quick]``.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event, text

from harness import build_app, ensure_postgres_database

DATABASE_URL = os.environ.get(
    "BENCH_OPS_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/bench_ops"
)
REDIS_URL = os.environ.get("BENCH_OPS_REDIS_URL", "redis://127.0.0.1:6379/7")
RESULTS = Path(__file__).resolve().parent / "results" / "bench_ops.json"
STALE = 1_000
SMALL_RUNS = 1_000


def figure(
    name: str, value: float, unit: str, target: str = "", ok: bool | None = None, digits: int = 3
) -> dict[str, Any]:
    return {"name": name, "value": round(value, digits), "unit": unit, "target": target, "ok": ok}


class TransactionClock:
    """The duration of every transaction on an engine, from BEGIN to COMMIT or ROLLBACK."""

    def __init__(self, engine: Any) -> None:
        self.durations: list[float] = []
        self._open: dict[int, float] = {}
        event.listen(engine, "begin", self._begin)
        event.listen(engine, "commit", self._end)
        event.listen(engine, "rollback", self._end)

    def _begin(self, conn: Any) -> None:
        self._open[id(conn)] = time.perf_counter()

    def _end(self, conn: Any) -> None:
        began = self._open.pop(id(conn), None)
        if began is not None:
            self.durations.append(time.perf_counter() - began)

    @contextmanager
    def measuring(self) -> Iterator[list[float]]:
        self.durations = []
        yield self.durations


def reset_database() -> None:
    ensure_postgres_database(DATABASE_URL)
    engine = create_engine(DATABASE_URL)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


def big_run(n: int) -> Any:
    from diagnostics.probe import TYPE, ProbeTask
    from taskrunner.ledger import ledger

    context = {"units": n}
    return ledger.transitions.create_run(TYPE, context, "bench", ProbeTask().units(context), 5000)


def analyze() -> None:
    from extensions import db

    db.session.execute(text("ANALYZE task_runs, task_run_units, task_events"))
    db.session.commit()


def measure(quick: bool) -> dict[str, Any]:
    from database import utcnow
    from extensions import db
    from taskrunner import runner
    from taskrunner.ledger import ledger

    n = 20_000 if quick else 100_000
    values: dict[str, float] = {}

    # The stuck sweep: a running run, 1,000 of its units lost by the queue two hours ago.
    running = big_run(n)
    db.session.execute(
        text(
            "UPDATE task_run_units SET queued_at = :at WHERE id IN (SELECT id FROM "
            "task_run_units WHERE task_run_id = :run ORDER BY id LIMIT :n)"
        ),
        {"at": utcnow() - timedelta(hours=2), "run": running.run_id, "n": STALE},
    )
    db.session.commit()
    analyze()
    began = time.perf_counter()
    found = ledger.sweeps.mark_stuck()
    values["sweep_notify"] = time.perf_counter() - began
    assert found == STALE, found
    began = time.perf_counter()
    assert ledger.sweeps.mark_stuck() == 0
    values["sweep_steady"] = time.perf_counter() - began

    # Pruning: the big run, settled and old, and many small old runs.
    ledger.transitions.fail_undispatched(running.run_id, "bench: settled in bulk")
    for _ in range(SMALL_RUNS):
        small = big_run(3)
        ledger.transitions.fail_undispatched(small.run_id, "bench: settled in bulk")
    db.session.execute(
        text("UPDATE task_runs SET finished_at = :at"), {"at": utcnow() - timedelta(days=40)}
    )
    db.session.commit()
    analyze()
    clock = TransactionClock(db.engine)
    with clock.measuring() as durations:
        began = time.perf_counter()
        report = runner.prune()
        values["prune_total"] = time.perf_counter() - began
    assert report.runs == SMALL_RUNS + 1 and report.units == n + 3 * SMALL_RUNS, report
    values["prune_longest_tx"] = max(durations)
    values["prune_transactions"] = len(durations)
    values["prune_units"] = report.units

    label = f"{n:,}"
    figures = [
        figure(
            f"stuck sweep, {label}-unit run, {STALE:,} newly stale",
            values["sweep_notify"],
            "s",
            "≤ 2 s",
            values["sweep_notify"] <= 2.0,
        ),
        figure(
            f"stuck sweep, {label}-unit run, steady state",
            values["sweep_steady"] * 1e3,
            "ms",
            "≤ 500 ms",
            values["sweep_steady"] <= 0.5,
            digits=1,
        ),
        figure(f"prune, {label}-unit run + {SMALL_RUNS:,} small runs", values["prune_total"], "s"),
        figure(
            "prune, units deleted per second",
            values["prune_units"] / values["prune_total"],
            "units/s",
            digits=0,
        ),
        figure(
            "prune, longest transaction",
            values["prune_longest_tx"] * 1e3,
            "ms",
            "≤ 500 ms",
            values["prune_longest_tx"] <= 0.5,
            digits=1,
        ),
        figure("prune, transactions", values["prune_transactions"], "", digits=0),
    ]
    notes = (
        "PostgreSQL ledger, Redis queues; the sweep's figures include emitting and "
        "delivering its events; prune includes clearing the queues' leftovers."
    )
    return {"figures": figures, "notes": notes}


def run(quick: bool = False) -> dict[str, Any]:
    """The ``bench.run`` entry: a fresh schema, then ``measure``."""
    reset_database()
    folder = tempfile.mkdtemp(prefix="bench-ops-")
    app = build_app(
        {
            "SQLALCHEMY_DATABASE_URI": DATABASE_URL,
            "QUEUE_DRIVER": "redis",
            "REDIS_URL": REDIS_URL,
            "SECRET_KEY": "bench",
            "INSTANCE_PATH": folder,
            "LOG_FILE": str(Path(folder) / "bench.log"),
        }
    )
    with app.app_context():
        for huey in app.extensions["queues"].all().values():
            huey.flush()
        results = measure(quick)
        for huey in app.extensions["queues"].all().values():
            huey.flush()
    return results


def main(argv: list[str]) -> int:
    results = run("--quick" in argv)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    for item in results["figures"]:
        mark = {True: "ok", False: "MISSED", None: ""}[item["ok"]]
        print(f"{item['name']:60} {item['value']:>12} {item['unit']:8} {item['target']:10} {mark}")
    return 0 if all(item["ok"] is not False for item in results["figures"]) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
