"""Runs on an inline (immediate) queue: the wrapper's rules without processes."""

from __future__ import annotations

from sqlalchemy import func, select

from diagnostics.probe import FAKE_SECRET
from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.models import TaskRunUnit
from tests.support import see_logs


def test_failing_units_are_contained_and_the_run_closes_with_failures(inline_ctx):
    handle = runner.start(
        "diagnostics.probe", {"units": 30, "fail_every": 7, "vendor_fail_every": 5}, "test"
    )

    run = ledger.runs.get_run(handle.uuid)
    assert run.status == "completed_with_failures"
    # 7, 14, 21, 28 fail as domain errors; 5, 10, 15, 20, 25, 30 as vendor errors.
    assert (run.units_total, run.units_completed, run.units_failed) == (30, 20, 10)
    errors = dict(
        db.session.execute(
            select(TaskRunUnit.unit_key, TaskRunUnit.last_error).where(
                TaskRunUnit.status == "failed"
            )
        ).all()
    )
    assert errors["probe-7"] == "probe unit 7 failed"
    assert see_logs(r"sqlalchemy\.exc\.OperationalError").fullmatch(errors["probe-5"])
    assert not any(FAKE_SECRET in e for e in errors.values())


def test_a_run_with_no_units_is_closed_at_once_as_completed(inline_ctx):
    handle = runner.start("diagnostics.probe", {"units": 0}, "test")

    run = ledger.runs.get_run(handle.uuid)
    assert run.status == "completed"
    assert run.finished_at is not None
    assert ledger.runs.count_events("tasks.run.completed", run) == 1
    assert db.session.scalar(select(func.count()).select_from(TaskRunUnit)) == 0


def test_each_unit_runs_inside_its_tenant_and_leaves_it_after(inline_ctx, controlled):
    from tenancy.context import current_tenant_id

    seen = {}
    controlled.during = lambda unit: seen.__setitem__(unit.key, current_tenant_id())
    controlled.failing = {"k2"}

    runner.start("tests.controlled", {"units": 3, "tenants": True}, "test")

    assert seen == {"k1": 1, "k2": 2, "k3": 3}
    assert current_tenant_id() is None  # left even after a failure
