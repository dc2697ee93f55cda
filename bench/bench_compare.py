"""Two 100,000-unit runs compared (PostgreSQL): the compare page, its JSON and the run page.

Data: a night before and tonight, each a run of 100,000 units of one type (10,000 with
``--quick``), written server-side with ``generate_series``, in the ledger of
``bench_pages``: 10,000 runs and 1,000,000 units, the 9,998 other runs of other types
sharing the rest (a tenth of it all with ``--quick``). The night before failed 8 % of its
units, tonight 10 %, the two sets overlapping by half (so thousands of units are newly
failing, recovered and still failing), under a few reasons with numbers in them; tonight
also has a new reason.

Timed through the Flask test client, signed in, 3 warm-ups then ``requests`` samples:
``/backoffice/task-runs/<tonight>/compare`` (default: the previous run of the type),
its JSON twin, and the run page that links to it with its two counts. Every statement
one comparison sends is explained again with its parameters (``bench.plans``): target no
sequential scan of ``task_run_units`` (judged on the full ledger only).

Database ``BENCH_COMPARE_DATABASE_URL`` (default ``…/bench_compare``, created and reset
by the benchmark). Run alone: ``python -m bench.bench_compare [--quick]``; the figures
are written to ``bench/results/bench_compare.json``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from bench.bench_pages import fold_reasons
from bench.figures import percentile, print_figures
from bench.plans import named, seq_scans, statements_of
from harness import build_app, ensure_postgres_database, reset_postgres_schema

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/bench_compare"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_compare.json"
TYPE = "payments.monthly_statements"
TARGET_MS = 200


def fill(conn, units: int, others: int, ledger_units: int) -> None:
    """Run 1: the night before; runs 2 .. others + 1: other types; the last run: tonight."""
    conn.execute(
        text("""
        INSERT INTO task_runs (uuid, type, status, initiator, context, units_total,
            units_completed, units_failed, units_skipped, started_at, finished_at,
            created_at, updated_at)
        SELECT gen_random_uuid()::text,
               CASE WHEN g = 1 OR g = :others + 2 THEN :type ELSE 'reports.nightly_' || g % 7 END,
               'completed_with_failures', 'schedule', '{}'::json, 0, 0, 0, 0,
               now() - make_interval(hours => (:others + 2 - g)),
               now() - make_interval(hours => (:others + 2 - g)) + interval '20 minutes',
               now(), now()
        FROM generate_series(1, :others + 2) AS g
    """),
        {"others": others, "type": TYPE},
    )
    # i % 100 < 8 failed the night before; 4 <= i % 100 < 14 fail tonight.
    for run_id, failing, extra in (
        (1, "i % 100 < 8", ""),
        (others + 2, "i % 100 BETWEEN 4 AND 13", "tonight"),
    ):
        conn.execute(
            text(f"""
            INSERT INTO task_run_units (task_run_id, unit_key, tenant_id, status, attempts,
                last_error, dispatch_token, queued_at, started_at, finished_at,
                created_at, updated_at)
            SELECT :run_id, 'tenant-' || i || '\\:2026-11', i,
                   CASE WHEN {failing} THEN 'failed' ELSE 'completed' END, 1,
                   CASE WHEN {failing} THEN
                        CASE WHEN i % 100 = 13 AND :extra = 'tonight'
                                  THEN 'currency of tenant ' || i || ' is not supported'
                             WHEN i % 3 = 0 THEN 'tenant ' || i || ' has no billing address'
                             WHEN i % 3 = 1 THEN 'unhandled httpx.ConnectTimeout — see logs'
                             ELSE 'statement total ' || (i * 7) || ' exceeds limit' END
                   END,
                   'bench', now() - interval '1 hour', now() - interval '1 hour',
                   now() - interval '40 minutes', now(), now()
            FROM generate_series(1, :units) AS i
        """),
            {"run_id": run_id, "units": units, "extra": extra},
        )
    conn.execute(
        text("""
        UPDATE task_runs SET units_total = :units,
            units_failed = (SELECT count(*) FROM task_run_units u
                            WHERE u.task_run_id = task_runs.id AND u.status = 'failed'),
            units_completed = (SELECT count(*) FROM task_run_units u
                               WHERE u.task_run_id = task_runs.id AND u.status = 'completed')
        WHERE type = :type
    """),
        {"units": units, "type": TYPE},
    )
    # The other runs share what is left of the ledger (``LEDGER_UNITS``), all completed.
    conn.execute(
        text("""
        INSERT INTO task_run_units (task_run_id, unit_key, tenant_id, status, attempts,
            dispatch_token, queued_at, started_at, finished_at, created_at, updated_at)
        SELECT r.id, 'tenant-' || u || '\\:' || r.id, u, 'completed', 1, 'bench',
               r.started_at, r.started_at, r.finished_at, r.created_at, r.created_at
        FROM task_runs AS r, generate_series(1, :per_run) AS u
        WHERE r.type <> :type
    """),
        {"per_run": max(0, (ledger_units - 2 * units) // others), "type": TYPE},
    )
    conn.execute(
        text("""
        UPDATE task_runs SET units_total = c.n, units_completed = c.n
        FROM (SELECT task_run_id, count(*) AS n FROM task_run_units GROUP BY task_run_id) c
        WHERE c.task_run_id = task_runs.id AND task_runs.type <> :type
    """),
        {"type": TYPE},
    )
    fold_reasons(conn)
    conn.execute(text("ANALYZE task_runs"))
    conn.execute(text("ANALYZE task_run_units"))


class CompareBench:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.units = 10_000 if quick else 100_000
        # The ledger of bench_pages: 10,000 runs and 1,000,000 units (a tenth with --quick).
        self.others = 998 if quick else 9_998
        self.ledger_units = 100_000 if quick else 1_000_000
        self.requests = 10 if quick else 50
        self.url = os.environ.get("BENCH_COMPARE_DATABASE_URL", DEFAULT_URL)

    def measure(self) -> dict[str, Any]:
        ensure_postgres_database(self.url)
        reset_postgres_schema(self.url)
        folder = tempfile.mkdtemp(prefix="bench-compare-")
        app = build_app(
            {
                "SQLALCHEMY_DATABASE_URI": self.url,
                "QUEUE_DRIVER": "sqlite",
                "QUEUE_SQLITE_PATH": f"{folder}/queue.sqlite3",
                "INSTANCE_PATH": folder,
                "SECRET_KEY": "bench",
                "WTF_CSRF_ENABLED": False,
                "LOG_FILE": f"{folder}/log",
            }
        )
        began = time.perf_counter()
        engine = create_engine(self.url)
        with engine.begin() as conn:
            fill(conn, self.units, self.others, self.ledger_units)
        engine.dispose()
        fill_seconds = time.perf_counter() - began
        with app.app_context():
            from accounts.permissions import PERMISSIONS
            from accounts.services import create_user
            from taskrunner.ledger import ledger

            create_user("bench@example.com", "bench password", PERMISSIONS)
            tonight = ledger.session.execute(
                text("SELECT uuid FROM task_runs ORDER BY id DESC LIMIT 1")
            ).scalar_one()
            counts = ledger.compare.counts(
                ledger.runs.get_run(tonight),
                ledger.compare.previous_run(ledger.runs.get_run(tonight)),
            )
            ledger.session.remove()
        client = app.test_client()
        response = client.post(
            "/login", data={"email": "bench@example.com", "password": "bench password"}
        )
        assert response.status_code == 302, response.status_code
        figures = []
        for name, path in (
            ("compare page", f"/backoffice/task-runs/{tonight}/compare"),
            ("compare JSON", f"/api/v1/backoffice/task-runs/{tonight}/compare"),
            ("run page with its comparison link", f"/backoffice/task-runs/{tonight}"),
        ):
            samples = self.time_page(client, path)
            p95 = percentile(samples, 0.95)
            figures.append(
                {
                    "name": f"{name}, two {self.units:,}-unit runs p95",
                    "value": round(p95, 1),
                    "unit": "ms",
                    "target": f"<= {TARGET_MS}",
                    "ok": p95 <= TARGET_MS,
                }
            )
            figures.append(
                {
                    "name": f"{name}, two {self.units:,}-unit runs p50",
                    "value": round(statistics.median(samples), 1),
                    "unit": "ms",
                    "target": "",
                    "ok": None,
                }
            )
        statements, scans = compare_plans(app, client, tonight)
        figures.append(
            {
                # On the small (--quick) tables a sequential scan can be the planner's
                # right choice: judged on the full ledger only.
                "name": "compare: sequential scans of task_run_units in its plans",
                "value": len(scans),
                "unit": "",
                "target": "" if self.quick else "= 0",
                "ok": None if self.quick else not scans,
            }
        )
        notes = (
            f"PostgreSQL, two {self.units:,}-unit runs of one type among {self.others} others "
            f"(filled in {fill_seconds:.1f} s): {counts[0]:,} newly failing, {counts[1]:,} "
            f"recovered; {self.requests} signed-in requests per page through the Flask test "
            f"client after 3 warm-ups; a comparison sends {statements} SELECT statements "
            f"(sequential scans of task_run_units: "
            f"{'; '.join(named(st) for st in scans) or 'none'}); "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end."
        )
        return {"figures": figures, "notes": notes}

    def time_page(self, client, path: str) -> list[float]:
        for _ in range(3):
            assert client.get(path).status_code == 200, path
        samples = []
        for _ in range(self.requests):
            began = time.perf_counter()
            response = client.get(path)
            samples.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        return samples


def compare_plans(app, client, run_uuid: str) -> tuple[int, list[str]]:
    """(statements, those whose plan scans task_run_units) of one comparison."""
    path = f"/api/v1/backoffice/task-runs/{run_uuid}/compare"
    sent = statements_of(app, lambda: client.get(path))
    return len(sent), seq_scans(app, sent)


def run(quick: bool = False) -> dict[str, Any]:
    return CompareBench(quick).measure()


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    print_figures(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
