"""Retry and cancel through the real forms: the ledger changes and an operator action is kept."""

from __future__ import annotations

import re

from sqlalchemy import select

from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.models import TaskRunUnit
from tests.support import drain
from tests.unit.test_cli_refusals import database_refusing_inserts_into
from tests.web.backoffice_support import ADDRESS, browser, make_user, sign_in
from tests.web.test_schedules_pages import unreachable_queue


def submit_button(page, name: str):
    """The form on ``page`` whose button is called ``name``, submitted."""
    for form in page.forms.values():
        if name in form.fields:
            return form.submit(name)
    raise AssertionError(f"no form with a {name!r} button")


def manager_on(app):
    with app.app_context():
        manager = make_user(
            "manager@example.com", "task-runner.runs.view", "task-runner.runs.manage"
        )
    web = browser(app)
    sign_in(web, manager)
    return web


def test_retry_of_failed_units_through_the_form_reruns_only_those(inline_app, controlled):
    controlled.failing = {"k2", "k4"}
    with inline_app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 5, "tenants": 1}, "test").uuid
        assert ledger.runs.get_run(run_uuid).status == "completed_with_failures"
    controlled.failing.clear()
    web = manager_on(inline_app)

    page = web.get(f"/backoffice/task-runs/{run_uuid}")
    confirm = submit_button(page, "retry-failed")
    assert "2 units" in confirm.text
    assert ledger_unchanged(inline_app, run_uuid, "completed_with_failures")
    done = confirm.forms["confirm"].submit().follow()

    assert "Retrying 2 units." in done.text
    assert dict(controlled.executions) == {"k1": 1, "k2": 2, "k3": 1, "k4": 2, "k5": 1}
    with inline_app.app_context():
        run = ledger.runs.get_run(run_uuid)
        assert run.status == "completed"
        assert (run.units_completed, run.units_failed) == (5, 0)
        [action] = ledger.runs.run_actions(run)
        assert (action.action, action.actor, action.source, action.address) == (
            "retry",
            "manager@example.com",
            "web",
            ADDRESS,
        )
        assert action.detail["failed_only"] is True and action.detail["units"] == 2
    assert "manager@example.com" in done.text


def ledger_unchanged(app, run_uuid: str, status: str) -> bool:
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        return run.status == status and ledger.runs.run_actions(run) == []


def test_cancel_through_the_form_skips_the_pending_units(app, controlled):
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 3}, "test").uuid
    web = manager_on(app)

    confirm = submit_button(web.get(f"/backoffice/task-runs/{run_uuid}"), "cancel")
    assert "3 units" in confirm.text
    done = confirm.forms["confirm"].submit().follow()

    assert "Run cancelled; 3 units skipped." in done.text
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        assert run.status == "cancelled" and run.units_skipped == 3
        [action] = ledger.runs.run_actions(run)
        assert (action.action, action.actor, action.address) == (
            "cancel",
            "manager@example.com",
            ADDRESS,
        )
    assert "Cancel run" not in done.text


def test_a_post_without_the_csrf_token_is_refused_and_changes_nothing(app, controlled):
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 2}, "test").uuid
    web = manager_on(app)

    for action in ("cancel", "retry"):
        response = web.post(
            f"/backoffice/task-runs/{run_uuid}/{action}", {"confirm": "yes"}, status=400
        )
        assert "security token" in response.text
    assert ledger_unchanged(app, run_uuid, "running")


def test_a_refused_retry_comes_back_as_a_flash_message(app, controlled):
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 2}, "test").uuid
        runner.cancel(run_uuid)
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

    done = web.post(
        f"/backoffice/task-runs/{run_uuid}/retry", {"csrf_token": token, "confirm": "yes"}
    ).follow()

    assert "Nothing retried:" in done.text and "is cancelled" in done.text


def test_the_stale_units_page_retries_them_after_a_confirmation(make_app, controlled):
    # A heartbeat interval of 0 makes any running unit count as "worker lost" at once.
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=0)
    with app.app_context():
        dispatch = ledger.transitions.create_run(
            controlled.type(), {}, "test", controlled.units({"units": 3}), 100
        )
        first = ledger.transitions.dispatch_batch(dispatch, 0, 1)[0]
        assert ledger.transitions.claim(first, dispatch.token) is not None
    web = manager_on(app)

    page = web.get("/backoffice/stale-units")
    assert "worker lost" in page.text and "k1" in page.text
    confirm = page.forms[1].submit()
    assert "1 stale unit" in confirm.text
    done = confirm.forms["confirm"].submit().follow()

    assert "Retrying 1 stale unit." in done.text
    assert "Nothing is stale" in done.text
    with app.app_context():
        run = ledger.runs.get_run(dispatch.run_uuid)
        unit = ledger.runs.find_unit(run, "k1")
        assert (unit["status"], unit["attempts"]) == ("pending", 1)
        [action] = ledger.runs.run_actions(run)
        assert action.detail["stale_only"] is True and action.source == "web"


def test_a_retry_the_database_refuses_to_record_is_no_dispatch_failure(app, controlled, caplog):
    controlled.failing = {"k1"}
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 2}, "test").uuid
        drain()
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

    with database_refusing_inserts_into(app, "operator_actions"):
        done = web.post(
            f"/backoffice/task-runs/{run_uuid}/retry",
            {"csrf_token": token, "confirm": "yes", "failed_only": "1"},
        ).follow()

    [flash] = [p.get_text() for p in done.html.select(".flash")]
    assert flash.startswith(f"Nothing retried: a retry of run {run_uuid} could not be recorded")
    assert "Dispatch failed" not in done.text and "secret-laden" not in done.text
    ref = re.search(r"ref ([0-9a-f]{8})", flash).group(1)
    assert any(ref in record.getMessage() for record in caplog.records)
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        assert run.status == "completed_with_failures" and ledger.runs.run_actions(run) == []


