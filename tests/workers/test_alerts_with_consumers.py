"""Alerts from runs executed by real consumer processes: the run's close (in a unit
worker) opens the episode, the ``default`` queue's consumer hands the message to the
channel, and the next clean run resolves it."""

from __future__ import annotations

import pytest

from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from tests.alert_receivers import HttpReceiver, verify_signature
from tests.support import Consumers, wait_for

pytestmark = pytest.mark.workers
SECRET = "whsec-consumers-0123"


@pytest.fixture
def hook():
    server = HttpReceiver()
    yield server
    server.close()


def closed(run_uuid: str) -> bool:
    db.session.rollback()
    return ledger.runs.get_run(run_uuid).status != "running"


def test_a_failed_run_on_real_consumers_alerts_and_a_clean_one_resolves(make_app, hook, tmp_path):
    # The consumers get the app's alert settings as flask workers would: from the environment.
    app = make_app(ALERT_WEBHOOK_URL=hook.url, ALERT_WEBHOOK_SECRET=SECRET)
    consumers = Consumers(app, tmp_path)
    try:
        with app.app_context():
            run_both(consumers, hook)
    finally:
        consumers.stop_all()

    opened, resolved = (r.json for r in hook.received)
    assert (opened["kind"], resolved["kind"]) == ("opened", "resolved")
    assert ["Failed units", "4 of 20"] in opened["facts"]
    assert opened["error_groups"][0]["count"] == 4
    assert all(
        verify_signature(SECRET, r.headers["Taskledger-Signature"], r.body) for r in hook.received
    )


def run_both(consumers: Consumers, hook: HttpReceiver) -> None:
    consumers.start("tasks", workers=2)
    consumers.start("default", workers=1)

    failing = runner.start("diagnostics.probe", {"units": 20, "fail_every": 5}, "test")
    wait_for(lambda: len(hook.received) == 1, timeout=60, message="the alert")
    clean = runner.start("diagnostics.probe", {"units": 5}, "test")
    wait_for(lambda: len(hook.received) == 2, timeout=60, message="the resolved alert")

    assert closed(failing.uuid) and closed(clean.uuid)
