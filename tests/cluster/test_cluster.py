"""Many hosts on one machine: the scenario of ``make cluster`` and the network timeouts
it relies on (``bench/cluster.py``, ``bench/cluster_hosts.py``, ``bench/netns.py``).

It builds network namespaces, an own PostgreSQL and Redis, and runs six hosts'
processes for a few minutes, so it runs once per CI run: ``.ci/run`` exports
``TEST_CLUSTER=1`` for its cluster pass (and ``CI=true`` in the PostgreSQL pass turns it
on too; as root, with iproute2 and the server binaries; anything missing fails under
``CI=true``). Elsewhere it runs on demand with ``TEST_CLUSTER=1`` (or ``make cluster``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from contextlib import suppress
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import DBAPIError

from bench.cluster import DRIVERS, ClusterPlan, ClusterScenario
from bench.cluster_hosts import Cluster, require_cluster_prerequisites
from bench.netns import exit_on_sigterm
from extensions import db
from harness import build_app
from tasks.routing import QUEUES
from tests.conftest import BACKEND, IN_CI

pytestmark = [pytest.mark.cluster, pytest.mark.workers]

ENABLED = os.environ.get("TEST_CLUSTER") == "1" or (IN_CI and BACKEND == "postgres")
# Short network timeouts: a partition longer than them must fail fast, then heal.
FAST = {"NETWORK_CONNECT_TIMEOUT_SECONDS": 2, "NETWORK_DEAD_PEER_SECONDS": 4}


@pytest.fixture(scope="module")
def cluster(request):
    if not ENABLED:
        pytest.skip(
            "the cluster scenario runs under CI=true in the PostgreSQL pass, or on demand "
            "with TEST_CLUSTER=1 (make cluster)"
        )
    missing = require_cluster_prerequisites()
    if missing:
        message = "cannot build the cluster here: needs " + ", ".join(missing)
        pytest.fail(message) if IN_CI else pytest.skip(message)
    # Not under pytest's base folder: the PostgreSQL server runs as ``postgres``.
    folder = Path(tempfile.mkdtemp(prefix="cluster-"))
    failed_before = request.session.testsfailed
    built = Cluster(folder)
    with exit_on_sigterm():
        try:
            built.up()
            yield built
        finally:
            built.down()
    if request.session.testsfailed > failed_before:
        print(f"\nthe cluster's logs are kept in {folder}")
    else:
        shutil.rmtree(folder, ignore_errors=True)


def attempt(operation) -> dict:
    """Run ``operation`` in a thread (it inherits this thread's network namespace)."""
    outcome: dict = {}

    def run() -> None:
        started = time.monotonic()
        try:
            outcome["value"] = operation()
        except Exception as exc:  # the failure is the finding
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    outcome["thread"] = thread
    return outcome


def eventually(operation, seconds: float = 15.0):
    """The first answer of ``operation`` within ``seconds``, retrying after errors."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return operation()
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def lock_free(cluster) -> bool:
    """Whether another session can take the lock the cut-off host held (raises while not)."""
    engine = create_engine(cluster.database_url())
    try:
        with engine.connect() as conn:
            if not conn.execute(text("SELECT pg_try_advisory_lock(4215)")).scalar_one():
                raise AssertionError("the cut-off host's session still holds its lock")
            conn.execute(text("SELECT pg_advisory_unlock(4215)"))
            return True
    finally:
        engine.dispose()


def test_a_partition_longer_than_the_dead_peer_time_fails_fast_then_reconnects(cluster):
    cluster.use_driver("postgres")
    host = cluster.consumers["c1"]
    with cluster.net.enter(cluster.operator):
        build_app(cluster.config())  # the schema, for PostgresHuey's tables to sit next to
    with cluster.net.enter(host):
        apps = {
            driver: build_app(
                cluster.config() | FAST | {"QUEUE_DRIVER": driver, "INSTANCE_PATH": "/nonexistent"}
            )
            for driver in DRIVERS
        }

        def ledger_query():
            with apps["redis"].app_context():
                value = db.session.execute(text("SELECT 1")).scalar_one()
                db.session.remove()
                return value

        def queue_size(driver: str):
            def size():
                with apps[driver].app_context():
                    return apps[driver].extensions["queues"].huey("tasks").pending_count()

            return size

        operations = {"ledger": ledger_query, **{d: queue_size(d) for d in DRIVERS}}
        assert {name: op() for name, op in operations.items()} == {
            "ledger": 1,
            "redis": 0,
            "postgres": 0,
        }
        # A transaction of this host holds a lock when the cut comes.
        holder = apps["redis"].app_context()
        holder.push()
        db.session.execute(text("SELECT pg_advisory_xact_lock(4215)"))
        cluster.net.partition(host)
        try:
            outcomes = {name: attempt(op) for name, op in operations.items()}
            with cluster.net.enter(cluster.operator):
                # The database drops the vanished session, and its lock with it.
                released = eventually(lambda: lock_free(cluster), seconds=40)
            for outcome in outcomes.values():
                outcome["thread"].join(timeout=40)
        finally:
            cluster.net.heal(host)
            with suppress(DBAPIError):  # its connection is gone: the server dropped it
                db.session.rollback()
            holder.pop()
        hung = [name for name, outcome in outcomes.items() if outcome["thread"].is_alive()]
        assert hung == [], f"still waiting on a dead network after 40 s: {hung}"
        assert all("error" in outcome for outcome in outcomes.values()), outcomes
        assert released
        # The same engine and queues work again once the link is back: no restart needed
        # (the first call may still meet what the cut left behind; they reconnect).
        assert {name: eventually(op) for name, op in operations.items()} == {
            "ledger": 1,
            "redis": 0,
            "postgres": 0,
        }
        for app in apps.values():
            with app.app_context():
                db.engine.dispose()


@pytest.mark.timeout(900)  # a round takes about two minutes on a busy 2-core machine
@pytest.mark.parametrize("driver", list(DRIVERS))
def test_web_and_consumers_on_many_hosts_survive_deploys_crashes_and_a_partition(
    cluster, driver, capsys
):
    plan = ClusterPlan()
    with cluster.net.enter(cluster.operator):
        report = ClusterScenario(cluster, plan, driver).execute()
    with capsys.disabled():  # the timeline, in the suite's output
        print(f"\n{DRIVERS[driver]}\n{report.timeline.text()}\n{report.table()}")

    # Run completed exactly once, every unit completed, one tasks.run.completed.
    assert (report.status, report.completed, report.unit_rows) == ("completed", 5000, 5000)
    assert (report.run_completed_events, report.run_failed_events) == (1, 0)
    # Side effects = completed attempts, unit by unit: one per recorded completion, one
    # per late completion that was ignored, and at most one per attempt known lost (cut
    # off by the SIGKILL, or interrupted by the deploy and handed back).
    assert report.effect_rows == 5000 and report.units_over_attempts == 0
    assert report.units_over_allowance == []
    # B's run page followed the run live (signed in on A) to its end; every consumer
    # host ran units of it.
    assert report.run_stream_changes >= 2, report.run_stream_error
    assert report.run_stream_finished == "completed", report.run_stream_error
    assert all(report.main_run_hosts.values()), report.main_run_hosts
    # The deploy caught c3 running units and handed them back; none needed a retry.
    assert report.handed_back >= 1
    assert report.handed_back_retried == []
    assert report.stale_after_deploy == 0
    # The partition outlasted three heartbeats; its units were found lost, retried and
    # completed by c1 or c3: the host that ran each one's last job, read from the logs, or
    # the ledger's completion while c2 had no link at all.
    assert report.partition_seconds > report.lost_after_seconds > 0
    assert report.partitioned_stale >= 1
    assert report.partition_retried >= 1 and report.partition_retried_elsewhere, (
        report.partition_retried_hosts,
        report.partition_unattributed,
    )
    # Its late completions were ignored (or it held the unit, and finished it once back).
    assert report.late_completions + report.partition_held >= 1
    assert report.c2_same_processes and report.c2_units_after_heal > 0
    # Periodic tasks: consecutive slots, each run once after its claim, through the
    # overlap and the takeover. A slot may go only with a job a lost `default` consumer
    # held (c1's SIGKILL, c2's cut), at most one per worker of it (docs/deploy.md).
    for name, summary in report.periodic.items():
        assert summary["repeated"] == 0 and summary["outside_faults"] == [], (name, summary)
        assert summary["skipped_in_overlap"] >= 1 and summary["after_kill"] >= 1
    for fault, lost in report.periodic_lost_per_fault().items():
        assert len(lost) <= QUEUES["default"].workers, (fault, lost)
    # The course build streamed live on web host B and ran on all three consumer hosts.
    assert report.build_status == "completed" and report.build_changes >= 4
    assert all(report.build_hosts.values()), report.build_hosts
    # Sessions, CSRF and throttles across web hosts; no 5xx; every process accounted for:
    # each `flask workers` and gunicorn leader exited 0 after its stop (a leader exits
    # non-zero when one of its consumers died or failed), except the one SIGKILLed.
    assert report.session_across_hosts and report.throttled_across_hosts
    assert report.server_errors == {"A": 0, "B": 0}
    assert report.unclean == [] and report.crashes == []
    assert report.violations() == []
