"""The consumers' connection budget, counted on a real PostgreSQL server.

Real ``huey_consumer`` processes on the PostgreSQL queue (PostgresHuey) and the ledger
in the same server; every connection names its process (``application_name``: the
name, the pid, ``ledger`` or ``queue``), so ``pg_stat_activity`` says what each process
of a consumer holds: idle, and busy with many threads. ``flask workers`` refuses to start
when the server has no room for its plan (a role with a ``CONNECTION LIMIT``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections import Counter

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from diagnostics.probe import TYPE, VENDOR_TYPE
from extensions import db
from harness import process_tree
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.operations import run_report
from tasks.budget import CONSUMER_APPLICATION_NAME, LEDGER_CONNECTIONS, QUEUE_CONNECTIONS
from tasks.workers import connection_plan, plan
from tests.conftest import BACKEND, PG_URL
from tests.support import ROOT, Consumers, process_env, wait_for

pytestmark = [
    pytest.mark.workers,
    pytest.mark.skipif(BACKEND != "postgres", reason="counts PostgreSQL backends"),
]

THREADS = 16
LIMITED_ROLE = "taskledger_budget_limited"


@pytest.fixture
def pg_queue(make_app, tmp_path):
    app = make_app(
        QUEUE_DRIVER="postgres", TASK_RUNNER_HEARTBEAT_SECONDS=1, CONSUMER_HEARTBEAT_SECONDS=0.3
    )
    pool = Consumers(app, tmp_path)
    with app.app_context():
        yield pool
    pool.stop_all()


def held(process: subprocess.Popen) -> dict[int, Counter]:
    """What each process of a consumer holds now: pid -> {"ledger": n, "queue": n}."""
    tree = set(process_tree(process.pid))
    rows = db.session.execute(
        text("SELECT application_name FROM pg_stat_activity WHERE application_name LIKE :name"),
        {"name": f"{CONSUMER_APPLICATION_NAME} %"},
    ).scalars()
    db.session.rollback()
    found: dict[int, Counter] = {}
    for name in rows:
        _, pid, kind = name.split(" ")
        if int(pid) in tree:
            found.setdefault(int(pid), Counter())[kind] += 1
    return found


def worst(process: subprocess.Popen, seconds: float) -> dict[int, Counter]:
    """The most each process held at once over a few samples."""
    most: dict[int, Counter] = {}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for pid, kinds in held(process).items():
            most[pid] = most.get(pid, Counter()) | kinds
        time.sleep(0.1)
    return most


def within_budget(most: dict[int, Counter]) -> bool:
    return all(
        k["ledger"] <= LEDGER_CONNECTIONS and k["queue"] <= QUEUE_CONNECTIONS for k in most.values()
    )


def counts(run_uuid: str) -> dict[str, int]:
    db.session.rollback()
    run = ledger.runs.get_run(run_uuid)
    return {"running": run_report(run)["units"]["running"], "status": run.status}


def test_a_consumer_of_many_threads_holds_two_ledger_and_two_queue_connections_idle_and_busy(
    pg_queue,
):
    consumer = pg_queue.start("io", workers=THREADS, worker_type="thread")
    wait_for(lambda: held(consumer), timeout=30, message="the consumer's first connections")

    idle = worst(consumer, 2)
    assert len(idle) == 1, idle  # threads: one process
    assert within_budget(idle), idle

    handle = runner.start(VENDOR_TYPE, {"units": 48, "sleep_ms": 600}, "test")
    wait_for(
        lambda: counts(handle.uuid)["running"] >= THREADS // 2,
        timeout=60,
        message="many threads running units at once",
    )
    busy = worst(consumer, 3)
    assert within_budget(busy), busy
    wait_for(lambda: counts(handle.uuid)["status"] == "completed", timeout=120)
    assert ledger.runs.get_run(handle.uuid).units_completed == 48


def test_each_process_of_a_process_consumer_stays_within_its_plan_while_busy(pg_queue):
    consumer = pg_queue.start("tasks", workers=2)
    handle = runner.start(TYPE, {"units": 30, "sleep_ms": 200}, "test")
    wait_for(lambda: counts(handle.uuid)["running"] >= 2, timeout=60, message="both busy")

    busy = worst(consumer, 3)
    [main, scheduler, workers] = connection_plan(plan("per-queue", ["tasks"]), True)
    assert within_budget(busy), busy
    assert busy.get(consumer.pid, Counter())["ledger"] <= main.ledger
    assert busy.get(consumer.pid, Counter())["queue"] == main.queue == 0
    # The scheduler and each process worker: one connection to the queue.
    assert all(k["queue"] <= workers.queue == scheduler.queue == 1 for k in busy.values())
    total = sum(sum(kinds.values()) for kinds in busy.values())
    assert total <= main.connections + scheduler.connections + workers.connections
    wait_for(lambda: counts(handle.uuid)["status"] == "completed", timeout=120)


@pytest.fixture
def limited_role_url():
    """A login role with ``CONNECTION LIMIT 3`` on the test database, dropped after."""
    admin = create_engine(PG_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"DROP ROLE IF EXISTS {LIMITED_ROLE}"))
        conn.execute(text(f"CREATE ROLE {LIMITED_ROLE} LOGIN CONNECTION LIMIT 3"))
    yield make_url(PG_URL).set(username=LIMITED_ROLE).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = :r"),
            {"r": LIMITED_ROLE},
        )
        conn.execute(text(f"DROP ROLE IF EXISTS {LIMITED_ROLE}"))
    admin.dispose()


def test_flask_workers_refuses_to_start_with_one_line_when_the_role_limit_has_no_room(
    app, limited_role_url
):
    env = process_env(app, DATABASE_URL=limited_role_url, QUEUE_DRIVER="postgres")
    result = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "workers"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert result.returncode == 1
    [line] = result.stderr.strip().splitlines()
    assert "the consumers may hold 33 connections but the server allows 3 more" in line
    assert "role limit 3 - 0 in use" in line
    assert "starting" not in result.stderr + result.stdout  # no consumer was started
