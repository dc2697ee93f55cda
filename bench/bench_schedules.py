"""Server-side time of the schedules page and its JSON on a year of slots (PostgreSQL).

Data: 20 schedules (the app's own and 5-minute ones declared here to make up the
number), each first known a year ago. The stuck sweep (every 5 minutes) holds a year of
slots, about 105,000 rows, one in 500 missed; every other schedule holds its last days
of slots. Written server-side with ``generate_series``. Every page also draws the
navigation's badge (schedules with a missed slot in 24 h).

Each of the list page, its JSON, the big schedule's detail page and its JSON is
requested through the Flask test client, signed in, and timed around the request. Target:
p95 <= 50 ms for the list and its JSON.

Database ``BENCH_SCHEDULES_DATABASE_URL`` (default ``…/bench_schedules``, created and
reset by the benchmark). Run alone: ``python -m bench.bench_schedules [--quick]``;
the figures are written to ``bench/results/bench_schedules.json``.
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

from bench.figures import percentile, print_figures
from harness import build_app, ensure_postgres_database, reset_postgres_schema

DEFAULT_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/bench_schedules"
RESULTS = Path(__file__).resolve().parent / "results" / "bench_schedules.json"
SCHEDULES = 20
BIG = "taskrunner.detect_stuck"
TARGET_MS = 50


def declare_extra(count: int) -> list[str]:
    """5-minute schedules of this process only, up to ``SCHEDULES`` in all."""
    from tasks.routing import periodic, routes
    from tasks.schedules import Every

    names = [f"bench.sweep_{i:02d}" for i in range(max(0, count - len(routes.periodic)))]
    for name in names:
        periodic(name, Every("TASK_RUNNER_SWEEP_SECONDS"))(lambda: None)
    return sorted(routes.periodic)


def fill(conn, names: list[str], big_slots: int, small_slots: int) -> None:
    """A year of the big schedule's 5-minute slots, a few days of every other's."""
    conn.execute(
        text(
            "INSERT INTO schedule_states (name, first_known_at, missed_slots) "
            "SELECT n, now() AT TIME ZONE 'UTC' - interval '366 days', 0 "
            "FROM unnest(CAST(:names AS text[])) n"
        ),
        {"names": names},
    )
    for name in names:
        count = big_slots if name == BIG else small_slots
        conn.execute(
            text(
                r"""
                INSERT INTO periodic_slots (name, slot, claimed_at, claimed_by, enqueued_at,
                    finished_at, outcome, reason)
                SELECT :name, s, s + interval '1 second',
                    CASE WHEN i % 500 = 0 THEN '' ELSE 'worker-' || (i % 3) || '\:4242' END,
                    s, s + interval '3 seconds',
                    CASE WHEN i % 500 = 0 THEN 'missed' WHEN i % 97 = 0 THEN 'raised'
                         ELSE 'ok' END,
                    CASE WHEN i % 97 = 0 THEN 'unhandled RuntimeError — see logs' END
                FROM (
                    SELECT i, date_trunc('hour', now() AT TIME ZONE 'UTC')
                        - (i * interval '5 minutes') AS s
                    FROM generate_series(1, :count) i
                ) slots
                """
            ),
            {"name": name, "count": count},
        )
    conn.execute(text("ANALYZE periodic_slots"))
    conn.execute(text("ANALYZE schedule_states"))


def time_page(client, path: str, requests: int) -> list[float]:
    for _ in range(3):
        assert client.get(path).status_code == 200, path
    samples = []
    for _ in range(requests):
        began = time.perf_counter()
        response = client.get(path)
        samples.append((time.perf_counter() - began) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return samples


def run(quick: bool = False) -> dict[str, Any]:
    big_slots = 10_000 if quick else 105_000
    small_slots = 300 if quick else 2_000
    requests = 20 if quick else 50
    url = os.environ.get("BENCH_SCHEDULES_DATABASE_URL", DEFAULT_URL)
    ensure_postgres_database(url)
    reset_postgres_schema(url)
    folder = tempfile.mkdtemp(prefix="bench-schedules-")
    app = build_app(
        {
            "SQLALCHEMY_DATABASE_URI": url,
            "QUEUE_DRIVER": "sqlite",
            "QUEUE_SQLITE_PATH": f"{folder}/queue.sqlite3",
            "INSTANCE_PATH": folder,
            "SECRET_KEY": "bench",
            "WTF_CSRF_ENABLED": False,
            "LOG_FILE": f"{folder}/log",
        }
    )
    names = declare_extra(SCHEDULES)
    engine = create_engine(url)
    began = time.perf_counter()
    with engine.begin() as conn:
        fill(conn, names, big_slots, small_slots)
        rows = conn.execute(text("SELECT count(*) FROM periodic_slots")).scalar_one()
    engine.dispose()
    fill_seconds = time.perf_counter() - began
    with app.app_context():
        from accounts.permissions import PERMISSIONS
        from accounts.services import create_user
        from extensions import db

        create_user("bench@example.com", "bench password", PERMISSIONS)
        db.session.remove()
    client = app.test_client()
    response = client.post(
        "/login", data={"email": "bench@example.com", "password": "bench password"}
    )
    assert response.status_code == 302, response.status_code
    pages = [
        (f"schedules page, {len(names)} schedules", "/backoffice/schedules", TARGET_MS),
        ("API schedules", "/api/v1/backoffice/schedules", TARGET_MS),
        (f"schedule detail, {big_slots:,} slots", f"/backoffice/schedules/{BIG}", None),
        ("API schedule detail", f"/api/v1/backoffice/schedules/{BIG}", None),
    ]
    figures = []
    for name, path, target in pages:
        samples = time_page(client, path, requests)
        p95 = percentile(samples, 0.95)
        figures.append(
            {
                "name": f"{name} p95",
                "value": round(p95, 1),
                "unit": "ms",
                "target": f"<= {target}" if target else "",
                "ok": p95 <= target if target else None,
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
    notes = (
        f"PostgreSQL, {len(names)} schedules and {rows:,} slot rows (filled in "
        f"{fill_seconds:.1f} s); {requests} signed-in requests per page through the Flask "
        "test client, timed around each request after 3 warm-ups; load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end."
    )
    return {"figures": figures, "notes": notes}


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    print_figures(result)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
