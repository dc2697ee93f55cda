"""The upgrade folds the reasons stored before it (``0019_reason_fold``).

The migration is taken down (the column goes) and up again on the test's database, with
units failed, skipped and completed under reasons with numbers, a period and an error
reference: each reason comes back with the fold the ledger now writes beside it, and a
unit without a reason has none.
"""

from __future__ import annotations

import importlib

from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import select

from extensions import db
from taskrunner.ledger import ledger
from taskrunner.models import TaskRunUnit
from tests.web.backoffice_support import finished_run

migration = importlib.import_module("migrations.versions.0019_reason_fold")
REASONS = {
    "u0": "tenant 7 has no billing address",
    "u1": "no statement for 2026-11, see logs, ref 3f9c0a1b",
    "u2": "vendor timed out after 30 s (attempt 12345)",
}


def run_step(step) -> None:
    db.session.remove()
    with db.engine.begin() as conn:
        with Operations.context(MigrationContext.configure(conn)):
            step()


def stored() -> dict[str, tuple[str | None, str | None]]:
    rows = db.session.execute(
        select(TaskRunUnit.unit_key, TaskRunUnit.last_error, TaskRunUnit.reason_fold)
    ).all()
    db.session.remove()
    return {key: (reason, fold) for key, reason, fold in rows}


def test_the_upgrade_folds_every_reason_stored_before_it(ctx):
    run_uuid = finished_run("tests.old", ["u0", "u1", "u2", "u3"], REASONS)
    before = stored()
    run_step(migration.downgrade)
    try:
        # What an earlier release left: reasons without their fold.
        assert "reason_fold" not in {
            c["name"] for c in db.inspect(db.engine).get_columns("task_run_units")
        }
    finally:
        run_step(migration.upgrade)

    after = stored()
    assert after == before
    assert after == {
        "u0": (REASONS["u0"], "tenant # has no billing address"),
        "u1": (REASONS["u1"], "no statement for 2026-11, see logs, ref #"),
        "u2": (REASONS["u2"], "vendor timed out after # s (attempt #)"),
        "u3": (None, None),
    }
    # The error groups read the folds the upgrade wrote.
    groups = ledger.errors.error_groups(ledger.runs.get_run(run_uuid))
    assert sorted(g.reason for g in groups) == sorted(after[key][1] for key in REASONS)
