"""Credentials in a domain error's message are never stored, shown or handed to anyone.

Item 1 of the second security review. A unit of a tenant fails with a domain error
carrying an API key, a bearer token, a password in a URL, ``password=``/``token=`` pairs,
names with a prefix (``SMTP_PASSWORD=``, a JSON ``"aws_secret_access_key"``), a quoted
password with a space, an ``Authorization: Token`` header and a card number; the
tenant's pending request is failed with the same error; a subscriber of
``tasks.unit.failed`` refuses the event with the same text. Then every
table, the event handed to the subscriber, every page of the run, the JSON API, the CLI
and the tenant API are searched for the secrets: none is there, while what an operator
needs (the message around them, the card's last four digits) still is.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from sqlalchemy import inspect, select, text

from asyncrequests.models import AsyncRequest
from extensions import db
from taskrunner import runner
from taskrunner.contract import TaskReportableError, subscribe
from taskrunner.ledger import ledger
from tests.leaky_types import FOUND, LEAKY, MESSAGE, REQUEST_KIND, LeakyTask
from tests.web.backoffice_support import VIEW, Operator, browser, make_user, sign_in
from tests.web.tenant_api_support import bearer, tenant_with_token

VIEWER = "viewer@example.com"
SCRUBBED = (
    "vendor refused the export: key sk_live_[redacted], Authorization: Bearer [redacted], "
    "dsn postgresql://u:[redacted]@h/db, retry with password=[redacted]&token=[redacted] "
    "for card [card ····1111]; SMTP_PASSWORD=[redacted] db_password='[redacted]' "
    'Authorization: Token [redacted]; body {"aws_secret_access_key": "[redacted]"}'
)


class Refusing:
    """A subscriber that keeps what it was handed, and refuses it with the secrets."""

    def __init__(self) -> None:
        self.handed: list[Mapping[str, Any]] = []

    def __call__(self, event: Mapping[str, Any]) -> None:
        self.handed.append(event)
        raise TaskReportableError(f"subscriber down: {MESSAGE}")


@pytest.fixture
def leaked(make_app):
    """A failed run of the leaky type, run inline; (app, run uuid, tenant token, subscriber)."""
    app = make_app(QUEUE_IMMEDIATE=True)
    make_app.register(LeakyTask())
    subscriber = Refusing()
    with app.app_context():
        subscribe("tasks.unit.failed", subscriber)
        tenant_id, token = tenant_with_token("Acme")
        handle = runner.start(LEAKY, {"tenant_id": tenant_id, "units": 2}, "test")
        make_user(VIEWER, VIEW)
        db.session.remove()
    return app, handle.uuid, token, subscriber


def every_row() -> str:
    names = inspect(db.engine).get_table_names()
    rows = [repr(db.session.execute(text(f'SELECT * FROM "{name}"')).all()) for name in names]
    db.session.rollback()
    return "\n".join(rows)


def test_no_table_keeps_a_credential_and_the_reason_stays_readable(leaked):
    app, run_uuid, _token, _subscriber = leaked
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        assert (run.status, run.units_failed) == ("failed", 2)
        reasons = {u["last_error"] for u in ledger.runs.run_units_page(run).items}
        request_reasons = set(
            db.session.execute(
                select(AsyncRequest.reason).where(AsyncRequest.kind == REQUEST_KIND)
            ).scalars()
        )
        everything = every_row()

    assert reasons == {SCRUBBED}
    # The tenant's failed request says what the unit says.
    assert request_reasons == {SCRUBBED}
    assert FOUND.findall(everything) == []
    assert "subscriber down: vendor refused the export" in everything  # the delivery error


def test_the_event_handed_to_a_subscriber_carries_no_credential(leaked):
    _app, _run_uuid, _token, subscriber = leaked

    assert len(subscriber.handed) == 2
    assert {event["payload"]["reason"] for event in subscriber.handed} == {SCRUBBED}
    assert FOUND.findall(json.dumps(subscriber.handed)) == []


def test_no_page_json_answer_or_cli_output_shows_a_credential(leaked):
    app, run_uuid, token, _subscriber = leaked
    web = browser(app)
    sign_in(web, Operator(VIEWER))
    pages = [
        f"/backoffice/task-runs/{run_uuid}",
        f"/backoffice/task-runs/{run_uuid}?unit_status=failed",
        f"/backoffice/task-runs/{run_uuid}/units/leak-1",
        f"/backoffice/task-runs/{run_uuid}/errors",
        f"/backoffice/task-runs/{run_uuid}/events",
        "/backoffice/units?key=leak-1",
        "/backoffice/search?q=vendor+refused",
        "/backoffice/parked-events",
        f"/api/v1/backoffice/task-runs/{run_uuid}",
        f"/api/v1/backoffice/task-runs/{run_uuid}/units",
        f"/api/v1/backoffice/task-runs/{run_uuid}/errors",
        "/api/v1/backoffice/units?key=leak-1",
        "/api/v1/backoffice/search?q=vendor+refused",
    ]
    shown = {path: web.get(path).text for path in pages}
    cli = app.test_cli_runner()
    for args in (["tasks", "status", run_uuid], ["tasks", "status", run_uuid, "--json"]):
        result = cli.invoke(args=args)
        assert result.exit_code == 0, result.output
        shown[" ".join(args)] = result.output
    with app.app_context():
        [request_uuid] = db.session.execute(
            select(AsyncRequest.uuid).where(AsyncRequest.subject == "leak-1")
        ).scalars()
    tenant_api = browser(app).get(f"/api/v1/async-requests/{request_uuid}", headers=bearer(token))
    shown["tenant API"] = tenant_api.text

    assert {path: FOUND.findall(body) for path, body in shown.items() if FOUND.search(body)} == {}
    assert "vendor refused the export" in shown[f"/backoffice/task-runs/{run_uuid}/units/leak-1"]
    assert tenant_api.json["reason"] == SCRUBBED
    assert (
        SCRUBBED
        in json.loads(shown[f"tasks status {run_uuid} --json"])["failed_units"][0]["last_error"]
    )


def test_a_schedule_slot_that_raised_a_credential_keeps_and_shows_none(app, monkeypatch):
    name = "taskrunner.relay_events"

    def leaking() -> int:
        raise TaskReportableError(MESSAGE)

    monkeypatch.setattr("taskrunner.delivery.relay", leaking)
    huey = app.extensions["queues"].huey("default")
    [periodic] = [cls for cls in huey._registry._periodic_tasks if cls().name == name]
    with app.app_context():
        make_user(VIEWER, VIEW)
        try:  # Huey logs what the job raised (through the scrubbing layer)
            huey.execute(periodic(kwargs={"slots": ["2026-03-01T12:00:00"]}))
        except TaskReportableError:
            pass
        everything = every_row()
    web = browser(app)
    sign_in(web, Operator(VIEWER))
    shown = {
        path: web.get(path).text
        for path in (f"/backoffice/schedules/{name}", f"/api/v1/backoffice/schedules/{name}")
    }
    shown["cli"] = app.test_cli_runner().invoke(args=["schedules", "show", name]).output

    assert FOUND.findall(everything) == []
    assert {path: FOUND.findall(body) for path, body in shown.items() if FOUND.search(body)} == {}
    assert SCRUBBED in shown["cli"]
