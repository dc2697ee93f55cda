"""A 1,000-unit probe run executed by real huey_consumer processes."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from diagnostics.probe import FAKE_CARD, FAKE_SECRET
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from tests.support import see_logs, wait_for

pytestmark = pytest.mark.workers


def run_status(run_uuid: str) -> str:
    db.session.rollback()
    return ledger.runs.get_run(run_uuid).status


def test_a_thousand_unit_probe_run_ends_with_exact_counts_and_no_secret(ctx, consumers):
    consumers.start("tasks", workers=2)
    consumers.start("tasks", workers=2)

    handle = runner.start(
        "diagnostics.probe", {"units": 1000, "fail_every": 10, "vendor_fail_every": 7}, "test"
    )
    wait_for(lambda: run_status(handle.uuid) != "running", timeout=120, message="run to close")

    run = ledger.runs.get_run(handle.uuid)
    # Domain failures: multiples of 10 (100). Vendor: multiples of 7 but not 10 (142 - 14).
    assert run.status == "completed_with_failures"
    assert (run.units_total, run.units_failed, run.units_completed) == (1000, 228, 772)
    assert ledger.runs.count_events("tasks.run.completed", run) == 0
    assert ledger.runs.count_events("tasks.run.failed", run) == 1
    assert ledger.runs.count_events("tasks.unit.failed", run) == 228
    vendor = ledger.runs.run_units_page(run, status="failed", limit=1000).items
    reasons = {u["last_error"] for u in vendor}
    vendor_reasons = [r for r in reasons if r.startswith("unhandled")]
    assert len(vendor_reasons) == 128, "one error reference per failed unit"
    assert all(see_logs(r"sqlalchemy\.exc\.OperationalError").fullmatch(r) for r in vendor_reasons)
    assert "probe unit 10 failed" in reasons
    assert all(u["attempts"] == 1 for u in vendor)
    for secret in (FAKE_SECRET, FAKE_CARD):
        assert_nowhere_in_database(secret)


def assert_nowhere_in_database(needle: str) -> None:
    for table in db.metadata.sorted_tables:
        rows = db.session.execute(table.select()).all()
        for row in rows:
            assert needle not in repr(tuple(row)), f"{needle!r} found in {table.name}"
    db.session.execute(text("SELECT 1"))


def test_four_workers_finishing_together_close_each_run_exactly_once(ctx, consumers):
    consumers.start("tasks", workers=4)
    # Four units of equal length on four workers: the last ones finish at the same moment.
    handles = [
        runner.start("diagnostics.probe", {"units": 4, "sleep_ms": 300}, "test") for _ in range(8)
    ]

    for handle in handles:
        wait_for(
            lambda h=handle: run_status(h.uuid) != "running", timeout=60, message="run to close"
        )
    for handle in handles:
        run = ledger.runs.get_run(handle.uuid)
        assert (run.status, run.units_completed) == ("completed", 4)
        assert ledger.runs.count_events("tasks.run.completed", run) == 1
        assert ledger.runs.count_events("tasks.run.failed", run) == 0
