"""An operator's first contact with the backoffice (issue 24 item 10), with the Flask client:
the front door, the favicon, sign-in and back after a session ended under a form or a
link, focus on the primary action and on a message after a redirect, one duration format.
The browser test (tests/browser/test_first_contact_browser.py) checks the same in Chromium,
with the keyboard shortcut, dark mode and the navigation's row."""

from __future__ import annotations

from datetime import datetime, timedelta
from urllib.parse import parse_qs, urlsplit

import pytest

from accounts.services import set_password
from blueprints.ui import duration, span
from extensions import db
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from tests.web.backoffice_support import (
    MANAGE,
    VIEW,
    browser,
    make_user,
    sign_in,
)


@pytest.fixture
def operators(app):
    with app.app_context():
        return {
            "manager": make_user("manager@example.com", VIEW, MANAGE),
            "builder": make_user("builder@example.com", "course-builder.runs.view"),
        }


@pytest.fixture
def running(app) -> str:
    with app.app_context():
        run = ledger.transitions.create_run(
            "diagnostics.probe", {}, "test", [TaskUnit("a")], 100
        ).run_uuid
        db.session.remove()
    return run


def next_of(location: str) -> str | None:
    [value] = parse_qs(urlsplit(location).query).get("next", [None])
    return value


def test_the_front_door_leads_to_sign_in_then_to_the_operators_area(app, operators):
    web = browser(app)
    assert web.get("/", status=302).location.endswith("/login")
    manager, builder = browser(app), browser(app)
    sign_in(manager, operators["manager"])
    sign_in(builder, operators["builder"])
    assert manager.get("/", status=302).location.endswith("/backoffice/task-runs")
    assert builder.get("/", status=302).location.endswith("/builder/runs")


def test_the_favicon_is_served_where_browsers_ask_and_linked_from_every_page(app, operators):
    web = browser(app)
    icon = web.get("/favicon.ico", status=200)
    assert icon.content_type == "image/svg+xml" and b"<svg" in icon.body
    login = web.get("/login")
    href = login.html.select_one("link[rel=icon]")["href"]
    assert web.get(href, status=200).content_type == "image/svg+xml"
    sign_in(web, operators["manager"])
    assert web.get("/backoffice/task-runs").html.select_one("link[rel=icon]")["href"] == href


def _cancel_form(web, run: str):
    page = web.get(f"/backoffice/task-runs/{run}")
    return next(form for form in page.forms.values() if form.action.endswith("/cancel"))


@pytest.mark.parametrize("ended_by", ["password change", "sign-out in another tab"])
def test_a_post_after_the_session_ended_signs_in_again_and_returns_to_its_page(
    app, operators, running, ended_by
):
    web = browser(app)
    sign_in(web, operators["manager"])
    run_page = f"/backoffice/task-runs/{running}"
    form = _cancel_form(web, running)
    if ended_by == "password change":
        with app.app_context():
            set_password("manager@example.com", "correct horse battery")
            db.session.remove()
    else:
        other_tab = web.get("/backoffice/task-runs").forms[0]  # the sign-out form
        other_tab.submit(status=302)

    answer = form.submit(headers={"Referer": f"http://localhost{run_page}"}, status=302)
    assert answer.location.startswith("/login")
    assert next_of(answer.location) == run_page  # the page, never the POST-only action
    login = answer.follow()
    assert "Your session ended" in login.text
    assert login.html.select_one(".flashes")["tabindex"] == "-1"
    assert login.html.select_one(".flashes").has_attr("autofocus")
    assert not login.html.select_one("input[name=email]").has_attr("autofocus")
    form = login.forms["login"]
    form["email"], form["password"] = "manager@example.com", "correct horse battery"
    assert form.submit(status=302).location == run_page
    with app.app_context():
        assert ledger.runs.get_run(running).status == "running"  # the old form did nothing


def test_a_page_asked_for_after_the_session_ended_says_so_and_comes_back(app, operators, running):
    web = browser(app)
    sign_in(web, operators["manager"])
    with app.app_context():
        set_password("manager@example.com", "correct horse battery")
        db.session.remove()
    answer = web.get(f"/backoffice/task-runs/{running}?unit_status=pending", status=302)
    assert next_of(answer.location) == f"/backoffice/task-runs/{running}?unit_status=pending"
    assert "Your session ended" in answer.follow().text
    # A visitor who never signed in is only asked to.
    fresh = browser(app).get("/backoffice/task-runs", status=302).follow()
    assert "Your session ended" not in fresh.text


def test_a_post_from_another_site_never_decides_where_sign_in_returns(app, operators, running):
    web = browser(app)
    sign_in(web, operators["manager"])
    form = _cancel_form(web, running)
    with app.app_context():
        set_password("manager@example.com", "correct horse battery")  # the session ended
        db.session.remove()
    answer = form.submit(headers={"Referer": "https://evil.example/phish"}, status=302)
    assert answer.location == "/login"
    # Signed out in this browser, the form's token is gone too: without a page of this
    # site to return to, it is the plain refusal it always was.
    sign_in(web, operators["manager"])
    form = _cancel_form(web, running)
    web.get("/backoffice/task-runs").forms[0].submit()
    assert "Form expired" in form.submit(
        headers={"Referer": "https://evil.example/phish"}, status=400
    )


def test_a_confirmation_focuses_its_action_and_the_message_after_it_takes_focus(
    app, operators, running
):
    web = browser(app)
    sign_in(web, operators["manager"])
    confirm = _cancel_form(web, running).submit()
    [focused] = confirm.html.select("[autofocus]")
    assert focused["name"] == "confirmed"
    done = confirm.forms["confirm"].submit(status=302).follow()
    flashes = done.html.select_one(".flashes")
    assert flashes.has_attr("autofocus") and "Run cancelled" in flashes.text
    # Nothing to confirm: the way back has focus, the disabled action has not.
    nothing = _retry_nothing(web, running)
    [focused] = nothing.html.select("[autofocus]")
    assert focused.text == "Keep as is"


def _retry_nothing(web, run: str):
    page = web.get(f"/backoffice/task-runs/{run}")
    token = page.forms[0]["csrf_token"].value
    return web.post(f"/backoffice/task-runs/{run}/retry", {"csrf_token": token, "failed_only": "1"})


def test_every_duration_is_said_one_way():
    assert [span(s) for s in (0, 42, 60, 185, 3600, 7805, 86400, 3 * 86400 + 4 * 3600)] == [
        "0 s",
        "42 s",
        "1 min 00 s",
        "3 min 05 s",
        "1 h 00 min",
        "2 h 10 min",
        "1 d 0 h",
        "3 d 4 h",
    ]
    start = datetime(2026, 1, 1, 12, 0, 0)
    assert duration(start, start + timedelta(minutes=3)) == "3 min 00 s"
    assert duration(start, start + timedelta(seconds=90), idle=30) == "1 min 00 s"
    assert span(None) == "—"
