"""The upgrade scrubs what earlier releases stored (``0012_sec_scrub_stored_texts``).

Rows written before the one scrubber -- a unit's ``last_error`` with an API key, an event
payload with a DSN password, a delivery error, an operator action's detail, a course
build's and a tenant request's reason, with control characters -- are written here as
an earlier release left them (raw SQL, past the ledger), then the migration runs on the
test's database: each text comes out as the ledger would store it now, and a clean row
is left untouched.
"""

from __future__ import annotations

import importlib

from alembic.migration import MigrationContext
from alembic.operations import Operations
from sqlalchemy import insert, select, update

from asyncrequests.models import AsyncRequest
from coursebuilder.models import GenerationRun
from extensions import db
from taskrunner.models import EventDelivery, OperatorAction, OutboxEvent, TaskRunUnit
from tests.leaky_types import FOUND, MESSAGE
from tests.web.backoffice_support import finished_run
from tests.web.tenant_api_support import make_tenant

migration = importlib.import_module("migrations.versions.0012_sec_scrub_stored_texts")
OLD_EVENT = "00000000-0000-4000-8000-0000000000e1"
SCRUBBED_HEAD = "vendor refused the export: key sk_live_[redacted], Authorization: Bearer"


def run_migration() -> None:
    with db.engine.begin() as conn:
        with Operations.context(MigrationContext.configure(conn)):
            migration.upgrade()


def test_the_upgrade_scrubs_every_text_stored_before_it(ctx):
    run_uuid = finished_run("tests.old", ["old-1", "old-2"], {"old-1": "placeholder"})
    tenant_id = make_tenant("Acme")
    # No NUL: PostgreSQL never let an earlier release store one.
    dirty = f"{MESSAGE}\x1b[31m\x07"
    run = db.session.execute(select(OutboxEvent.task_run_id).limit(1)).scalar_one()
    event_id = db.session.execute(select(OutboxEvent.event_id).limit(1)).scalar_one()
    db.session.execute(
        update(TaskRunUnit).where(TaskRunUnit.unit_key == "old-1").values(last_error=dirty)
    )
    db.session.execute(
        insert(OutboxEvent).values(
            event_id=OLD_EVENT,
            name="tasks.unit.failed",
            task_run_id=run,
            payload={"run_uuid": run_uuid, "reason": dirty, "nested": [{"why": MESSAGE}]},
        )
    )
    db.session.execute(
        insert(EventDelivery).values(
            event_id=event_id, subscriber="old.subscriber", last_error=dirty
        )
    )
    db.session.execute(
        insert(OperatorAction).values(
            task_run_id=run, action="retry", actor="cli", source="cli", detail={"reason": dirty}
        )
    )
    db.session.execute(
        insert(AsyncRequest).values(
            uuid="00000000-0000-4000-8000-0000000000a1",
            tenant_id=tenant_id,
            kind="payments.statement",
            subject="2025-10",
            status="failed",
            reason=dirty,
        )
    )
    db.session.add(
        GenerationRun(
            tenant_id=tenant_id,
            title="Tides",
            status="failed",
            stage="outline",
            failure_reason=dirty,
        )
    )
    db.session.commit()
    clean_before = db.session.execute(
        select(TaskRunUnit.last_error, TaskRunUnit.updated_at).where(
            TaskRunUnit.unit_key == "old-2"
        )
    ).one()

    run_migration()
    run_migration()  # a second pass finds nothing left to change

    db.session.rollback()
    texts = [
        db.session.execute(
            select(TaskRunUnit.last_error).where(TaskRunUnit.unit_key == "old-1")
        ).scalar_one(),
        db.session.execute(select(EventDelivery.last_error)).scalar_one(),
        db.session.execute(select(AsyncRequest.reason)).scalar_one(),
        db.session.execute(select(GenerationRun.failure_reason)).scalar_one(),
        db.session.execute(select(OperatorAction.detail)).scalar_one()["reason"],
    ]
    payload = db.session.execute(
        select(OutboxEvent.payload).where(OutboxEvent.event_id == OLD_EVENT)
    ).scalar_one()
    assert all(text.startswith(SCRUBBED_HEAD) for text in texts), texts
    assert not [t for t in texts if FOUND.search(t) or "\x1b" in t or "\x07" in t]
    assert payload["reason"] == texts[0] and payload["run_uuid"] == run_uuid
    assert payload["nested"][0]["why"].startswith(SCRUBBED_HEAD)
    assert (
        db.session.execute(
            select(TaskRunUnit.last_error, TaskRunUnit.updated_at).where(
                TaskRunUnit.unit_key == "old-2"
            )
        ).one()
        == clean_before
    )
