"""A closed tenant's tokens stop working; per-token and per-address rate limits; no token
in a log. Item 10 of the security review."""

from __future__ import annotations

import json

import pytest
import webtest
from sqlalchemy import event

from extensions import db
from tests.security.support import HttpClient
from tests.support import wait_for
from tests.web.tenant_api_support import PERIOD, bearer, tenant_with_token

POLL = "/api/v1/async-requests/00000000-0000-4000-8000-000000000000"
REQUESTS = "/api/v1/statements/requests"


def secret_of(token: str) -> str:
    """The secret part of ``tlk_<public id>_<secret>`` (which may itself hold a "_")."""
    return token.split("_", 2)[2]


def client(app, address: str = "203.0.113.7") -> webtest.TestApp:
    return webtest.TestApp(app, extra_environ={"REMOTE_ADDR": address})


def test_closing_a_tenant_disables_its_tokens_at_once(app, cli):
    with app.app_context():
        tenant_id, token = tenant_with_token("Acme")
        _other_id, other = tenant_with_token("Globex")
    api = client(app)
    api.get(POLL, headers=bearer(token), status=404)

    result = cli.invoke(args=["tenants", "close", str(tenant_id)])

    assert result.exit_code == 0, result.output
    assert f"tenant {tenant_id} closed" in result.output
    api.get(POLL, headers=bearer(token), status=401)
    api.get(POLL, headers=bearer(other), status=404)
    again = cli.invoke(args=["tenants", "close", str(tenant_id)])
    assert (again.exit_code, "already closed" in again.output) == (0, True)
    refused = cli.invoke(args=["tenants", "token", "create", str(tenant_id)])
    assert (refused.exit_code, refused.stderr) == (1, f"error: tenant {tenant_id} is closed\n")


@pytest.mark.parametrize("tenant_id", ["424242", "99999999999999999999999"])
def test_closing_an_unknown_tenant_is_refused_on_one_line(cli, tenant_id):
    result = cli.invoke(args=["tenants", "close", tenant_id])
    assert (result.exit_code, result.stderr) == (1, f"error: no tenant {tenant_id}\n")


def test_a_token_over_its_rate_limit_gets_429_with_retry_after(make_app):
    app = make_app(TENANT_API_RATE_PER_TOKEN=3, TENANT_API_RATE_PER_ADDRESS=100)
    with app.app_context():
        _tenant, token = tenant_with_token("Acme")
        _same_tenant, second = tenant_with_token("Acme")
    api = client(app)
    for _ in range(3):
        api.get(POLL, headers=bearer(token), status=404)

    limited = api.get(POLL, headers=bearer(token), status=429)

    assert 1 <= int(limited.headers["Retry-After"]) <= 60
    assert limited.json["error"] == "too_many_requests"
    api.get(POLL, headers=bearer(second), status=404)  # the limit is per token


def test_a_window_reaching_past_year_9999_still_answers_429_with_retry_after(make_app):
    # A window of 10**12 seconds (31,000 years) ends past any date: its wait is still a
    # number of seconds.
    window = 10**12
    app = make_app(
        TENANT_API_RATE_WINDOW_SECONDS=window,
        TENANT_API_RATE_PER_TOKEN=1,
        TENANT_API_RATE_PER_ADDRESS=100,
    )
    with app.app_context():
        _tenant, token = tenant_with_token("Acme")
    api = client(app)
    api.get(POLL, headers=bearer(token), status=404)

    limited = api.get(POLL, headers=bearer(token), status=429)

    assert limited.json["error"] == "too_many_requests"
    assert 1 <= int(limited.headers["Retry-After"]) <= window


def test_an_address_over_its_rate_limit_gets_429_even_with_a_valid_token(make_app):
    app = make_app(TENANT_API_RATE_PER_TOKEN=100, TENANT_API_RATE_PER_ADDRESS=5)
    with app.app_context():
        _tenant, token = tenant_with_token("Acme")
    guesser = client(app, "198.51.100.66")
    for i in range(5):
        guesser.get(POLL, headers=bearer(f"tlk_{i:012x}_guess"), status=401)

    assert "Retry-After" in guesser.get(POLL, headers=bearer(token), status=429).headers
    client(app, "198.51.100.67").get(POLL, headers=bearer(token), status=404)


