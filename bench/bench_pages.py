"""Server-side time of the operator pages on a big ledger (PostgreSQL).

Data: 10,000 runs and 1,000,000 units, written server-side with
``generate_series`` (seconds, not minutes). One run has 100,000 units and is
still running: 60 % completed, 25 % failed under a handful of reasons with
numbers in them, 10 % pending and 5 % running, a fifth of those with a dead
heartbeat; the other runs share the remaining units. A few other runs are
running too, some with units pending since long ago.

The schedules hold a year of the stuck sweep's 5-minute slots (about 105,000 rows, as in
``bench_schedules``) and a few days of every other schedule's.

Each page is requested 50 times through the Flask test client, signed in, and
timed around the request (routing, permission check, queries, template), target
p95 <= 100 ms (50 ms for the run list, the console and the overview strip): the
run list (first page, and a page 5,000 runs deep), the detail of the
100,000-unit run, its units (a deep cursor; the failed ones and one error group's,
each first and deep), one of its units, its error groups, the stale units (across
runs and of the big run), the search (each kind), the schedules, the workers and
queues, the overview strip (units finished per minute and per hour over the last
day), most with their JSON twin, and a Prometheus scrape of ``GET /metrics`` (with its
bearer token, no sign-in). Every page also draws the navigation's attention badges.
The comparison of two 100,000-unit runs is ``bench_compare``'s.

Plans: every SELECT one request of each page sends is explained again with its own
parameters (``bench.plans``); the figure counts the sequential scans of
``task_run_units`` among them (target 0) and the notes name the statements.

Database ``BENCH_PAGES_DATABASE_URL`` (default ``…/bench_pages``, created and
reset by the benchmark). Run alone: ``python -m bench.bench_pages [--quick]``;
the figures are written to ``bench/results/bench_pages.json``.
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
from urllib.parse import quote

from sqlalchemy import column as sql_column
from sqlalchemy import create_engine, table, text

from bench.bench_schedules import fill as fill_schedules
from bench.figures import percentile, print_figures
from bench.plans import named, seq_scans, statements_of
from harness import build_app, ensure_postgres_database, reset_postgres_schema

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/bench_pages"
METRICS_TOKEN = "bench-metrics"
# The folded reason of one error group of the big run (a fifth of its failed units).
BILLING_GROUP = "tenant # has no billing address"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_pages.json"
TYPES = (
    "payments.monthly_statements",
    "diagnostics.probe",
    "documents.forward_to_provider",
    "reports.nightly_export",
)


def fill(conn, runs: int, units: int, big: int) -> None:
    """Insert ``runs`` runs and ``units`` units; run 1 is the big running one."""
    types = "ARRAY[" + ", ".join(f"'{t}'" for t in TYPES) + "]"
    # Oldest first: run ids grow with time, as in production.
    conn.execute(
        text(f"""
        INSERT INTO task_runs (uuid, type, status, initiator, context, units_total,
            units_completed, units_failed, units_skipped, started_at, finished_at,
            created_at, updated_at)
        SELECT gen_random_uuid()::text,
               ({types})[1 + g % 4],
               CASE WHEN g = 1 OR g > :runs - 5 THEN 'running'
                    WHEN g % 10 = 3 THEN 'completed_with_failures'
                    WHEN g % 97 = 5 THEN 'failed'
                    WHEN g % 89 = 7 THEN 'cancelled'
                    ELSE 'completed' END,
               CASE WHEN g % 3 = 0 THEN 'schedule' ELSE 'cli' END,
               '{{}}'::json, 0, 0, 0, 0,
               now() - make_interval(mins => (:runs - g) * 5 + 60),
               CASE WHEN g = 1 OR g > :runs - 5 THEN NULL
                    ELSE now() - make_interval(mins => (:runs - g) * 5 + 50) END,
               now() - make_interval(mins => (:runs - g) * 5 + 60),
               now() - make_interval(mins => (:runs - g) * 5 + 60)
        FROM generate_series(1, :runs) AS g
    """),
        {"runs": runs},
    )
    # The big run: unit i's status by i % 100.
    conn.execute(
        text("""
        INSERT INTO task_run_units (task_run_id, unit_key, tenant_id, status, attempts,
            last_error, dispatch_token, queued_at, started_at, heartbeat_at, finished_at,
            created_at, updated_at)
        SELECT 1, 'tenant-' || i || '\\:2026-10', i,
               CASE WHEN i % 100 < 60 THEN 'completed' WHEN i % 100 < 85 THEN 'failed'
                    WHEN i % 100 < 95 THEN 'pending' ELSE 'running' END,
               CASE WHEN i % 100 < 85 OR i % 100 >= 95 THEN 1 ELSE 0 END,
               CASE WHEN i % 100 >= 60 AND i % 100 < 85 THEN
                    CASE i % 5 WHEN 0 THEN 'tenant ' || i || ' has no billing address'
                               WHEN 1 THEN 'unhandled httpx.ConnectTimeout — see logs'
                               WHEN 2 THEN 'statement total ' || (i * 7) || ' exceeds limit'
                               WHEN 3 THEN 'unhandled sqlalchemy.exc.OperationalError — see logs'
                               ELSE 'currency XXX of tenant ' || i || ' is not supported' END
               END,
               'bench',
               -- One pending unit in ten was lost by the queue long ago: never started.
               CASE WHEN i % 100 = 94 THEN now() - interval '50 minutes'
                    ELSE now() - interval '5 minutes' END,
               CASE WHEN i % 100 < 85 THEN now() - interval '40 minutes'
                    WHEN i % 100 >= 95 THEN now() - interval '10 minutes' END,
               -- One running unit in five lost its worker: its heartbeat stopped.
               CASE WHEN i % 100 >= 95 THEN
                    CASE WHEN i % 5 = 0 THEN now() - interval '8 minutes' ELSE now() END END,
               CASE WHEN i % 100 < 85 THEN now() - interval '35 minutes' END,
               now() - interval '50 minutes', now()
        FROM generate_series(1, :big) AS i
    """),
        {"big": big},
    )
    per_run = (units - big) // (runs - 1)
    # Every other run: ``per_run`` units; its snapshot matches its status.
    conn.execute(
        text("""
        INSERT INTO task_run_units (task_run_id, unit_key, tenant_id, status, attempts,
            last_error, dispatch_token, queued_at, started_at, heartbeat_at, finished_at,
            created_at, updated_at)
        SELECT r.id, 'tenant-' || u || ':' || r.id, u,
               CASE WHEN r.status = 'running' THEN
                         CASE WHEN u % 3 = 0 THEN 'completed' ELSE 'pending' END
                    WHEN r.status = 'cancelled' AND u % 2 = 0 THEN 'skipped'
                    WHEN r.status IN ('completed_with_failures', 'failed') AND u % 9 = 4
                         THEN 'failed'
                    ELSE 'completed' END,
               1,
               CASE WHEN r.status IN ('completed_with_failures', 'failed') AND u % 9 = 4
                    THEN 'tenant ' || u || ' has no billing address' END,
               'bench', r.started_at, r.started_at, r.started_at, r.finished_at,
               r.started_at, r.started_at
        FROM task_runs AS r, generate_series(1, :per_run) AS u
        WHERE r.id > 1
    """),
        {"per_run": per_run},
    )
    conn.execute(
        text("""
        UPDATE task_runs AS r SET units_total = c.total, units_completed = c.completed,
               units_failed = c.failed, units_skipped = c.skipped
        FROM (SELECT task_run_id, count(*) AS total,
                     count(*) FILTER (WHERE status = 'completed') AS completed,
                     count(*) FILTER (WHERE status = 'failed') AS failed,
                     count(*) FILTER (WHERE status = 'skipped') AS skipped
              FROM task_run_units GROUP BY task_run_id) AS c
        WHERE c.task_run_id = r.id
    """)
    )
    conn.execute(
        text("""
        INSERT INTO task_events (event_id, name, task_run_id, payload, created_at)
        SELECT gen_random_uuid()::text, 'tasks.unit.failed', 1,
               json_build_object('run_uuid', 'x', 'unit_key', 'tenant-' || i || '\\:2026-10',
                                 'reason', 'tenant ' || i || ' has no billing address'),
               now() - interval '35 minutes'
        FROM generate_series(1, 5000) AS i
    """)
    )
    fold_reasons(conn)
    fill_console(conn, runs)
    conn.execute(text("ANALYZE"))


CONSUMERS = 12
TENANTS = 5_000


def fold_reasons(conn) -> None:
    """Each filled reason's error-group fold, as the ledger writes it with the reason."""
    from taskrunner.ledger.reason_fold import fold_sql

    units = table("task_run_units", sql_column("last_error"), sql_column("reason_fold"))
    conn.execute(
        units.update()
        .where(units.c.last_error.is_not(None))
        .values(reason_fold=fold_sql(units.c.last_error))
    )


