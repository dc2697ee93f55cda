"""Who may read what through the tenant API: a tenant's own token, and nothing else."""

from __future__ import annotations

import uuid
from urllib.parse import quote

import pytest
import webtest
from sqlalchemy import select

from accounts.permissions import PERMISSIONS
from accounts.services import create_user
from asyncrequests import tokens
from asyncrequests.models import AsyncRequest
from extensions import db
from payments.statements import generate_statement
from tests.web.tenant_api_support import PERIOD, bearer, tenant_with_token

REQUESTS = "/api/v1/statements/requests"
OPERATOR_PASSWORD = "a-long-operator-password"


@pytest.fixture
def client(app):
    return webtest.TestApp(app)


@pytest.fixture
def two_tenants(app, client):
    """Tenant A and tenant B, each with a token; B has a pending request and a statement."""
    with app.app_context():
        a_id, a_token = tenant_with_token("A")
        b_id, b_token = tenant_with_token("B")
        b_statement = generate_statement(b_id, "2025-09").id
    b_request = client.post_json(
        REQUESTS, {"period": PERIOD}, headers=bearer(b_token), status=202
    ).json["id"]
    return {
        "a": (a_id, a_token),
        "b": (b_id, b_token),
        "b_request": b_request,
        "b_statement": b_statement,
    }


def endpoints(tenants: dict) -> list[tuple[str, str, dict | None]]:
    return [
        ("POST", REQUESTS, {"period": PERIOD}),
        ("GET", f"/api/v1/async-requests/{tenants['b_request']}", None),
        ("GET", f"/api/v1/statements/{tenants['b_statement']}", None),
    ]


def call(client, method: str, path: str, body: dict | None, headers: dict, status):
    if method == "POST":
        return client.post_json(path, body, headers=headers, status=status)
    return client.get(path, headers=headers, status=status)


def test_every_endpoint_without_a_token_is_a_401_with_a_bearer_challenge(client, two_tenants):
    for method, path, body in endpoints(two_tenants):
        res = call(client, method, path, body, {}, 401)
        assert res.headers["WWW-Authenticate"] == 'Bearer realm="tenant-api"', path
        assert res.json["error"] == "unauthorized"


@pytest.mark.parametrize(
    "header",
    [
        "Bearer",
        "Bearer ",
        "Basic dGVuYW50OnNlY3JldA==",
        "Token {token}",
        "Bearer tlk_",
        "Bearer not-a-token",
        "Bearer tlk_zzzzzzzzzzzz_secret",
        "Bearer tlk_000000000000_secret",
        "Bearer {token}x",
        "Bearer {public}_wrong-secret",
        "Bearer {token}{padding}",
    ],
)
def test_a_malformed_or_wrong_token_is_a_401_on_every_endpoint(client, two_tenants, header):
    token = two_tenants["b"][1]
    public = token.rsplit("_", 1)[0] if token.count("_") == 2 else token[:16]
    value = header.format(token=token, public=public, padding="a" * 200)

    for method, path, body in endpoints(two_tenants):
        res = call(client, method, path, body, {"Authorization": value}, 401)
        assert res.json["error"] == "unauthorized"


def test_a_revoked_token_is_a_401_while_the_tenants_other_token_still_works(
    app, client, two_tenants
):
    b_id, old_token = two_tenants["b"]
    with app.app_context():
        new_token = tokens.issue(b_id, "second client").token
    public_id = old_token.split("_")[1]

    result = app.test_cli_runner().invoke(args=["tenants", "token", "revoke", public_id])

    assert result.exit_code == 0, result.output
    path = f"/api/v1/async-requests/{two_tenants['b_request']}"
    client.get(path, headers=bearer(old_token), status=401)
    client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(old_token), status=401)
    assert client.get(path, headers=bearer(new_token)).json["id"] == two_tenants["b_request"]


def test_another_tenants_request_and_statement_are_404_exactly_like_missing_ones(
    client, two_tenants
):
    a_token = two_tenants["a"][1]

    theirs = client.get(
        f"/api/v1/async-requests/{two_tenants['b_request']}", headers=bearer(a_token), status=404
    )
    missing = client.get(
        f"/api/v1/async-requests/{uuid.uuid4()}", headers=bearer(a_token), status=404
    )
    assert theirs.body == missing.body
    their_statement = client.get(
        f"/api/v1/statements/{two_tenants['b_statement']}", headers=bearer(a_token), status=404
    )
    no_statement = client.get(
        f"/api/v1/statements/{two_tenants['b_statement'] + 1000}",
        headers=bearer(a_token),
        status=404,
    )
    assert their_statement.body == no_statement.body
    for res in (theirs, their_statement):
        assert "Retry-After" not in res.headers


