"""Every backoffice and API route: anonymous, signed in without the permission, with it."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from flask import Blueprint, Flask

from accounts.permissions import permission_required
from tests.web.backoffice_support import (
    MANAGE,
    PASSWORD,
    VIEW,
    browser,
    finished_run,
    make_user,
    sign_in,
)

# Every operator page and the operator API (the tenant API has its own bearer tokens).
GUARDED_PREFIXES = ("/backoffice", "/api/v1/backoffice", "/builder")

READS = [
    "/backoffice/",
    "/backoffice/task-runs",
    "/backoffice/task-runs/{run}",
    "/backoffice/task-runs/{run}/units/k2",
    "/backoffice/task-runs/{run}/errors",
    "/backoffice/task-runs/{run}/events",
    "/backoffice/stale-units",
    "/backoffice/units?key=k2",
    "/backoffice/units?tenant=2",
    "/backoffice/parked-events",
    "/backoffice/alerts",
    "/backoffice/workers",
    "/backoffice/queues",
    "/backoffice/search?q=acme",
    "/backoffice/search?q={run}",
    "/backoffice/overview",
    "/backoffice/schedules",
    "/backoffice/schedules/taskrunner.prune",
    "/backoffice/task-runs/{run}/stream",
    "/backoffice/task-runs/stream?run={run}",
    "/api/v1/backoffice/task-runs",
    "/api/v1/backoffice/task-runs/{run}",
    "/api/v1/backoffice/task-runs/{run}/units",
    "/api/v1/backoffice/task-runs/{run}/errors",
    "/api/v1/backoffice/stale-units",
    "/api/v1/backoffice/units?key=k2",
    "/api/v1/backoffice/workers",
    "/api/v1/backoffice/queues",
    "/api/v1/backoffice/search?q=k2",
    "/api/v1/backoffice/schedules",
    "/api/v1/backoffice/schedules/taskrunner.prune",
]
WRITES = [
    "/backoffice/task-runs/{run}/retry",
    "/backoffice/task-runs/{run}/cancel",
    "/backoffice/stale-units/retry",
    "/backoffice/task-types/diagnostics.probe/pause",
    "/backoffice/task-types/diagnostics.probe/resume",
    "/backoffice/schedules/taskrunner.prune/run-now",
    "/backoffice/schedules/taskrunner.prune/pause",
    "/backoffice/schedules/taskrunner.prune/resume",
    "/backoffice/alerts/rules/run_failed/mute",
]


@pytest.fixture
def run_uuid(app) -> str:
    with app.app_context():
        return finished_run(
            "diagnostics.probe",
            ["k1", "k2", "k3"],
            {"k2": "probe unit 2 failed"},
            tenants={"k2": 2},
        )


def unguarded_routes(app: Flask) -> list[str]:
    """Backoffice and API rules whose view does not check a permission."""
    missing = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(GUARDED_PREFIXES):
            continue
        view = app.view_functions[rule.endpoint]
        if getattr(view, "required_permission", None) is None:
            missing.append(rule.rule)
    return missing


def test_every_backoffice_and_api_route_checks_a_permission(app):
    rules = [r.rule for r in app.url_map.iter_rules() if r.rule.startswith(GUARDED_PREFIXES)]
    assert len(rules) >= len(READS) - 2 + len(WRITES)
    assert unguarded_routes(app) == []


def test_the_url_map_walk_catches_a_route_added_without_a_check(make_app):
    app = make_app()
    extra = Blueprint("extra", __name__)

    @extra.get("/backoffice/forgotten")
    def forgotten():
        return "open"

    @extra.get("/api/v1/backoffice/guarded")
    @permission_required(VIEW)
    def guarded():
        return "closed"

    app.register_blueprint(extra)

    assert unguarded_routes(app) == ["/backoffice/forgotten"]


def test_an_unknown_permission_name_is_refused_when_the_view_is_declared():
    with pytest.raises(ValueError, match="unknown permission"):
        permission_required("task-runner.runs.everything")


@pytest.mark.parametrize("path", READS)
def test_anonymous_reads_go_to_sign_in_or_get_401(web, run_uuid, path):
    url = path.format(run=run_uuid)
    if url.startswith("/api/"):
        response = web.get(url, status=401)
        assert response.content_type == "application/problem+json"
        assert (response.json["error"], response.json["status"]) == ("unauthorized", 401)
    else:
        response = web.get(url, status=302)
        assert response.location.startswith("/login?next=")


@pytest.mark.parametrize("path", READS)
def test_reads_without_the_view_permission_are_forbidden(web, people, run_uuid, path):
    sign_in(web, people["stranger"])
    response = web.get(path.format(run=run_uuid), status=403)
    if path.startswith("/api/"):
        assert response.json["error"] == "forbidden"
        assert response.json["detail"] == f"permission {VIEW} required"


@pytest.mark.parametrize("path", READS)
def test_reads_with_the_view_permission_succeed(web, people, run_uuid, path):
    sign_in(web, people["viewer"])
    response = web.get(path.format(run=run_uuid)).maybe_follow()
    assert response.status_int == 200


@pytest.mark.parametrize("path", WRITES)
def test_anonymous_writes_go_to_sign_in(web, run_uuid, path):
    page = web.get("/login")
    token = page.forms["login"]["csrf_token"].value
    response = web.post(path.format(run=run_uuid), {"csrf_token": token}, status=302)
    # Never back to the write itself (a POST-only URL): to the page its form was on.
    assert response.location == "/login"
    run_page = f"/backoffice/task-runs/{run_uuid}"
    response = web.post(
        path.format(run=run_uuid),
        {"csrf_token": token},
        headers={"Referer": f"http://localhost{run_page}"},
        status=302,
    )
    assert response.location == "/login?next=" + quote(run_page, safe="")


@pytest.mark.parametrize("path", WRITES)
def test_writes_need_the_manage_permission(web, people, run_uuid, path):
    sign_in(web, people["viewer"])
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value
    web.post(path.format(run=run_uuid), {"csrf_token": token}, status=403)


@pytest.mark.parametrize("path", WRITES)
def test_writes_with_the_manage_permission_ask_for_confirmation(web, people, run_uuid, path):
    sign_in(web, people["manager"])
    token = web.get("/backoffice/task-runs").forms[0]["csrf_token"].value
    response = web.post(path.format(run=run_uuid), {"csrf_token": token}, status=200)
    assert response.forms["confirm"]["confirm"].value == "yes"


def test_a_viewer_sees_no_retry_or_cancel_buttons(web, people, run_uuid):
    sign_in(web, people["viewer"])
    page = web.get(f"/backoffice/task-runs/{run_uuid}")
    assert "Retry failed" not in page.text
    assert not any("/retry" in (f.action or "") for f in page.forms.values())


def test_a_manager_sees_retry_failed_with_its_count(web, people, run_uuid):
    sign_in(web, people["manager"])
    page = web.get(f"/backoffice/task-runs/{run_uuid}")
    assert "Retry failed (1)" in page.text


def test_sign_in_returns_to_the_page_asked_for(web, people):
    response = web.get("/backoffice/stale-units", status=302)
    login = response.follow()
    form = login.forms["login"]
    form["email"], form["password"] = "viewer@example.com", people["viewer"].password
    assert form.submit(status=302).location == "/backoffice/stale-units"


@pytest.mark.parametrize(
    "target", ["//evil.example/", "https://evil.example/x", "/\\evil", "javascript:alert(1)"]
)
def test_sign_in_never_redirects_off_site(web, people, target):
    response = sign_in(web, people["viewer"], next_path=target)
    assert response.status_int == 302
    assert response.location == "/backoffice/task-runs"


def test_a_wrong_password_signs_nobody_in(web, people):
    page = web.get("/login")
    form = page.forms["login"]
    form["email"], form["password"] = "viewer@example.com", "wrong password!"
    response = form.submit(status=200)
    assert "wrong email or password" in response.text
    web.get("/backoffice/task-runs", status=302)


def test_sign_out_is_a_post_with_csrf(web, people):
    sign_in(web, people["viewer"])
    page = web.get("/backoffice/task-runs")
    web.get("/logout", status=405)
    web.post("/logout", status=400)
    page.forms[0].submit(status=302)
    web.get("/backoffice/task-runs", status=302)


def attempt(client, email: str, password: str = PASSWORD):
    """Submit the sign-in form; whatever the status."""
    form = client.get("/login").forms["login"]
    form["email"], form["password"] = email, password
    return form.submit(expect_errors=True)


def test_failed_sign_ins_are_slowed_down_per_account(web, people):
    for _ in range(5):
        assert attempt(web, "viewer@example.com", "wrong password!").status_int == 200
    # The sixth failure blocks the account: even the right password must wait now.
    assert attempt(web, "viewer@example.com", "wrong password!").status_int == 200
    blocked = attempt(web, "viewer@example.com")
    assert blocked.status_int == 429
    assert "too many failed sign-ins" in blocked.text
    web.get("/backoffice/task-runs", status=302)


def test_the_slowdown_is_shared_by_every_web_host(make_app, people):
    # Two app instances stand for two web hosts behind a load balancer.
    first, second = browser(make_app()), browser(make_app())
    for _ in range(6):
        attempt(first, "viewer@example.com", "wrong password!")
    assert attempt(second, "viewer@example.com").status_int == 429


def test_the_slowdown_also_counts_per_address_across_accounts(app):
    emails = [f"user{i}@example.com" for i in range(21)]
    with app.app_context():
        for email in emails:
            make_user(email, VIEW)
    client = browser(app, address="198.51.100.9")
    for email in emails:
        attempt(client, email, "not the password")
    # No account failed more than once, but the address is now throttled.
    assert attempt(client, "user0@example.com").status_int == 429
    elsewhere = browser(app, address="198.51.100.10")
    response = attempt(elsewhere, "user0@example.com")
    assert response.status_int == 302, response.text


def test_manage_alone_does_not_grant_reading(app, web, run_uuid):
    with app.app_context():
        manager = make_user("manage-only@example.com", MANAGE)
    sign_in(web, manager)
    web.get(f"/backoffice/task-runs/{run_uuid}", status=403)