def fill_console(conn, runs: int) -> None:
    """Tenants with names, and consumers on six hosts whose workers run units of run 1."""
    conn.execute(
        text("""
        INSERT INTO tenants (name, status, status_changed_at, created_at)
        SELECT CASE WHEN t = 4711 THEN 'Acme Corporation' ELSE 'Tenant ' || t || ' GmbH' END,
               CASE WHEN t % 50 = 0 THEN 'closed' ELSE 'active' END, now(), now()
        FROM generate_series(1, :tenants) AS t
    """),
        {"tenants": TENANTS},
    )
    conn.execute(
        text("""
        INSERT INTO consumers (id, host, pid, queues, worker_type, workers, started_at,
            heartbeat_at, running)
        SELECT 'worker-' || (c % 6) || ':' || (1000 + c) || '\\:1', 'worker-' || (c % 6),
               1000 + c, CASE WHEN c % 3 = 0 THEN '["builder"]' ELSE '["tasks"]' END::json,
               'process', 8, now() - interval '2 hours',
               CASE WHEN c = 1 THEN now() - interval '5 minutes' ELSE now() END,
               (SELECT json_agg(json_build_object(
                    'pid', 2000 + c * 10 + w, 'thread', 1, 'task', 'taskrunner.run_unit',
                    'task_id', 'u' || u.id || '.' || md5(u.id::text),
                    'since', to_char(now() - interval '7 seconds',
                                     'YYYY-MM-DD"T"HH24\\:MI\\:SS"Z"')))
                FROM generate_series(1, 8) AS w
                JOIN task_run_units AS u ON u.id = 95 + c * 100 + w)
        FROM generate_series(1, :consumers) AS c
    """),
        {"consumers": CONSUMERS},
    )