def test_a_resume_the_database_refuses_to_record_is_no_dispatch_failure(app, controlled):
    with app.app_context():
        runner.pause(controlled.type())
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

    with database_refusing_inserts_into(app, "operator_actions"):
        done = web.post(
            f"/backoffice/task-types/{controlled.type()}/resume",
            {"csrf_token": token, "confirm": "yes"},
        ).follow()

    [flash] = [p.get_text() for p in done.html.select(".flash")]
    assert flash.startswith(f"Not resumed: the resume of {controlled.type()} could not be")
    assert "Dispatch failed" not in done.text
    with app.app_context():
        assert ledger.actions.is_paused(controlled.type())


def test_a_cancel_or_pause_the_database_refuses_to_record_is_a_message_not_a_500(app, controlled):
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 2}, "test").uuid
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

    with database_refusing_inserts_into(app, "operator_actions"):
        cancelled = web.post(
            f"/backoffice/task-runs/{run_uuid}/cancel", {"csrf_token": token, "confirm": "yes"}
        ).follow()
        paused = web.post(
            f"/backoffice/task-types/{controlled.type()}/pause",
            {"csrf_token": token, "confirm": "yes"},
        ).follow()

    [said] = [p.get_text() for p in cancelled.html.select(".flash")]
    assert said.startswith(f"Not cancelled: the cancel of run {run_uuid} could not be recorded")
    [said] = [p.get_text() for p in paused.html.select(".flash")]
    assert said.startswith(f"Not paused: the pause of {controlled.type()} could not be recorded")
    with app.app_context():
        assert ledger.runs.get_run(run_uuid).status == "running"
        assert not ledger.actions.is_paused(controlled.type())


def test_a_stale_retry_the_database_refuses_to_record_is_skipped_with_its_reason(
    make_app, controlled
):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=0)  # a running unit is "worker lost" at once
    with app.app_context():
        dispatch = ledger.transitions.create_run(
            controlled.type(), {}, "test", controlled.units({"units": 2}), 100
        )
        first = ledger.transitions.dispatch_batch(dispatch, 0, 1)[0]
        assert ledger.transitions.claim(first, dispatch.token) is not None
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

    with database_refusing_inserts_into(app, "operator_actions"):
        done = web.post(
            "/backoffice/stale-units/retry", {"csrf_token": token, "confirm": "yes"}
        ).follow()

    said = [p.get_text() for p in done.html.select(".flash")]
    assert said[0].startswith(f"Skipped: a retry of run {dispatch.run_uuid} could not be")
    assert said[1] == "Retrying 0 stale units."
    with app.app_context():
        run = ledger.runs.get_run(dispatch.run_uuid)
        assert ledger.runs.find_unit(run, "k1")["status"] == "running"


def test_a_stale_retry_the_queue_refuses_says_the_dispatch_failed(make_app, controlled, tmp_path):
    with unreachable_queue(make_app, tmp_path, TASK_RUNNER_HEARTBEAT_SECONDS=0) as app:
        with app.app_context():
            dispatch = ledger.transitions.create_run(
                controlled.type(), {}, "test", controlled.units({"units": 2}), 100
            )
            first = ledger.transitions.dispatch_batch(dispatch, 0, 1)[0]
            assert ledger.transitions.claim(first, dispatch.token) is not None
        web = manager_on(app)
        token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

        done = web.post(
            "/backoffice/stale-units/retry", {"csrf_token": token, "confirm": "yes"}
        ).follow()

        [said] = [p.get_text() for p in done.html.select(".flash")]
        assert said.startswith("Dispatch failed: ")
        with app.app_context():
            run = ledger.runs.get_run(dispatch.run_uuid)
            assert ledger.runs.find_unit(run, "k1")["status"] == "failed"


def test_a_retry_confirmation_submitted_twice_dispatches_once(app, controlled):
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 3}, "test").uuid
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value
    confirm = web.post(f"/backoffice/task-runs/{run_uuid}/retry", {"csrf_token": token})
    assert "3 units" in confirm.text
    form = confirm.forms["confirm"]

    first = form.submit().follow()
    tokens = dispatch_tokens(app, run_uuid)
    # A double click, or the confirmation page's form sent again from the browser's history.
    second = form.submit().follow()

    assert "Retrying 3 units." in first.text
    assert "Nothing retried:" in second.text and "since" in second.text
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        assert [a.action for a in ledger.runs.run_actions(run)] == ["retry"]
    assert dispatch_tokens(app, run_uuid) == tokens


def dispatch_tokens(app, run_uuid: str) -> dict[str, str]:
    with app.app_context():
        run = ledger.runs.get_run(run_uuid)
        rows = db.session.execute(
            select(TaskRunUnit.unit_key, TaskRunUnit.dispatch_token).where(
                TaskRunUnit.task_run_id == run.id
            )
        )
        return dict(rows.all())


def test_a_retry_confirmation_with_a_malformed_action_id_is_a_400_and_changes_nothing(
    app, controlled
):
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 2}, "test").uuid
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

    for bad in ("x", "-1", "1e3", "9" * 40, "\u0661"):
        web.post(
            f"/backoffice/task-runs/{run_uuid}/retry",
            {"csrf_token": token, "confirm": "yes", "after_action": bad},
            status=400,
        )
    assert ledger_unchanged(app, run_uuid, "running")
