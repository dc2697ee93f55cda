"""Responses to operators are never stored; cookies are Secure and HSTS is sent outside
development. Items 7 and 8 of the security review."""

from __future__ import annotations

import webtest

from accounts.permissions import PERMISSIONS
from config import Config
from tests.conftest import ROOT
from tests.web.backoffice_support import VIEW, browser, make_user, sign_in

ENV_EXAMPLE = ROOT / "deploy" / "env.example"
MISSING_UUID = "00000000-0000-4000-8000-000000000000"


def test_every_response_to_a_signed_in_operator_is_no_store(app):
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    web = browser(app)
    sign_in(web, viewer)
    paths = [
        "/backoffice/task-runs",
        "/builder/runs",  # 403: no builder permission
        f"/builder/runs/{MISSING_UUID}",
        f"/backoffice/task-runs/{MISSING_UUID}",  # 404
        "/no/such/page",  # 404 outside every blueprint
        "/healthz",
        "/static/app.css",
        "/login",  # a redirect for someone signed in
    ]
    paths += [
        rule.rule
        for rule in app.url_map.iter_rules()
        if "GET" in rule.methods and not rule.arguments
    ]
    for path in paths:
        response = web.get(path, expect_errors=True)
        assert response.headers.get("Cache-Control") == "no-store", (path, response.status)


def test_a_builder_manager_gets_no_store_on_builder_pages(app):
    with app.app_context():
        manager = make_user("manager@example.com", *PERMISSIONS)
    web = browser(app)
    sign_in(web, manager)
    for path in ("/builder/runs", f"/builder/runs/{MISSING_UUID}"):
        response = web.get(path, expect_errors=True)
        assert response.headers["Cache-Control"] == "no-store", path


def deployment_app(make_app, monkeypatch, **env: str):
    """An app configured by deploy/env.example (database and queue stay the test's)."""
    for line in ENV_EXAMPLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, value = line.partition("=")
            monkeypatch.setenv(name, value)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    # The tests' own setting (plain http) gives way to what this environment says.
    return make_app(SESSION_COOKIE_SECURE=Config().SESSION_COOKIE_SECURE)


def sign_in_over(app, scheme: str):
    with app.app_context():
        viewer = make_user("viewer@example.com", VIEW)
    # The host the example deployment trusts (TRUSTED_HOSTS): any other is a 400.
    web = webtest.TestApp(
        app, extra_environ={"wsgi.url_scheme": scheme, "HTTP_HOST": "taskledger.example.com"}
    )
    return sign_in(web, viewer)


def test_the_example_deployment_refuses_a_host_it_does_not_serve(make_app, monkeypatch):
    app = deployment_app(make_app, monkeypatch)
    web = webtest.TestApp(app, extra_environ={"HTTP_HOST": "evil.example"})

    assert web.get("/login", expect_errors=True).status_int == 400


def test_the_example_deployment_sends_secure_cookies_and_hsts(make_app, monkeypatch):
    app = deployment_app(make_app, monkeypatch)

    response = sign_in_over(app, "https")

    cookies = response.headers.getall("Set-Cookie")
    assert cookies and all("; Secure" in cookie for cookie in cookies), cookies
    assert response.headers["Strict-Transport-Security"] == "max-age=31536000"


def test_development_serves_plain_http_without_secure_cookies(make_app, monkeypatch):
    app = deployment_app(make_app, monkeypatch, TASKLEDGER_ENV="development")

    response = sign_in_over(app, "http")

    assert response.status_int == 302
    assert not any("Secure" in cookie for cookie in response.headers.getall("Set-Cookie"))
    assert "Strict-Transport-Security" not in response.headers
