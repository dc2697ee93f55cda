"""Stale units of one run and the live error groups (issue 24, item 4)."""

from __future__ import annotations

from taskrunner import runner
from taskrunner.ledger import CLI, ledger
from tests.web.test_backoffice_actions import manager_on, submit_button


def two_runs_with_a_lost_worker_each(app, controlled) -> tuple[str, str]:
    """Two running runs, each with one unit whose worker is lost (heartbeats every 0 s)."""
    uuids = []
    with app.app_context():
        for _ in range(2):
            dispatch = ledger.transitions.create_run(
                controlled.type(), {}, "test", controlled.units({"units": 3}), 100
            )
            first = ledger.transitions.dispatch_batch(dispatch, 0, 1)[0]
            assert ledger.transitions.claim(first, dispatch.token) is not None
            uuids.append(dispatch.run_uuid)
    return uuids[0], uuids[1]


def test_the_run_page_retries_its_own_stale_units_after_a_confirmation(make_app, controlled):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=0)
    mine, other = two_runs_with_a_lost_worker_each(app, controlled)
    web = manager_on(app)

    page = web.get(f"/backoffice/task-runs/{mine}")
    assert page.html.select_one("button[name=retry-stale]").get_text() == "Retry 1 stale unit…"
    confirm = submit_button(page, "retry-stale")
    assert "Retry the stale units of this run" in confirm.text and "1 unit" in confirm.text
    done = confirm.forms["confirm"].submit().follow()

    assert "Retrying 1 unit." in done.text
    with app.app_context():
        retried = ledger.runs.find_unit(ledger.runs.get_run(mine), "k1")
        untouched = ledger.runs.find_unit(ledger.runs.get_run(other), "k1")
        assert (retried["status"], untouched["status"]) == ("pending", "running")
        [action] = ledger.runs.run_actions(ledger.runs.get_run(mine))
        assert action.detail["stale_only"] is True


def test_the_stale_units_page_shows_one_run_and_retries_only_its_units(make_app, controlled):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=0)
    mine, other = two_runs_with_a_lost_worker_each(app, controlled)
    web = manager_on(app)

    run_page = web.get(f"/backoffice/task-runs/{mine}")
    stale_link = run_page.html.select_one(".c-stale a")["href"]
    page = web.get(stale_link)

    assert [a["href"].split("/")[3] for a in page.html.select("td[data-label=Run] a")] == [mine]
    assert "Retry 1 stale unit…" in page.html.select_one("button[name=retry-stale]").get_text()
    done = submit_button(page, "retry-stale").forms["confirm"].submit().follow()
    assert done.request.path == "/backoffice/stale-units" and f"run={mine}" in done.request.url
    with app.app_context():
        assert ledger.runs.find_unit(ledger.runs.get_run(other), "k1")["status"] == "running"
    web.get("/backoffice/stale-units?run=not-a-uuid", status=404)


def test_stale_only_with_a_reason_or_units_is_refused(make_app, controlled):
    app = make_app(TASK_RUNNER_HEARTBEAT_SECONDS=0)
    mine, _other = two_runs_with_a_lost_worker_each(app, controlled)
    web = manager_on(app)
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value

    for extra in ({"reason": "x"}, {"unit": "k1"}, {"failed_only": "1"}):
        web.post(
            f"/backoffice/task-runs/{mine}/retry",
            {"csrf_token": token, "stale_only": "1", **extra},
            status=400,
        )


def test_the_error_groups_of_a_running_run_are_live(app, controlled):
    controlled.failing = {"k1"}
    with app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 2}, "test").uuid
    web = manager_on(app)

    page = web.get(f"/backoffice/task-runs/{run_uuid}/errors")

    bar = page.html.select_one(".live-bar")
    assert bar["data-stream"] == f"/backoffice/task-runs/{run_uuid}/stream"
    assert page.html.select_one("[data-live=errors]") is not None
    assert page.html.select_one("script[src$='live.js']") is not None


def test_a_retried_group_stays_with_n_retrying_until_its_units_settle(inline_app, controlled):
    controlled.failing = {"k1", "k2", "k3"}
    with inline_app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 3}, "test").uuid
        # The retry is dispatched to a queue nobody serves yet: its units stay pending.
        dispatch = ledger.actions.reopen_for_retry(run_uuid, True, CLI)
        assert dispatch.count == 3
    web = manager_on(inline_app)

    page = web.get(f"/backoffice/task-runs/{run_uuid}/errors")

    [row] = page.html.select("table.groups tbody tr")
    assert row.select_one(".retrying").get_text() == "3 retrying"
    assert row.select_one("button[name=retry-group]") is None
    assert "0 failed units and 3 retrying in 1 group" in page.text
    with inline_app.app_context():
        [group] = ledger.errors.error_groups(ledger.runs.get_run(run_uuid))
        assert (group.count, group.retrying) == (0, 3)
        controlled.failing.clear()
        runner.retry(run_uuid)  # now they run, on the inline queue, and settle
        assert ledger.errors.error_groups(ledger.runs.get_run(run_uuid)) == []
