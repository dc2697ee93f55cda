"""A tenant's statement request served end to end by a real consumer."""

from __future__ import annotations

import pytest
import webtest
from sqlalchemy import select

from extensions import db
from payments.models import Statement
from payments.statements import TYPE
from taskrunner.ledger import ledger
from tests.support import see_logs, wait_for
from tests.web.tenant_api_support import (
    DRIVER_SECRET,
    PERIOD,
    bearer,
    statements_table_failing,
    tenant_with_token,
)

pytestmark = pytest.mark.workers

REQUESTS = "/api/v1/statements/requests"


def poll_until_settled(client, location: str, token: str):
    def settled():
        res = client.get(location, headers=bearer(token))
        return res if res.json["status"] != "pending" else None

    return wait_for(settled, timeout=60, interval=0.2, message="the request to settle")


def test_a_requested_statement_is_made_by_the_consumer_and_downloads(app, consumers):
    client = webtest.TestApp(app)
    with app.app_context():
        tenant_id, token = tenant_with_token("Acme")

    asked = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)
    location = asked.headers["Location"]
    pending = client.get(location, headers=bearer(token))
    assert pending.json["status"] == "pending"
    assert int(pending.headers["Retry-After"]) > 0

    consumers.start("tasks", workers=1)
    done = poll_until_settled(client, location, token)

    assert done.json["status"] == "completed", consumers.logs()
    assert "Retry-After" not in done.headers
    link = done.json["links"]["statement"]
    assert link.endswith(done.json["result"]["download_path"])
    download = client.get(link, headers=bearer(token))
    assert "attachment" in download.headers["Content-Disposition"]
    with app.app_context():
        statement = db.session.execute(
            select(Statement).where(Statement.tenant_id == tenant_id)
        ).scalar_one()
        assert download.json == {
            "id": statement.id,
            "period": PERIOD,
            "total_cents": statement.total_cents,
            "currency": statement.currency,
            "lines": statement.lines,
            "generated_at": statement.generated_at.isoformat(timespec="seconds") + "Z",
        }
        # The job settles the request first; the wrapper closes the unit and the run after it.
        [run] = wait_for(closed_runs, timeout=30, message="the run to close")
        assert (run.status, run.units_total, run.units_completed) == ("completed", 1, 1)


def test_a_failing_statement_unit_fails_the_request_with_the_redacted_reason(app, consumers):
    client = webtest.TestApp(app)
    with app.app_context():
        _tenant_id, token = tenant_with_token("Acme")

    with statements_table_failing(app):
        asked = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(token), status=202)
        consumers.start("tasks", workers=1)
        done = poll_until_settled(client, asked.headers["Location"], token)

    assert done.json["status"] == "failed", consumers.logs()
    reason = done.json["reason"]
    assert see_logs(r"sqlalchemy\.exc\.\w+").fullmatch(reason), reason
    assert DRIVER_SECRET not in done.text and "insert refused" not in done.text
    assert done.json["result"] is None and "statement" not in done.json["links"]
    # The unit failed too, with the very same reason; the driver message went to the log
    # only, scrubbed, on the line that carries the reason's reference.
    with app.app_context():
        [run] = wait_for(closed_runs, timeout=30, message="the run to close")
        assert run.status == "failed"
        [unit] = ledger.runs.run_units_page(run, status="failed").items
        assert unit["last_error"] == reason
        for table in db.metadata.sorted_tables:
            for row in db.session.execute(table.select()).all():
                assert DRIVER_SECRET not in repr(tuple(row)), table.name
    logs = consumers.logs()
    assert "insert refused" in logs and "sk_live_[redacted]" in logs
    assert DRIVER_SECRET not in logs
    assert f"[{reason.rsplit(', ', 1)[1]}]" in logs


def closed_runs() -> list:
    db.session.rollback()
    return [run for run in ledger.runs.runs_page(type_=TYPE).items if run.status != "running"]
