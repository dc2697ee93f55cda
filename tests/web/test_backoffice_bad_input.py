"""Whatever an operator types: a 400 or a 404 or an empty list, never a 500; text escaped."""

from __future__ import annotations

import re
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.web.backoffice_support import browser, finished_run, make_user, sign_in

XSS = '<script>alert("owned")</script>'
GARBAGE_UUID = "not-a-uuid"
MISSING_UUID = "00000000-0000-4000-8000-000000000000"


@pytest.fixture
def setup(app):
    with app.app_context():
        viewer = make_user("viewer@example.com", "task-runner.runs.view")
        run_uuid = finished_run(
            "diagnostics.probe",
            ["probe-1", "probe-2", "probe-3"],
            {"probe-2": XSS, "probe-3": "probe unit 3 failed"},
            tenants={"probe-2": 7},
        )
    web = browser(app)
    sign_in(web, viewer)
    return web, run_uuid


RUN_PATHS = [
    "/backoffice/task-runs/{}",
    "/backoffice/task-runs/{}/errors",
    "/backoffice/task-runs/{}/events",
    "/backoffice/task-runs/{}/units/probe-1",
    "/api/v1/backoffice/task-runs/{}",
    "/api/v1/backoffice/task-runs/{}/units",
    "/api/v1/backoffice/task-runs/{}/errors",
]


@pytest.mark.parametrize("path", RUN_PATHS)
@pytest.mark.parametrize("bad", [GARBAGE_UUID, MISSING_UUID, "1", "%00", "' OR 1=1 --"])
def test_a_malformed_or_unknown_run_uuid_is_a_404(setup, path, bad):
    web, _ = setup
    web.get(path.format(quote(bad, safe="%")), status=404)


@pytest.mark.parametrize("key", ["nope", "probe-1%00", "a" * 400, "%E2%80%AE", "..%2F..%2Fetc"])
def test_an_unknown_or_malformed_unit_key_is_a_404(setup, key):
    web, run_uuid = setup
    web.get(f"/backoffice/task-runs/{run_uuid}/units/{key}", status=404)


@pytest.mark.parametrize(
    "query",
    [
        "cursor=garbage",
        "cursor=" + MISSING_UUID,
        "status=exploded",
        "limit=0",
        "limit=-3",
        "limit=abc",
        "limit=99999",
        "type=%00",
    ],
)
def test_a_bad_run_list_parameter_is_a_400(setup, query):
    web, _ = setup
    web.get(f"/backoffice/task-runs?{query}", status=400)
    response = web.get(f"/api/v1/backoffice/task-runs?{query}", status=400)
    assert response.json["error"]


def test_an_unknown_type_filter_is_an_empty_list(setup):
    web, _ = setup
    assert web.get("/api/v1/backoffice/task-runs?type=no.such.type").json == {
        "runs": [],
        "next_cursor": None,
    }
    assert "No runs match these filters" in web.get("/backoffice/task-runs?type=x").text


@pytest.mark.parametrize(
    "query",
    [
        "tenant=abc",
        "tenant=-1",
        "tenant=99999999999999999999",
        "tenant=%C2%B2",
        "key=a&tenant=1",
        "key=k&cursor=zzz",
    ],
)
def test_a_bad_history_query_is_a_400(setup, query):
    web, _ = setup
    web.get(f"/backoffice/units?{query}", status=400)


PARAMS = ["cursor", "status", "type", "limit", "unit_status", "key", "tenant"]
PAGES = [
    "/backoffice/task-runs",
    "/backoffice/task-runs/{run}",
    "/backoffice/stale-units",
    "/backoffice/units",
    "/backoffice/task-runs/{run}/events",
    "/api/v1/backoffice/task-runs",
    "/api/v1/backoffice/task-runs/{run}/units",
    "/api/v1/backoffice/stale-units",
    "/api/v1/backoffice/units",
]


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    page=st.sampled_from(PAGES),
    params=st.dictionaries(st.sampled_from(PARAMS), st.text(max_size=300), max_size=4),
)
def test_no_query_an_operator_types_makes_a_500(setup, page, params):
    web, run_uuid = setup
    response = web.get(page.format(run=run_uuid) + "?" + urlencode(params), expect_errors=True)
    assert response.status_int in (200, 400, 404), (response.status, response.text[:500])


@settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(segment=st.text(min_size=1, max_size=250), api=st.booleans())
def test_no_identifier_in_a_url_makes_a_500(setup, segment, api):
    web, run_uuid = setup
    prefix = "/api/v1/backoffice" if api else "/backoffice"
    for path in (
        f"{prefix}/task-runs/{quote(segment, safe='')}",
        f"/backoffice/task-runs/{run_uuid}/units/{quote(segment, safe='')}",
    ):
        response = web.get(path, expect_errors=True)
        # An encoded "/" arrives decoded; Werkzeug merges the double slash with a 308, and
        # "0/retry" names a POST-only route (405).
        assert response.status_int in (200, 308, 404, 405), (path, response.status)


@pytest.mark.parametrize(
    "path",
    [
        "/backoffice/task-runs/{run}",
        "/backoffice/task-runs/{run}/units/probe-2",
        "/backoffice/task-runs/{run}/errors",
        "/backoffice/task-runs/{run}/events",
        "/backoffice/units?key=probe-2",
        "/backoffice/units?tenant=7",
    ],
)
def test_an_error_message_with_a_script_tag_renders_escaped(setup, path):
    web, run_uuid = setup
    page = web.get(path.format(run=run_uuid))
    assert "alert(" in page.text
    assert "<script>alert" not in page.text
    # HTML-escaped in text, or \u003c-escaped inside a JSON payload.
    assert "&lt;script&gt;alert(" in page.text or "\\u003cscript\\u003ealert(" in page.text


def test_a_search_for_a_script_tag_is_escaped_back(setup):
    web, _ = setup
    page = web.get("/backoffice/units?" + urlencode({"key": XSS}))
    assert "<script>alert" not in page.text
    assert "&lt;script&gt;" in page.text


def test_pages_carry_the_security_headers_and_no_inline_script_or_style(setup):
    web, run_uuid = setup
    for path in (
        "/login",
        "/backoffice/task-runs",
        f"/backoffice/task-runs/{run_uuid}",
        f"/backoffice/task-runs/{run_uuid}/errors",
        "/backoffice/stale-units",
    ):
        response = web.get(path)
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert response.headers["X-Frame-Options"] == "DENY"
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        # Everything the CSP would block: inline scripts, handlers, style attributes.
        assert not re.search(r"<script(?![^>]*\bsrc=)", response.text), path
        assert not re.search(r"\son[a-z]+=", response.text), path
        assert not re.search(r"\sstyle=", response.text), path


def test_the_session_cookie_is_http_only_and_same_site(app):
    with app.app_context():
        viewer = make_user("cookie@example.com", "task-runner.runs.view")
    response = sign_in(browser(app), viewer)
    cookie = next(v for k, v in response.headerlist if k == "Set-Cookie" and "session=" in v)
    assert "HttpOnly" in cookie and "SameSite=Lax" in cookie


@pytest.mark.parametrize(
    "email", ["viewer\x00@example.com", "viewer@example.com\x00", "a\x1b[2J@x"]
)
def test_a_sign_in_with_a_control_character_is_refused_and_stores_nothing(app, email):
    from accounts.models import SignInThrottle
    from extensions import db

    with app.app_context():
        make_user("viewer@example.com", "task-runner.runs.view")
    web = browser(app)
    form = web.get("/login").forms["login"]
    form["email"], form["password"] = email, "whatever-it-is"

    refused = form.submit(status=200)

    assert "wrong email or password" in refused.text
    with app.app_context():
        keys = db.session.query(SignInThrottle.key).all()
    assert all("\x00" not in key and "\x1b" not in key for (key,) in keys)
