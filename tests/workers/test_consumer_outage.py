"""A real consumer rides out a database outage: it backs off, logs one warning and one
"reachable again" line per episode and no traceback, loses nothing, and recovers alone.

The consumer serves the io lane (thread workers: one process, one episode to count) on
the PostgreSQL queue, so the ledger and the queue go down together. The outage is real:
the test database stops taking connections (``ALLOW_CONNECTIONS false``, restored after)
and the consumer's backends are terminated (``pg_terminate_backend``) again and again.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from diagnostics.probe import TYPE, VENDOR_TYPE
from extensions import db
from harness import process_tree
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.operations import run_report
from tests.conftest import BACKEND, PG_URL
from tests.support import Consumers, wait_for

pytestmark = [
    pytest.mark.workers,
    pytest.mark.skipif(BACKEND != "postgres", reason="a PostgreSQL server refusing"),
]

UNITS = 40
WARNING = "Database unavailable ("
RECOVERED = "Database reachable again after"


@pytest.fixture
def outage_ctx(make_app, tmp_path):
    app = make_app(
        QUEUE_DRIVER="postgres",
        TASK_RUNNER_HEARTBEAT_SECONDS=1,
        CONSUMER_HEARTBEAT_SECONDS=0.5,
        NETWORK_CONNECT_TIMEOUT_SECONDS=2,
    )
    pool = Consumers(app, tmp_path)
    with app.app_context():
        yield pool
    pool.stop_all()


@contextmanager
def database_refusing(consumer) -> Iterator[callable]:
    """The test database takes no new connection; yields a function that terminates the
    consumer's backends (again). Restored whatever happens."""
    name = make_url(PG_URL).database
    admin = create_engine(make_url(PG_URL).set(database="postgres"), isolation_level="AUTOCOMMIT")

    def terminate() -> None:
        with admin.connect() as conn:
            conn.execute(
                text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE datname = :db AND application_name LIKE 'taskledger-consumer %'"
                    " AND split_part(application_name, ' ', 2)::int = ANY(:pids)"
                ),
                {"db": name, "pids": process_tree(consumer.pid)},
            )

    with admin.connect() as conn:
        conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false'))
    try:
        terminate()
        yield terminate
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true'))
        admin.dispose()


def report(run_uuid: str) -> dict:
    db.session.rollback()
    return run_report(ledger.runs.get_run(run_uuid))


def test_a_consumer_backs_off_through_outages_says_so_once_each_and_every_unit_ends(
    outage_ctx,
):
    consumer = outage_ctx.start("io", workers=6, worker_type="thread")
    handle = runner.start(VENDOR_TYPE, {"units": UNITS, "sleep_ms": 400}, "test")
    ride_out_two_outages(outage_ctx, consumer, handle)

    log = outage_ctx.log_of(consumer)
    assert log.count(WARNING) == 2, log[-3000:]  # threads: one process, one per episode
    assert log.count(RECOVERED) == 2


def test_each_process_of_a_process_consumer_says_so_once_an_episode_and_every_unit_ends(
    outage_ctx,
):
    consumer = outage_ctx.start("tasks", workers=2)
    handle = runner.start(TYPE, {"units": UNITS, "sleep_ms": 200}, "test")
    ride_out_two_outages(outage_ctx, consumer, handle)

    said = Counter()
    for line in outage_ctx.log_of(consumer).splitlines():
        if "tasks.outages:" in line:
            pid = line.split()[3]
            said[(pid, "unavailable" if WARNING in line else "recovered")] += 1
    pids = {pid for pid, _ in said}
    assert pids  # the main process, its scheduler, its workers: each on its own
    for pid in pids:
        assert said[(pid, "unavailable")] <= 2
        assert said[(pid, "unavailable")] == said[(pid, "recovered")], said


def ride_out_two_outages(outage_ctx, consumer, handle) -> None:
    """Two outages while a run runs; then every unit ends, and nothing was a traceback."""

    def left() -> str:
        # What is left, and what the consumer last said, to tell a slow machine from a
        # consumer or a unit left behind.
        units = report(handle.uuid)["units"]
        return f"units {units}; the consumer's log:\n{outage_ctx.log_of(consumer)[-4000:]}"

    wait_for(
        lambda: report(handle.uuid)["units"]["completed"] >= 6,
        timeout=60,
        message="six units done",
        detail=left,
    )
    for seconds in (8, 4):
        said = outage_ctx.log_of(consumer).count(WARNING)
        with database_refusing(consumer) as terminate:
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                time.sleep(1)
                terminate()  # anything that got through is cut again
        wait_for(
            lambda said=said: (
                outage_ctx.log_of(consumer).count(WARNING) > said
                and outage_ctx.log_of(consumer).count(RECOVERED)
                == outage_ctx.log_of(consumer).count(WARNING)
            ),
            timeout=60,
            message="the consumer recovering on its own",
            detail=left,
        )
    wait_for(
        lambda: report(handle.uuid)["status"] != "running",
        timeout=120,
        message="every unit to end",
        detail=left,
    )
    final = report(handle.uuid)
    assert final["units"]["completed"] == UNITS, final["units"]
    assert consumer.poll() is None  # still serving
    log = outage_ctx.log_of(consumer)
    assert "Traceback" not in log, log[-3000:]
