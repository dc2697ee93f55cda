"""A queue that refuses a dispatch after the ledger committed: the runner fails what it
could not queue (the wedge guard), and nothing else; every way in says so in words.

The queue's server going away is outside the process: the enqueue and revoke calls raise
as a client whose server refused the connection does.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select, update

from extensions import db
from taskrunner import dispatch as dispatching
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.models import TaskRunUnit
from tasks.queues import queues
from tests.support import drain
from tests.web.backoffice_support import browser, make_user, sign_in

PROBE = "diagnostics.probe"
REFUSED = "Error 111 connecting to queue.internal:6379. Connection refused."


def refusing(*_args, **_kwargs):
    raise ConnectionError(REFUSED)


def statuses(run_uuid: str) -> dict[str, str]:
    db.session.rollback()
    run = ledger.runs.get_run(run_uuid)
    rows = db.session.execute(
        select(TaskRunUnit.unit_key, TaskRunUnit.status).where(TaskRunUnit.task_run_id == run.id)
    )
    return dict(rows.all())


def test_a_narrow_retry_whose_dispatch_fails_fails_only_the_units_it_retried(ctx, monkeypatch):
    # probe-1 failed; probe-2..5 wait in the queue. Before, the retry's failure failed them
    # all and closed the run: their queued jobs then found nothing to do.
    handle = runner.start(PROBE, {"units": 5, "sleep_ms": 0}, "test")
    db.session.execute(
        update(TaskRunUnit).where(TaskRunUnit.unit_key == "probe-1").values(status="failed")
    )
    db.session.commit()
    with monkeypatch.context() as down:
        down.setattr(dispatching, "enqueue_many", refusing)
        with pytest.raises(ConnectionError):
            runner.retry(handle.uuid, unit_keys=["probe-1"])

    after = statuses(handle.uuid)
    assert after.pop("probe-1") == "failed"
    assert set(after.values()) == {"pending"}
    assert ledger.runs.get_run(handle.uuid).status == "running"
    drain()
    assert set(statuses(handle.uuid).values()) == {"failed", "completed"}
    assert statuses(handle.uuid)["probe-5"] == "completed"


def test_a_resume_whose_first_dispatch_fails_still_dispatches_the_other_runs(ctx, monkeypatch):
    runner.pause(PROBE)
    first = runner.start(PROBE, {"units": 3, "sleep_ms": 0}, "test")
    second = runner.start(PROBE, {"units": 3, "sleep_ms": 0}, "test")
    queues().huey("tasks").flush()  # the jobs of the paused type were handed back
    real, calls = dispatching.enqueue_many, []

    def first_refused(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            refusing()
        return real(*args, **kwargs)

    with monkeypatch.context() as blip:
        blip.setattr(dispatching, "enqueue_many", first_refused)
        with pytest.raises(ConnectionError):
            runner.resume(PROBE)

    # Before, the second run stayed running with three pending units and no job queued.
    assert set(statuses(first.uuid).values()) == {"failed"}
    assert queues().huey("tasks").pending_count() == 3
    drain()
    assert set(statuses(second.uuid).values()) == {"completed"}


def test_a_cancel_whose_revoke_fails_is_still_a_cancel(app, monkeypatch):
    # The run is cancelled before the revoke: its queued jobs find their units skipped.
    with app.app_context():
        handle = runner.start(PROBE, {"units": 2, "sleep_ms": 0}, "test")
    monkeypatch.setattr(dispatching, "revoke_many", refusing)

    result = app.test_cli_runner().invoke(args=["tasks", "cancel", handle.uuid])

    assert result.exit_code == 0, result.output
    with app.app_context():
        assert ledger.runs.get_run(handle.uuid).status == "cancelled"
        drain()
        assert set(statuses(handle.uuid).values()) == {"skipped"}


@pytest.fixture
def manager(app):
    with app.app_context():
        who = make_user("manager@example.com", "task-runner.runs.view", "task-runner.runs.manage")
    web = browser(app)
    sign_in(web, who)
    return web


def post_confirmed(web, path: str):
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value
    return web.post(path, {"csrf_token": token, "confirm": "yes"}, status=302).follow()


def test_the_pages_say_a_dispatch_failed_instead_of_answering_500(app, manager, monkeypatch):
    with app.app_context():
        running = runner.start(PROBE, {"units": 1, "sleep_ms": 0}, "test")
        handle = runner.start(PROBE, {"units": 2, "sleep_ms": 0}, "test")
        failed = TaskRunUnit.task_run_id == ledger.runs.get_run(handle.uuid).id
        db.session.execute(update(TaskRunUnit).where(failed).values(status="failed"))
        db.session.commit()
        runner.pause(PROBE)
        runner.start(PROBE, {"units": 1, "sleep_ms": 0}, "test")  # it waits for the resume
    monkeypatch.setattr(dispatching, "enqueue_many", refusing)
    monkeypatch.setattr(dispatching, "revoke_many", refusing)

    cancelled = post_confirmed(manager, f"/backoffice/task-runs/{running.uuid}/cancel")
    retried = post_confirmed(manager, f"/backoffice/task-runs/{handle.uuid}/retry")
    resumed = post_confirmed(manager, f"/backoffice/task-types/{PROBE}/resume")

    for page in (retried, resumed):
        assert "Dispatch failed: unhandled builtins.ConnectionError" in page.text
        assert "retry them once the queue is back" in page.text
        assert REFUSED not in page.text  # the logs say why, the page names the ref
    assert "Run cancelled" in cancelled.text
