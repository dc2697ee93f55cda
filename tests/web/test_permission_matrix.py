"""Who may do what, on every route of the URL map and every method it answers.

The routes are read from ``app.url_map``, so a route added later is in the matrix without
anyone listing it: a guarded one is tried by every role, an unguarded one must be among
the routes README says are public, or this test names it. Path parameters are real (a
run, a unit, a schedule, a build that exist) so that what refuses is the permission
check, not a 404.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from flask import Flask, url_for
from sqlalchemy import delete, select, text, update
from werkzeug.routing import Rule

from accounts.models import User, UserPermission
from accounts.permissions import PERMISSIONS
from extensions import db
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from tenancy.models import Tenant
from tests.web.backoffice_support import browser, finished_run, make_user, sign_in
from tests.web.test_builder_pages import start_run

TASKS_VIEW, TASKS_MANAGE = "task-runner.runs.view", "task-runner.runs.manage"
BUILDS_VIEW, BUILDS_MANAGE = "course-builder.runs.view", "course-builder.runs.manage"

# README: no backoffice session opens or needs these. The tenant API has its own bearer
# tokens, ``/metrics`` its own token; sign-in, sign-out and the front door are for anyone.
PUBLIC = {
    "/",
    "/login",
    "/logout",
    "/healthz",
    "/metrics",
    "/favicon.ico",
    "/static/<path:filename>",
    "/api/v1/openapi.json",
    "/api/v1/statements/<int:statement_id>",
    "/api/v1/statements/requests",
    "/api/v1/async-requests/<request_uuid>",
}
# The tenant API: a bearer token or a 401, whatever backoffice session the client has.
TENANT_API = {r for r in PUBLIC if r.startswith("/api/v1/") and not r.endswith("openapi.json")}

# Queries a read needs to answer 200 (the refusals come before they are read).
QUERIES = {
    "api.unit": {"key": "k2"},
    "api.history": {"key": "k2"},
    "backoffice.history": {"key": "k2"},
    "backoffice.search": {"q": "acme"},
    "api.search": {"q": "acme"},
}
# Tables an action writes to: no request of the matrix (none confirms) may change them.
STATE = (
    "task_runs",
    "task_run_units",
    "operator_actions",
    "task_type_pauses",
    "schedule_states",
    "periodic_slots",
    "alert_mutes",
    "builder_runs",
    "builder_steps",
)
ROLES = {
    "no permission": (),
    "task viewer": (TASKS_VIEW,),
    "builder viewer": (BUILDS_VIEW,),
    "viewer of both": (TASKS_VIEW, BUILDS_VIEW),
    "manager of both": tuple(PERMISSIONS),
}


@dataclass(frozen=True)
class Call:
    rule: str
    method: str
    url: str
    permission: str | None  # what SPEC says it needs; None: a public route

    def __str__(self) -> str:
        return f"{self.method} {self.url}"


@pytest.fixture
def world(app) -> dict[str, str]:
    """Two task runs (the newer with a failed unit), a course build, a tenant: what the
    paths name."""
    app.config["BUILDER_STREAM_SECONDS"] = 1
    with app.app_context():
        db.session.add(Tenant(id=4, name="Umbrella"))
        db.session.commit()
        # An earlier run of the type: what a run is compared with.
        finished_run("diagnostics.probe", ["k1", "k2"], {})
        run = finished_run(
            "diagnostics.probe", ["k1", "k2"], {"k2": "probe unit 2 failed"}, tenants={"k2": 4}
        )
    return {"run": run, "build": start_run(app)}


def path_values(rule: Rule, world: dict[str, str]) -> dict[str, object]:
    values = {
        "run_uuid": world["build"] if rule.endpoint.startswith("builder.") else world["run"],
        "unit_key": "k2",
        "name": "taskrunner.prune",
        "type_": "diagnostics.probe",
        "rule": "run_failed",
        "request_uuid": "0d7c8d55-52a5-4a4b-9d59-6c8f2a3c9a11",
        "statement_id": 1,
        "filename": "app.css",
    }
    missing = set(rule.arguments) - set(values)
    assert not missing, f"give {rule.rule} a real value for {sorted(missing)} in this test"
    return {name: values[name] for name in rule.arguments}


def needed(rule: str, method: str) -> str | None:
    """SPEC's rule, not the view's own say: a read needs its area's view permission, an
    action (a POST) its manage permission; the public routes need none."""
    if rule in PUBLIC:
        return None
    builds = rule.startswith("/builder/")
    if method == "POST":
        return BUILDS_MANAGE if builds else TASKS_MANAGE
    return BUILDS_VIEW if builds else TASKS_VIEW


def calls(app: Flask, world: dict[str, str]) -> list[Call]:
    """Every rule with every method it answers (OPTIONS is Flask's own, for anyone)."""
    found = []
    with app.test_request_context():
        for rule in app.url_map.iter_rules():
            url = url_for(
                rule.endpoint, **path_values(rule, world), **QUERIES.get(rule.endpoint, {})
            )
            for method in sorted(rule.methods - {"OPTIONS"}):
                found.append(Call(rule.rule, method, url, needed(rule.rule, method)))
    return found


def state(app: Flask) -> dict[str, list]:
    with app.app_context():
        snapshot = {
            table: sorted(map(repr, db.session.execute(text(f"SELECT * FROM {table}")).all()))
            for table in STATE
        }
        db.session.remove()
    return snapshot


def send(client, call: Call, token: str):
    if call.method == "POST":
        return client.post(call.url, {"csrf_token": token}, expect_errors=True)
    return getattr(client, call.method.lower())(call.url, expect_errors=True)


def token_of(client) -> str:
    """A CSRF token of this browser's session, from a page any visitor sees."""
    return client.get("/login").maybe_follow(expect_errors=True).forms[0]["csrf_token"].value


def test_every_route_checks_the_permission_spec_gives_it_or_is_public(app, world):
    declared = {
        rule.rule: getattr(app.view_functions[rule.endpoint], "required_permission", None)
        for rule in app.url_map.iter_rules()
    }
    wrong = [
        f"{call.rule} checks {declared[call.rule]}, needs {call.permission}"
        for call in calls(app, world)
        if call.method != "HEAD" and declared[call.rule] != call.permission
    ]
    assert wrong == []


def test_anonymous_requests_are_sent_to_sign_in_or_refused_401(app, world):
    before = state(app)
    client = browser(app)
    token = token_of(client)
    wrong = []
    for call in calls(app, world):
        if call.permission is None:
            continue
        response = send(client, call, token)
        location = response.headers.get("Location", "")
        if call.url.startswith("/api/"):
            ok = response.status_int == 401 and (
                call.method == "HEAD" or response.json["status"] == 401
            )
        elif call.method == "POST":
            ok = response.status_int == 302 and location == "/login"
        else:
            ok = response.status_int == 302 and location.startswith("/login?next=")
        if not ok:
            wrong.append(f"{call}: {response.status_int} {location}")
    assert wrong == []
    assert state(app) == before


@pytest.mark.parametrize("role", ROLES)
def test_each_role_is_refused_403_what_its_permissions_do_not_open(app, world, role):
    with app.app_context():
        operator = make_user(f"{role.replace(' ', '.')}@example.com", *ROLES[role])
    client = browser(app)
    sign_in(client, operator)
    token = token_of(client)
    before = state(app)
    wrong = []
    for call in calls(app, world):
        if call.permission is None:
            continue
        response = send(client, call, token)
        if call.permission in ROLES[role]:
            # Opened: a read answers, an action shows its confirmation and changes nothing.
            ok = response.maybe_follow().status_int == 200
            if ok and call.method == "POST":
                ok = response.forms["confirm"]["confirm"].value == "yes"
        else:
            ok = response.status_int == 403
        if not ok:
            wrong.append(f"{call}: {response.status_int}")
    assert wrong == []
    assert state(app) == before


def test_a_backoffice_session_opens_no_tenant_api_route_nor_the_metrics(make_app, world):
    # ``world`` is made on its own app: this one has the same database and a metrics token.
    app = make_app(METRICS_TOKEN="metrics-token-for-the-matrix")
    with app.app_context():
        manager = make_user("manager@example.com", *PERMISSIONS)
    client = browser(app)
    sign_in(client, manager)
    token = token_of(client)
    wrong = []
    for call in calls(app, world):
        if call.rule not in TENANT_API | {"/metrics"}:
            continue
        response = send(client, call, token)
        if response.status_int != 401:
            wrong.append(f"{call}: {response.status_int}")
    assert wrong == []


def test_a_method_a_route_does_not_answer_is_405_for_anyone(app, world):
    with app.app_context():
        manager = make_user("manager@example.com", *PERMISSIONS)
    anonymous, signed_in = browser(app), browser(app)
    sign_in(signed_in, manager)
    before = state(app)
    wrong = []
    for call in calls(app, world):
        if call.method not in ("GET", "POST"):
            continue
        # Only the verbs a browser form or a script may send by mistake.
        other = "POST" if call.method == "GET" else "GET"
        answered = {c.method for c in calls(app, world) if c.rule == call.rule}
        if other in answered:
            continue
        for client in (anonymous, signed_in):
            response = client.request(call.url, method=other, expect_errors=True)
            if response.status_int != 405:
                wrong.append(f"{other} {call.url}: {response.status_int}")
        for verb in ("PUT", "DELETE", "PATCH"):
            response = signed_in.request(call.url, method=verb, expect_errors=True)
            if response.status_int != 405:
                wrong.append(f"{verb} {call.url}: {response.status_int}")
    assert wrong == []
    assert state(app) == before


def take_away(app, email: str, permission: str) -> None:
    with app.app_context():
        user = db.session.execute(select(User).filter_by(email=email)).scalar_one()
        db.session.execute(
            delete(UserPermission).where(
                UserPermission.user_id == user.id, UserPermission.name == permission
            )
        )
        db.session.commit()
        db.session.remove()


def test_a_permission_taken_away_refuses_the_very_next_request(app, world):
    with app.app_context():
        viewer = make_user("viewer@example.com", TASKS_VIEW)
    web = browser(app)
    sign_in(web, viewer)
    web.get(f"/backoffice/task-runs/{world['run']}", status=200)

    take_away(app, viewer.email, TASKS_VIEW)

    web.get(f"/backoffice/task-runs/{world['run']}", status=403)
    web.get(f"/api/v1/backoffice/task-runs/{world['run']}", status=403)


def test_a_disabled_operator_is_signed_out_of_every_page_and_the_api(app, world):
    with app.app_context():
        viewer = make_user("viewer@example.com", TASKS_VIEW)
    web = browser(app)
    sign_in(web, viewer)
    with app.app_context():
        db.session.execute(update(User).filter_by(email=viewer.email).values(active=False))
        db.session.commit()

    assert web.get("/backoffice/task-runs", status=302).location.startswith("/login")
    web.get("/api/v1/backoffice/task-runs", status=401)
    again = browser(app)
    assert "wrong email or password" in sign_in(again, viewer).text


def test_a_live_stream_ends_when_its_permission_is_taken_away(make_app):
    # A stream far longer than its polls: only the check at each poll ends this one early.
    app = make_app(LIVE_STREAM_SECONDS=20)
    with app.app_context():
        viewer = make_user("viewer@example.com", TASKS_VIEW)
        # A run that stays running (nothing consumes its unit): its stream goes on.
        running = ledger.transitions.create_run(
            "diagnostics.probe", {}, "test", [TaskUnit("a")], 100
        ).run_uuid
        db.session.remove()
    web = browser(app)
    sign_in(web, viewer)
    client = app.test_client()
    client.set_cookie("session", web.cookies["session"], domain="localhost")
    response = client.get(f"/backoffice/task-runs/{running}/stream", buffered=False)
    assert response.status_code == 200
    chunks = response.response
    seen = ""
    while "event: changed" not in seen:
        seen += next(chunks).decode()

    take_away(app, viewer.email, TASKS_VIEW)

    rest = "".join(chunk.decode() for chunk in chunks)
    response.close()
    assert rest.rstrip().endswith('event: ended\ndata: {"reason": "session"}')
