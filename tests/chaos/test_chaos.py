"""Chaos: a side-effecting run under SIGKILLs, a wiped queue and a database outage.

The CI-sized twin of ``make chaos`` (``bench/chaos.py``, the same harness). On
PostgreSQL + Redis the database fault is a real restart of the local cluster
under ``CI=true`` (where the suite owns the server); elsewhere it drops the
consumers' connections with ``pg_terminate_backend``, so a developer's shared
server stays up. ``CHAOS_PG_FAULT=restart|terminate|auto`` overrides that.
"""

from __future__ import annotations

import os

import pytest

from bench.chaos import ChaosPlan, ChaosRun
from tests.conftest import BACKEND, IN_CI
from tests.support import process_env

pytestmark = [pytest.mark.chaos, pytest.mark.workers]

CHAOS_SETTINGS = {"TASK_RUNNER_HEARTBEAT_SECONDS": 1, "TASK_RUNNER_NEVER_STARTED_SECONDS": 3}


def run_chaos(make_app, tmp_path, plan: ChaosPlan):
    app = make_app(**CHAOS_SETTINGS)
    report = ChaosRun(app, plan, tmp_path / "consumers", env=process_env(app)).execute()
    print("\n" + report.table())
    return report


def assert_every_unit_accounted_for(report) -> None:
    units = report.units
    assert report.status == "completed"
    # Exactly once in the ledger: one row per key, each completed, the snapshot agrees.
    assert (report.ledger_units, report.ledger_keys) == (units, units)
    assert dict(report.ledger_status) == {"completed": units}
    assert report.snapshot == {"total": units, "completed": units, "failed": 0, "skipped": 0}
    assert report.run_completed_events == 1
    # One side effect per unit, however often a unit really ran.
    assert (report.effect_rows, report.effect_units) == (units, units)
    assert report.executions_max >= 1 and report.executions_mean >= 1
    assert report.consumers_alive_unkilled == report.consumers_unkilled
    assert report.crashes == []
    assert report.violations() == []


@pytest.mark.skipif(BACKEND != "postgres", reason="the PostgreSQL + Redis flavour")
def test_a_run_under_kills_a_wiped_queue_and_a_database_outage_loses_nothing(make_app, tmp_path):
    fault = os.environ.get("CHAOS_PG_FAULT") or ("auto" if IN_CI else "terminate")
    plan = ChaosPlan(units=2000, sleep_ms=40, kill_every=2.0, pg_fault=fault, timeout=240)

    report = run_chaos(make_app, tmp_path, plan)

    assert_every_unit_accounted_for(report)
    assert report.kills >= 3
    assert report.jobs_wiped > 0
    assert report.lost_found["never started"] >= report.jobs_wiped
    assert report.retries >= 1
    # The consumers that lived through the outage are still alive and carried on.
    assert report.pg_fault != "none"
    assert report.witnesses == plan.consumers
    assert report.witnesses_alive == report.witnesses


@pytest.mark.skipif(BACKEND != "sqlite", reason="the SQLite + SqliteHuey flavour")
def test_a_run_under_kills_on_the_embedded_backend_loses_nothing(make_app, tmp_path):
    plan = ChaosPlan(units=2000, sleep_ms=40, kill_every=2.0, pg_fault="none", timeout=240)

    report = run_chaos(make_app, tmp_path, plan)

    assert_every_unit_accounted_for(report)
    assert report.kills >= 3
    assert report.retries >= 1
