"""The on-call console through its pages: workers, queues with pause and resume, search,
targeted retry (an error group, a selection, one unit), tenant names."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from extensions import db
from taskrunner import runner
from taskrunner.ledger import ledger
from taskrunner.ledger.throughput import THROUGHPUT_GRACE
from taskrunner.models import OperatorAction, TaskRunUnit
from tasks.presence import Board, Presence
from tenancy import services as tenants
from tests.web.backoffice_support import ADDRESS, browser, finished_run, sign_in


def signed_in(app, people, who: str = "manager"):
    web = browser(app)
    sign_in(web, people[who])
    return web


def submit_button(page, name: str):
    for form in page.forms.values():
        if name in form.fields:
            return form.submit(name)
    raise AssertionError(f"no form with a {name!r} button")


def type_button(page, type_: str, verb: str):
    """Submit the pause or resume form of one task type on the queues page."""
    action = f"/backoffice/task-types/{type_}/{verb}"
    [form] = [f for f in page.forms.values() if f.action == action]
    return form.submit(verb)


def test_the_workers_page_shows_each_consumer_and_the_unit_its_worker_runs(app, people, controlled):
    with app.app_context():
        handle = runner.start(controlled.type(), {"units": 1}, "test")
        unit = ledger.runs.run_units_page(ledger.runs.get_run(handle.uuid)).items[0]
        unit_id, token = db.session.execute(
            select(TaskRunUnit.id, TaskRunUnit.dispatch_token)
        ).one()
        board = Board(2)

        class Job:
            name, id = "taskrunner.run_unit", f"u{unit_id}.{token}"

        board.executing("executing", Job)
        Presence(app, ["tasks"], "process", 2, board).beat()
        idle = Presence(app, ["builder", "long-job"], "thread", 3, Board(2))
        idle.beat()
    web = signed_in(app, people, "viewer")

    page = web.get("/backoffice/workers")

    assert "2 live" in page.text
    assert unit["unit_key"] in page.text and handle.uuid[:8] in page.text
    assert "builder, long-job" in page.text and "3 × thread" in page.text
    assert "All 3 workers idle." in page.text
    api = web.get("/api/v1/backoffice/workers").json["consumers"]
    assert sorted(c["workers"] for c in api) == [2, 3]


def test_pause_and_resume_from_the_queues_page_are_confirmed_and_recorded(app, people, controlled):
    web = signed_in(app, people)
    page = web.get("/backoffice/queues")
    assert controlled.type() in page.text

    confirm = type_button(page, controlled.type(), "pause")
    assert "Pause tests.backoffice" in confirm.text
    done = confirm.forms["confirm"].submit().follow()
    assert "tests.backoffice paused." in done.text
    assert "paused" in done.text and "Resume…" in done.text
    with app.app_context():
        assert ledger.actions.is_paused(controlled.type())
        handle = runner.start(controlled.type(), {"units": 2}, "test")
    run_page = web.get(f"/backoffice/task-runs/{handle.uuid}")
    assert "is paused" in run_page.text
    row = web.get("/backoffice/task-runs").html.find(id=f"run-{handle.uuid}")
    assert row.select_one(".tag-paused").text == "paused"

    confirm = type_button(web.get("/backoffice/queues"), controlled.type(), "resume")
    assert "<strong>2</strong> pending units" in confirm.text
    done = confirm.forms["confirm"].submit().follow()
    assert "2 waiting units dispatched" in done.text
    # The same confirmation sent again (a second tab): nothing more to do, and no error.
    again = confirm.forms["confirm"].submit().follow()
    assert "tests.backoffice was not paused." in again.text and "Not resumed" not in again.text
    row = web.get("/backoffice/task-runs").html.find(id=f"run-{handle.uuid}")
    assert row is not None and not row.select(".tag-paused")
    with app.app_context():
        assert not ledger.actions.is_paused(controlled.type())
        actions = db.session.execute(
            select(OperatorAction.action, OperatorAction.actor, OperatorAction.address).order_by(
                OperatorAction.id
            )
        ).all()
    assert [tuple(a) for a in actions] == [
        ("pause", "manager@example.com", ADDRESS),
        ("resume", "manager@example.com", ADDRESS),
    ]


def test_a_viewer_sees_no_pause_button_and_cannot_post_one(app, people, controlled):
    web = signed_in(app, people, "viewer")
    page = web.get("/backoffice/queues")
    assert "Pause…" not in page.text
    token = page.forms[0]["csrf_token"].value
    web.post(f"/backoffice/task-types/{controlled.type()}/pause", {"csrf_token": token}, status=403)


def test_pausing_an_unknown_type_is_a_404(app, people):
    web = signed_in(app, people)
    token = web.get("/backoffice/queues").forms[0]["csrf_token"].value
    web.post("/backoffice/task-types/no.such.type/pause", {"csrf_token": token}, status=404)


def test_the_queues_page_counts_pending_running_and_settled_units(app, people, controlled):
    with app.app_context():
        finished_run(controlled.type(), ["a", "b", "c"], {"c": "unit c broke"})
        runner.pause(controlled.type())
        runner.start(controlled.type(), {"units": 4}, "test")
    web = signed_in(app, people, "viewer")
    before = web.get("/backoffice/queues")
    assert "not rolled up yet" in before.text
    with app.app_context():
        # The periodic roll-up, as it runs once the minute the units settled in has ended
        # (past the grace a minute is given). Taken from their finish, not from the clock:
        # a minute that turned while the pages were read would be the "last minute" else.
        settled = db.session.execute(select(func.max(TaskRunUnit.finished_at))).scalar_one()
        later = settled.replace(second=0, microsecond=0) + timedelta(minutes=1) + THROUGHPUT_GRACE
        assert ledger.throughput.roll(later) > 0
    data = web.get("/api/v1/backoffice/queues").json
    tasks = next(q for q in data["queues"] if q["name"] == "tasks")
    assert tasks["pending_units"] == 4
    assert tasks["waiting"] == 4  # Huey's own count: the jobs are in the queue
    assert (tasks["completed_last_minute"], tasks["failed_last_minute"]) == (2, 1)
    assert (tasks["completed_last_hour"], tasks["failed_last_hour"]) == (2, 1)
    assert tasks["oldest_pending_seconds"] is not None
    assert data["paused_types"] == [controlled.type()]
    assert data["settled_lag_seconds"] is not None
    page = web.get("/backoffice/queues")
    assert "Paused:" in page.text and "not rolled up yet" not in page.text


def test_retrying_one_error_group_from_its_page_takes_only_that_group(
    inline_app, people, controlled
):
    controlled.failing = {"k1", "k2", "k3"}

    def vendor(unit):
        if unit.key == "k3":
            raise ConnectionError("socket closed")

    controlled.during = vendor
    with inline_app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 4}, "test").uuid
    controlled.failing.clear()
    controlled.during = None
    web = signed_in(inline_app, people)

    page = web.get(f"/backoffice/task-runs/{run_uuid}/errors")
    assert "Domain refusal" in page.text and "Vendor error" in page.text
    form = next(
        f
        for f in page.forms.values()
        if f.get("reason", default=None) is not None and f["reason"].value == "unit k# broke"
    )
    confirm = form.submit("retry-group")
    assert "Retry one error group" in confirm.text
    assert "<strong>2</strong> units" in confirm.text
    done = confirm.forms["confirm"].submit().follow()

    assert done.request.path.endswith("/errors")
    assert "Retrying 2 units." in done.text
    assert dict(controlled.executions) == {"k1": 2, "k2": 2, "k3": 1, "k4": 1}
    with inline_app.app_context():
        [action] = ledger.runs.run_actions(ledger.runs.get_run(run_uuid))
        assert action.detail["reason"] == "unit k# broke" and action.detail["units"] == 2


def test_retrying_a_selection_and_one_unit_from_their_pages(inline_app, people, controlled):
    controlled.failing = {"k1", "k2", "k3"}
    with inline_app.app_context():
        run_uuid = runner.start(controlled.type(), {"units": 4}, "test").uuid
    controlled.failing.clear()
    web = signed_in(inline_app, people)

    page = web.get(f"/backoffice/task-runs/{run_uuid}")
    form = page.forms["retry-selection"]
    boxes = [f for f in page.html.select('input[name="unit"]')]
    assert sorted(b["value"] for b in boxes) == ["k1", "k2", "k3"]  # not the completed k4
    confirm = web.post(
        form.action,
        [("csrf_token", form["csrf_token"].value), ("unit", "k1"), ("unit", "k3")],
    )
    assert "Retry the selected units" in confirm.text and "<strong>2</strong> units" in confirm.text
    confirm.forms["confirm"].submit().follow()
    assert dict(controlled.executions) == {"k1": 2, "k2": 1, "k3": 2, "k4": 1}

    unit_page = web.get(f"/backoffice/task-runs/{run_uuid}/units/k2")
    confirm = submit_button(unit_page, "retry-unit")
    assert "Retry this unit" in confirm.text and "<strong>1</strong> unit<" in confirm.text
    done = confirm.forms["confirm"].submit().follow()
    assert done.request.path.endswith("/units/k2")
    assert controlled.executions["k2"] == 2
    with inline_app.app_context():
        details = [a.detail for a in ledger.runs.run_actions(ledger.runs.get_run(run_uuid))]
    assert [d["unit_keys"] for d in details] == [["k2"], ["k1", "k3"]]


def test_an_empty_selection_or_a_group_with_units_is_a_400(app, people, controlled):
    with app.app_context():
        run_uuid = finished_run(controlled.type(), ["a"], {"a": "broke"})
    web = signed_in(app, people)
    token = web.get("/backoffice/queues").forms[0]["csrf_token"].value
    url = f"/backoffice/task-runs/{run_uuid}/retry"
    web.post(url, [("csrf_token", token), ("unit", "")], status=400)
    web.post(url, [("csrf_token", token), ("unit", "a"), ("reason", "broke")], status=400)
    web.post(url, [("csrf_token", token), ("reason", " ")], status=400)
    web.post(url, [("csrf_token", token), ("unit", "a\x01")], status=400)


# A domain message kept whole: longer than a unit key may be, over two lines, no digits (so
# the group's reason is the message itself).
LONG_REASON = "the vendor refused the export: " + "quota exceeded; " * 14 + "\nsee its answer"


def test_a_long_reason_over_two_lines_is_a_group_its_links_filter_and_its_form_retries(
    app, people, controlled
):
    assert len(LONG_REASON) > 191
    with app.app_context():
        run_uuid = finished_run(
            controlled.type(),
            ["a", "b", "c", "d"],
            {"a": LONG_REASON, "b": LONG_REASON, "c": "another refusal"},
        )
    web = signed_in(app, people)
    errors = web.get(f"/backoffice/task-runs/{run_uuid}/errors")
    link = next(
        a["href"]
        for a in errors.html.select("a.group-units")
        if "unit" in a.get_text() and "quota" in a["href"]
    )

    page = web.get(link.replace("#units", ""))
    assert [a.get_text() for a in page.html.select("#units td.key a")] == ["a", "b"]
    for export in ("units.csv", "units.json"):
        web.get(f"/backoffice/task-runs/{run_uuid}/{export}", {"reason": LONG_REASON})
    api = web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/units", {"reason": LONG_REASON})
    assert [u["unit_key"] for u in api.json["units"]] == ["a", "b"]

    # A browser sends the hidden field's newline as CRLF.
    token = errors.forms[0]["csrf_token"].value
    url = f"/backoffice/task-runs/{run_uuid}/retry"
    sent = LONG_REASON.replace("\n", "\r\n")
    confirm = web.post(url, [("csrf_token", token), ("reason", sent)])
    assert "<strong>2</strong> units" in confirm.text
    confirm.forms["confirm"].submit().follow()
    with app.app_context():
        [action] = ledger.runs.run_actions(ledger.runs.get_run(run_uuid))
        assert action.detail["reason"] == LONG_REASON and action.detail["units"] == 2


def test_a_reason_with_a_nul_or_longer_than_any_group_is_a_400_and_retries_nothing(
    app, people, controlled
):
    with app.app_context():
        run_uuid = finished_run(controlled.type(), ["a"], {"a": "broke"})
    web = signed_in(app, people)
    token = web.get("/backoffice/queues").forms[0]["csrf_token"].value
    url = f"/backoffice/task-runs/{run_uuid}/retry"
    for reason in ("bro\x00ke", "x" * 601):
        web.post(url, [("csrf_token", token), ("reason", reason), ("confirm", "yes")], status=400)
        web.get(f"/backoffice/task-runs/{run_uuid}", {"reason": reason}, status=400)
        web.get(f"/api/v1/backoffice/task-runs/{run_uuid}/units", {"reason": reason}, status=400)
    with app.app_context():
        assert ledger.runs.run_actions(ledger.runs.get_run(run_uuid)) == []


def test_search_finds_runs_by_prefix_in_any_case_tenants_keys_and_errors(app, people, controlled):
    with app.app_context():
        acme = tenants.create("Acme Corporation").id
        tenants.create("Globex")
        run_uuid = finished_run(
            controlled.type(),
            ["invoice-1", "invoice-2", "other"],
            {"invoice-2": "billing address missing for invoice 2"},
            tenants={"invoice-2": acme},
        )
    web = signed_in(app, people, "viewer")

    by_prefix = web.get(f"/backoffice/search?q={run_uuid[:6].upper()}")
    assert run_uuid in by_prefix.text
    exact = web.get(f"/backoffice/search?q={run_uuid.upper()}", status=302)
    assert exact.location.endswith(f"/backoffice/task-runs/{run_uuid}")

    by_name = web.get("/backoffice/search?q=acme")
    assert "Acme Corporation" in by_name.text and "Globex" not in by_name.text
    by_id = web.get(f"/api/v1/backoffice/search?q={acme}").json
    assert [t["name"] for t in by_id["tenants"]] == ["Acme Corporation"]

    keys = web.get("/api/v1/backoffice/search?q=invoice-").json
    assert sorted(u["unit_key"] for u in keys["units"]) == ["invoice-1", "invoice-2"]
    errors = web.get("/api/v1/backoffice/search?q=Billing Address").json
    assert [u["unit_key"] for u in errors["errors"]] == ["invoice-2"]
    nothing = web.get("/api/v1/backoffice/search?q=%25").json
    assert (nothing["units"], nothing["errors"], nothing["tenants"]) == ([], [], [])
    web.get("/backoffice/search?q=" + "x" * 300, status=400)

    # The tenant's name is shown where its id was.
    errors_page = web.get(f"/backoffice/task-runs/{run_uuid}/errors")
    assert "Acme Corporation" in errors_page.text
    unit_page = web.get(f"/backoffice/task-runs/{run_uuid}/units/invoice-2")
    assert "Acme Corporation" in unit_page.text


def test_the_navigation_has_workers_queues_and_a_search_box(app, people):
    web = signed_in(app, people, "viewer")
    page = web.get("/backoffice/task-runs")
    assert page.html.select_one('nav.nav a[href="/backoffice/workers"]') is not None
    assert page.html.select_one('nav.nav a[href="/backoffice/queues"]') is not None
    box = page.html.select_one('[role="search"] input[name="q"]')
    assert box is not None
    assert page.html.select_one(f"form#{box['form']}")["action"] == "/backoffice/search"