def test_a_guess_over_the_address_limit_is_refused_before_any_token_is_looked_up(make_app):
    app = make_app(TENANT_API_RATE_PER_TOKEN=100, TENANT_API_RATE_PER_ADDRESS=3)
    with app.app_context():
        _tenant, token = tenant_with_token("Acme")
        engine = db.engine
    statements: list[str] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        statements.append(statement)

    guesser = client(app, "198.51.100.66")
    for i in range(3):
        guesser.get(POLL, headers=bearer(f"tlk_{i:012x}_guess"), status=401)
    event.listen(engine, "before_cursor_execute", record)
    try:
        over = [
            guesser.get(POLL, headers=bearer(guess), status=429)
            for guess in ("tlk_0000000000ff_guess", token)
        ]
    finally:
        event.remove(engine, "before_cursor_execute", record)

    assert all("Retry-After" in answer.headers for answer in over)
    # The docs' promise: counted first, so an over-limit guess costs no token read.
    assert statements and not [s for s in statements if "tenant_api_tokens" in s], statements


def test_the_rate_limit_is_shared_by_every_web_host(make_app):
    first = make_app(TENANT_API_RATE_PER_TOKEN=3, TENANT_API_RATE_PER_ADDRESS=100)
    second = make_app(TENANT_API_RATE_PER_TOKEN=3, TENANT_API_RATE_PER_ADDRESS=100)
    with first.app_context():
        _tenant, token = tenant_with_token("Acme")
    for host in (first, second, first):
        client(host).get(POLL, headers=bearer(token), status=404)
    client(second).get(POLL, headers=bearer(token), status=429)


@pytest.mark.workers
def test_a_token_in_the_query_string_is_refused_and_never_logged(gunicorn, app):
    with app.app_context():
        _tenant, token = tenant_with_token("Acme")
    secret = secret_of(token)
    port = gunicorn.start()
    api = HttpClient(port)

    for name in ("access_token", "token", "api_key", "t"):
        assert api.get(f"{POLL}?{name}={token}").status == 401
    assert api.get(POLL, Authorization=f"Bearer {token}").status == 404
    assert api.get(f"{POLL}?x=1", Authorization=f"Bearer {token}x").status == 401

    # gunicorn writes each access log line just after its answer, from whichever of its
    # threads served it: the lines arrive in no fixed order, so wait for all six.
    logs = wait_for(
        lambda: (text := gunicorn.logs(port)).count(POLL) >= 6 and text,
        message="six access log lines",
    )
    assert secret not in logs


@pytest.mark.workers
def test_a_token_in_the_query_string_beside_a_valid_header_is_never_read_nor_logged(gunicorn, app):
    with app.app_context():
        _acme, acme = tenant_with_token("Acme")
        _globex, globex = tenant_with_token("Globex")
    port = gunicorn.start()
    api = HttpClient(port)
    body = json.dumps({"period": PERIOD}).encode()
    created = api.request(
        "POST", REQUESTS, body, {"Content-Type": "application/json", **bearer(acme)}
    )
    assert created.status == 202, created.text
    acmes = created.headers["Location"]

    # Only the Authorization header is read: Acme's token in the URL does not open Acme's
    # request to Globex's header, nor does Globex's close it to Acme's. Alone, a URL
    # token is a 401 (the docs: "refused"); whatever the header, it is scrubbed.
    as_globex = api.get(f"{acmes}?access_token={acme}", Authorization=f"Bearer {globex}")
    as_acme = api.get(f"{acmes}?token={globex}", Authorization=f"Bearer {acme}")
    alone = api.get(f"{acmes}?access_token={acme}")

    assert (as_globex.status, as_acme.status, alone.status) == (404, 200, 401)
    logs = wait_for(
        lambda: (text := gunicorn.logs(port)).count(acmes) >= 3 and text,
        message="three access log lines",
    )
    lines = [line for line in logs.splitlines() if f"GET {acmes}?" in line]
    assert len(lines) == 3 and all("token=[redacted] HTTP/1.1" in line for line in lines), lines
    for token in (acme, globex):
        assert secret_of(token) not in logs


def test_an_ipv6_client_counts_by_its_64_so_rotating_addresses_buys_nothing(make_app):
    app = make_app(TENANT_API_RATE_PER_TOKEN=100, TENANT_API_RATE_PER_ADDRESS=3)
    for suffix in ("1", "2", "3"):
        client(app, f"2001:db8:0:7::{suffix}").get(POLL, status=401)

    client(app, "2001:db8:0:7::ffff").get(POLL, status=429)
    client(app, "2001:db8:0:8::1").get(POLL, status=401)
