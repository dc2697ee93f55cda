"""``0023_identifier_fold`` writes again the folds of reasons stored before it.

Units failed under an earlier release kept folds with their request ids unfolded, one
error group each. The upgrade folds them as the ledger now does; the downgrade writes
them back as the earlier release folds them.
"""

from __future__ import annotations

import importlib

from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import select, update

from extensions import db
from taskrunner.ledger import ledger
from taskrunner.ledger.reason_fold import fold_numbers
from taskrunner.models import TaskRunUnit
from tests.web.backoffice_support import finished_run

migration = importlib.import_module("migrations.versions.0023_identifier_fold")
REASONS = {
    "u0": "vendor error, request id 3f2a9c1e-0b7d-4e21-9a3c-5d6e7f809a1b",
    "u1": "vendor error, request id 0c4d5e6f-1a2b-4c3d-8e9f-a0b1c2d3e4f5",
    "u2": "tenant 7 has no billing address",
}


def run_step(step) -> None:
    db.session.remove()
    with db.engine.begin() as conn:
        with Operations.context(MigrationContext.configure(conn)):
            step()


def folds() -> dict[str, str | None]:
    rows = db.session.execute(select(TaskRunUnit.unit_key, TaskRunUnit.reason_fold)).all()
    db.session.remove()
    return dict(rows)


def test_the_upgrade_folds_the_identifiers_of_reasons_stored_before_it(ctx):
    run_uuid = finished_run("tests.old", ["u0", "u1", "u2", "u3"], REASONS)
    now = folds()
    # What an earlier release stored: its own fold of each reason.
    for key, reason in REASONS.items():
        db.session.execute(
            update(TaskRunUnit)
            .where(TaskRunUnit.unit_key == key)
            .values(reason_fold=fold_numbers(reason))
        )
    db.session.commit()
    earlier = folds()
    assert earlier["u0"] != earlier["u1"]

    run_step(migration.upgrade)
    assert (
        folds()
        == now
        == {
            "u0": "vendor error, request id #",
            "u1": "vendor error, request id #",
            "u2": "tenant # has no billing address",
            "u3": None,
        }
    )
    groups = ledger.errors.error_groups(ledger.runs.get_run(run_uuid))
    assert {g.reason: g.count for g in groups} == {
        "vendor error, request id #": 2,
        "tenant # has no billing address": 1,
    }

    run_step(migration.downgrade)
    assert folds() == earlier