def test_the_same_period_asked_by_another_tenant_is_that_tenants_own_request(
    app, client, two_tenants
):
    a_id, a_token = two_tenants["a"]

    res = client.post_json(REQUESTS, {"period": PERIOD}, headers=bearer(a_token), status=202)

    assert res.json["id"] != two_tenants["b_request"]
    with app.app_context():
        rows = db.session.execute(select(AsyncRequest.uuid, AsyncRequest.tenant_id)).all()
    assert sorted(rows) == sorted(
        [(res.json["id"], a_id), (two_tenants["b_request"], two_tenants["b"][0])]
    )


@pytest.mark.parametrize(
    "path",
    [
        "/api/v1/async-requests/not-a-uuid",
        "/api/v1/async-requests/" + "f" * 300,
        "/api/v1/statements/0",
        "/api/v1/statements/99999999999999999999999999",
        "/api/v1/statements/abc",
    ],
)
def test_malformed_identifiers_are_404_never_500(client, two_tenants, path):
    client.get(path, headers=bearer(two_tenants["a"][1]), status=404)


def other_scripts_digits(number: int, zero: str) -> str:
    """``number`` written with the digits of another script (``zero`` its 0)."""
    return "".join(chr(ord(zero) + int(d)) for d in str(number))


@pytest.mark.parametrize("zero", ["\u0660", "\uff10", "\U0001d7ce"], ids=["arabic", "wide", "math"])
def test_a_statement_id_in_another_scripts_digits_is_a_404_not_that_statement(
    client, two_tenants, zero
):
    b_token, b_statement = two_tenants["b"][1], two_tenants["b_statement"]
    client.get(f"/api/v1/statements/{b_statement}", headers=bearer(b_token), status=200)
    path = "/api/v1/statements/" + quote(other_scripts_digits(b_statement, zero))

    refused = client.get(path, headers=bearer(b_token), status=404)

    assert refused.json["error"] == "not_found"
    assert "Content-Disposition" not in refused.headers


def test_a_request_id_in_another_spelling_than_a_uuids_is_a_404_but_capitals_are_the_same(
    client, two_tenants
):
    b_token, b_request = two_tenants["b"][1], two_tenants["b_request"]
    dashless = b_request.replace("-", "")
    for spelling in (f"{{{b_request}}}", f"urn:uuid:{b_request}", dashless, dashless.upper()):
        path = "/api/v1/async-requests/" + quote(spelling)
        assert client.get(path, headers=bearer(b_token), status=404).json["error"] == "not_found"
    upper = client.get(f"/api/v1/async-requests/{b_request.upper()}", headers=bearer(b_token))
    assert upper.json["id"] == b_request


def sign_in_operator(app, client) -> None:
    with app.app_context():
        create_user("ops@example.com", OPERATOR_PASSWORD, PERMISSIONS)
    form = client.get("/login").forms["login"]
    form["email"] = "ops@example.com"
    form["password"] = OPERATOR_PASSWORD
    form.submit(status=302)


def test_an_operator_session_grants_no_tenant_api_access(app, client, two_tenants):
    sign_in_operator(app, client)
    # The same browser reads the backoffice API: its session is a real one.
    client.get("/api/v1/backoffice/task-runs", status=200)

    for method, path, body in endpoints(two_tenants):
        call(client, method, path, body, {}, 401)


def test_a_tenant_token_grants_no_backoffice_access(client, two_tenants):
    headers = bearer(two_tenants["b"][1])

    client.get("/api/v1/backoffice/task-runs", headers=headers, status=401)
    page = client.get("/backoffice/task-runs", headers=headers, status=302)
    assert page.headers["Location"].startswith("/login")


def test_the_tenant_api_needs_no_csrf_token_and_sets_no_cookie(app, client, two_tenants):
    assert app.config.get("WTF_CSRF_ENABLED", True)
    # CSRF is enforced elsewhere in this very app: a form post without its token is refused.
    client.post("/logout", status=400)

    res = client.post_json(
        REQUESTS, {"period": "2025-08"}, headers=bearer(two_tenants["a"][1]), status=202
    )

    assert "Set-Cookie" not in res.headers
    assert not client.cookies


def test_every_tenant_api_route_refuses_a_call_without_a_token(app, client):
    """A URL-map walk: a route added to the blueprint later is covered (or this fails)."""
    sample = {"request_uuid": str(uuid.uuid4()), "statement_id": 1}
    rules = [r for r in app.url_map.iter_rules() if r.endpoint.startswith("tenant_api.")]
    assert len(rules) >= 3
    for rule in rules:
        path = rule.build({k: sample[k] for k in rule.arguments})[1]
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            res = client.request(path, method=method, expect_errors=True)
            assert res.status_int == 401, (method, path)