class PagesBench:
    def __init__(self, quick: bool) -> None:
        self.quick = quick
        self.runs = 1_000 if quick else 10_000
        self.units = 100_000 if quick else 1_000_000
        self.big = 10_000 if quick else 100_000
        self.deep = 500 if quick else 5_000
        self.requests = 20 if quick else 50
        self.slots = 10_000 if quick else 105_000
        self.url = os.environ.get("BENCH_PAGES_DATABASE_URL", DEFAULT_URL)

    def measure(self) -> dict[str, Any]:
        ensure_postgres_database(self.url)
        reset_postgres_schema(self.url)
        folder = tempfile.mkdtemp(prefix="bench-pages-")
        app = build_app(
            {
                "SQLALCHEMY_DATABASE_URI": self.url,
                "QUEUE_DRIVER": "sqlite",
                "QUEUE_SQLITE_PATH": f"{folder}/queue.sqlite3",
                "INSTANCE_PATH": folder,
                "SECRET_KEY": "bench",
                "WTF_CSRF_ENABLED": False,
                "LOG_FILE": f"{folder}/log",
                "METRICS_TOKEN": METRICS_TOKEN,
            }
        )
        from tasks.routing import routes

        began = time.perf_counter()
        engine = create_engine(self.url)
        with engine.begin() as conn:
            fill(conn, self.runs, self.units, self.big)
            # The schedules page: a year of the stuck sweep's 5-minute slots (as in
            # bench_schedules), a few days of every other schedule's.
            fill_schedules(conn, sorted(routes.periodic), self.slots, self.slots // 50)
            slots = conn.execute(text("SELECT count(*) FROM periodic_slots")).scalar_one()
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            # Autovacuum (off on this benchmark server) visits a table after a million
            # inserts: its visibility map lets an index-only scan skip the rows it covers.
            conn.execute(text("VACUUM ANALYZE"))
        engine.dispose()
        fill_seconds = time.perf_counter() - began
        with app.app_context():
            from accounts.permissions import PERMISSIONS
            from accounts.services import create_user
            from taskrunner.ledger import ledger

            create_user("bench@example.com", "bench password", PERMISSIONS)
            # What the periodic task does every minute: the per-minute roll-up of the
            # last 25 hours, 85,000 units of the big run among them (timed: its cost).
            rolled = time.perf_counter()
            ledger.throughput.roll()
            roll_ms = (time.perf_counter() - rolled) * 1000
            big_uuid = ledger.session.execute(
                text("SELECT uuid FROM task_runs WHERE id = 1")
            ).scalar_one()
            deep_cursor = ledger.session.execute(
                text("SELECT uuid FROM task_runs ORDER BY id DESC OFFSET :n LIMIT 1"),
                {"n": self.deep - 1},
            ).scalar_one()
            ledger.session.remove()
        client = app.test_client()
        response = client.post(
            "/login", data={"email": "bench@example.com", "password": "bench password"}
        )
        assert response.status_code == 302, response.status_code
        big = f"/backoffice/task-runs/{big_uuid}"
        api = f"/api/v1/backoffice/task-runs/{big_uuid}"
        # A failed unit with "tenant # has no billing address", 90 % into the big run.
        deep_unit = quote(f"tenant-{self.big * 9 // 10 + 60}:2026-10")
        group = quote(BILLING_GROUP)
        pages = [
            ("run list, first page", "/backoffice/task-runs", 50),
            (
                f"run list, {self.deep:,} runs deep",
                f"/backoffice/task-runs?cursor={deep_cursor}",
                50,
            ),
            (f"run detail, {self.big:,}-unit run", big, 100),
            ("API run detail, big run", api, 100),
            ("run units, deep cursor", f"{big}?cursor={deep_unit}", 100),
            ("API units, deep cursor", f"{api}/units?cursor={deep_unit}", 100),
            ("run units, failed, first page", f"{big}?unit_status=failed", 100),
            ("run units, failed, deep cursor", f"{big}?unit_status=failed&cursor={deep_unit}", 100),
            ("API units, failed, first page", f"{api}/units?status=failed", 100),
            (
                "API units, failed, deep cursor",
                f"{api}/units?status=failed&cursor={deep_unit}",
                100,
            ),
            ("run units, one error group, first page", f"{big}?reason={group}", 100),
            (
                "run units, one error group, deep cursor",
                f"{big}?reason={group}&cursor={deep_unit}",
                100,
            ),
            ("API units, one error group, first page", f"{api}/units?reason={group}", 100),
            (
                "API units, one error group, deep cursor",
                f"{api}/units?reason={group}&cursor={deep_unit}",
                100,
            ),
            ("unit detail, a failed unit of the big run", f"{big}/units/{deep_unit}", 100),
            (f"error groups, {self.big:,}-unit run", f"{big}/errors", 100),
            ("API error groups, big run", f"{api}/errors", 100),
            ("stale units across runs", "/backoffice/stale-units", 100),
            ("API stale units across runs", "/api/v1/backoffice/stale-units", 100),
            ("stale units of the big run", f"/backoffice/stale-units?run={big_uuid}", 100),
            ("API run list, first page", "/api/v1/backoffice/task-runs", 50),
            (f"workers, {CONSUMERS} consumers × 8 busy workers", "/backoffice/workers", 50),
            ("queues", "/backoffice/queues", 50),
            ("API queues", "/api/v1/backoffice/queues", 50),
            (
                "search, run uuid prefix in upper case",
                f"/backoffice/search?q={deep_cursor[:7].upper()}",
                100,
            ),
            ("search, tenant name", "/backoffice/search?q=acme", 100),
            ("search, unit key prefix", "/backoffice/search?q=tenant-4711:", 100),
            ("search, error text", "/backoffice/search?q=billing+address", 100),
            ("API search, error text", "/api/v1/backoffice/search?q=billing+address", 100),
            (f"schedules, {slots:,} slots", "/backoffice/schedules", 100),
            ("API schedules", "/api/v1/backoffice/schedules", 100),
        ]
        # The console's throughput strip alone: every unit finished in the last 24 h
        # (the big run's 85 % and the last day's runs), grouped per minute.
        pages.append(("overview strip, units per minute and hour", "/backoffice/overview", 50))
        figures = []
        # The strip's first read after a quiet day rolls up the day's settled minutes
        # once (every later read finds them stored): one sample, before any other page.
        began = time.perf_counter()
        assert client.get("/backoffice/overview").status_code == 200
        figures.append(
            {
                "name": "overview strip, first read (rolls up 24 h of units)",
                "value": round((time.perf_counter() - began) * 1000, 1),
                "unit": "ms",
                "target": "",
                "ok": None,
            }
        )
        # Prometheus has no session: its own client, with the bearer token only.
        prometheus = app.test_client()
        scrape = {"Authorization": f"Bearer {METRICS_TOKEN}"}
        timed = [(name, client, path, None, target) for name, path, target in pages]
        timed.append(("GET /metrics, a Prometheus scrape", prometheus, "/metrics", scrape, 100))
        statements, offending = 0, []
        for name, who, path, headers, target in timed:
            samples = self.time_page(who, path, headers)
            p95 = percentile(samples, 0.95)
            figures.append(
                {
                    "name": f"{name} p95",
                    "value": round(p95, 1),
                    "unit": "ms",
                    "target": f"<= {target}",
                    "ok": p95 <= target,
                }
            )
            figures.append(
                {
                    "name": f"{name} p50",
                    "value": round(statistics.median(samples), 1),
                    "unit": "ms",
                    "target": "",
                    "ok": None,
                }
            )
            sent = statements_of(
                app, lambda who=who, path=path, headers=headers: who.get(path, headers=headers)
            )
            statements += len(sent)
            offending += [(name, statement) for statement in seq_scans(app, sent)]
        figures.append(
            {
                # On the small (--quick) tables a sequential scan can be the planner's
                # right choice: judged on the full ledger only.
                "name": "sequential scans of task_run_units in the plans of every page",
                "value": len(offending),
                "unit": "",
                "target": "" if self.quick else "= 0",
                "ok": None if self.quick else not offending,
            }
        )
        figures.append(
            {
                "name": "per-minute roll-up of 25 h (periodic, once a minute)",
                "value": round(roll_ms, 1),
                "unit": "ms",
                "target": "",
                "ok": None,
            }
        )
        scans = "; ".join(f"{name}: {named(statement)}" for name, statement in offending)
        notes = (
            f"PostgreSQL, {self.runs:,} runs / {self.units:,} units (filled in "
            f"{fill_seconds:.1f} s), {slots:,} schedule slots; {self.requests} signed-in "
            "requests per page through the Flask test client, timed around each request "
            f"after 3 warm-ups; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
            f"cores at the end. One request of each of the {len(timed)} pages sends "
            f"{statements} SELECT statements in all, each explained with its parameters; "
            f"sequential scans of task_run_units: {scans or 'none'}."
        )
        return {"figures": figures, "notes": notes}

    def time_page(self, client, path: str, headers: dict[str, str] | None = None) -> list[float]:
        for _ in range(3):
            response = client.get(path, headers=headers)
            assert response.status_code == 200, (path, response.status_code)
        samples = []
        for _ in range(self.requests):
            began = time.perf_counter()
            response = client.get(path, headers=headers)
            samples.append((time.perf_counter() - began) * 1000)
            assert response.status_code == 200, (path, response.status_code)
        return samples


def run(quick: bool = False) -> dict[str, Any]:
    return PagesBench(quick).measure()


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    print_figures(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
