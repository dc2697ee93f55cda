"""The OpenAPI documents against the code: routes, parameters, statuses, fields, error bodies.

The URL map is walked (no route under ``/api/`` outside a document), both documents
are validated by openapi-spec-validator, and a scenario drives every operation
through its successes and its errors while a recorder keeps each response and the
query parameters the view read; every recorded response must be documented, down
to its status, media type, required headers and every field of its body.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import webtest
from flask import Blueprint, Flask, jsonify, request
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate as validate_openapi
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT202012
from werkzeug.datastructures import ImmutableMultiDict

from accounts.permissions import permission_required
from blueprints.api.contract import BACKOFFICE
from blueprints.openapi import (
    UndocumentedRoute,
    build,
    openapi_path,
    problem_schema,
)
from blueprints.openapi_cli import client_section, readme_with_section
from blueprints.problems import CODES, MAX_REQUEST_TARGET, MEDIA_TYPE, problem
from blueprints.tenant_api.contract import TENANT
from blueprints.ui import SECURITY_HEADERS
from payments.statements import generate_statement
from taskrunner.contract import TaskUnit
from taskrunner.ledger import ledger
from tests.outage import refused_app
from tests.web.backoffice_support import (
    VIEW,
    Operator,
    browser,
    finished_run,
    make_user,
    sign_in,
)
from tests.web.tenant_api_support import PERIOD, bearer, tenant_with_token

DOCUMENTS = (TENANT, BACKOFFICE)
README = Path(__file__).resolve().parents[2] / "README.md"
MAX_BODY = 2048
JSON = "application/json"
# Headers a client acts on: each must be listed by the response that carries it.
MEANINGFUL_HEADERS = {"location", "retry-after", "content-disposition", "www-authenticate", "allow"}
# Set on every answer of the app, pages included: not part of the API's contract.
GENERIC_HEADERS = {name.lower() for name in SECURITY_HEADERS}


def meaningful(header: str) -> bool:
    name = header.lower()
    custom = name.startswith(("x-", "ratelimit")) and name not in GENERIC_HEADERS
    return name in MEANINGFUL_HEADERS or custom


class ReadArgs(ImmutableMultiDict):
    """Query arguments that remember which names the view asked for."""

    def __init__(self, mapping: Any = None) -> None:
        super().__init__(mapping)
        self.names_read: set[str] = set()

    def get(self, key, default=None, type=None):
        self.names_read.add(key)
        return super().get(key, default, type)

    def __getitem__(self, key):
        self.names_read.add(key)
        return super().__getitem__(key)

    def getlist(self, key, type=None):
        self.names_read.add(key)
        return super().getlist(key, type)


@dataclass
class Recorded:
    method: str
    path: str
    rule: str | None
    status: int
    media_type: str
    headers: dict[str, str]
    body: Any
    names_read: set[str] = field(default_factory=set)

    def __str__(self) -> str:
        return f"{self.method} {self.path} → {self.status}"


def record(app: Flask) -> list[Recorded]:
    """Install the recorder on ``app`` (before its first request); return the growing list."""
    recorded: list[Recorded] = []

    @app.before_request
    def _track_reads():
        request.args = ReadArgs(request.args)

    @app.after_request
    def _keep(response):
        if request.path.startswith("/api/"):
            recorded.append(
                Recorded(
                    request.method,
                    request.path,
                    request.url_rule.rule if request.url_rule else None,
                    response.status_code,
                    response.mimetype,
                    dict(response.headers),
                    json.loads(response.get_data()) if response.is_json else None,
                    getattr(request.args, "names_read", set()),
                )
            )
        return response

    return recorded


class Contracts:
    """Both documents of one app, and what a recorded response is checked against."""

    def __init__(self, app: Flask) -> None:
        self.documents = [build(app, document) for document in DOCUMENTS]
        self.covers = {
            id(built): spec.covers for built, spec in zip(self.documents, DOCUMENTS, strict=True)
        }

    def document_for(self, path: str) -> dict[str, Any]:
        [document] = [d for d in self.documents if self.covers[id(d)](path)]
        return document

    def validate(self, document: dict[str, Any], schema: dict[str, Any], value: Any) -> list[str]:
        # The schema sits inside the document, where its "#/components/…" references point.
        root = {**document, "x-checked": schema}
        resource = Resource.from_contents(root, default_specification=DRAFT202012)
        validator = Draft202012Validator(
            {"$ref": "urn:document#/x-checked"},
            registry=Registry().with_resource("urn:document", resource),
            format_checker=Draft202012Validator.FORMAT_CHECKER,
        )
        return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(value)]

    def violations(self, answer: Recorded) -> list[str]:
        document = self.document_for(answer.path)
        if answer.rule is None or answer.method in {"HEAD", "OPTIONS"}:
            if answer.status < 400:
                return []
            # Routing errors (unknown URL, wrong method) belong to no operation: a problem body.
            found = self._content(answer, {"content": {MEDIA_TYPE: {"schema": {}}}})
            return found or self.validate(document, problem_schema(answer.status), answer.body)
        operation = document["paths"][openapi_path(answer.rule)][answer.method.lower()]
        problems = []
        documented = {p["name"] for p in operation["parameters"] if p["in"] == "query"}
        if answer.names_read - documented:
            problems.append(f"reads undocumented query parameters {answer.names_read - documented}")
        spec = operation["responses"].get(str(answer.status))
        if spec is None:
            return [*problems, f"status {answer.status} is not documented"]
        if "$ref" in spec:
            spec = document["components"]["responses"][spec["$ref"].rsplit("/", 1)[1]]
        listed = spec.get("headers", {})
        for name, header in listed.items():
            if header["required"] and name not in answer.headers:
                problems.append(f"required header {name} is missing")
        listed_names = {name.lower() for name in listed}
        for name in answer.headers:
            if meaningful(name) and name.lower() not in listed_names:
                problems.append(f"header {name} is not documented for {answer.status}")
        wrong_media = self._content(answer, spec)
        if wrong_media:
            return problems + wrong_media
        schema = spec["content"][answer.media_type]["schema"]
        return problems + self.validate(document, schema, answer.body)

    @staticmethod
    def _content(answer: Recorded, spec: dict[str, Any]) -> list[str]:
        if answer.media_type not in spec["content"]:
            return [f"media type {answer.media_type} is not one of {list(spec['content'])}"]
        return []


def operations(document: dict[str, Any]) -> dict[str, set[str]]:
    """``METHOD /path/{param}`` → documented statuses."""
    return {
        f"{method.upper()} {path}": set(spec["responses"])
        for path, item in document["paths"].items()
        for method, spec in item.items()
    }


# -- the documents themselves -------------------------------------------------------


@pytest.mark.parametrize("spec", DOCUMENTS, ids=lambda d: d.security_scheme)
def test_the_document_is_valid_openapi_3_1(app, spec):
    document = build(app, spec)

    validate_openapi(document)

    assert document["openapi"] == "3.1.0"


def test_every_api_route_is_in_exactly_one_document_with_its_method_and_parameters(app):
    contracts = Contracts(app)
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith("/api/"):
            continue
        covering = [spec for spec in DOCUMENTS if spec.covers(rule.rule)]
        assert len(covering) == 1, f"{rule.rule} is in {len(covering)} documents"
        item = contracts.document_for(rule.rule)["paths"][openapi_path(rule.rule)]
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            operation = item[method.lower()]
            declared = {p["name"] for p in operation["parameters"] if p["in"] == "path"}
            assert declared == set(rule.arguments), rule.rule


def test_a_route_added_without_its_declaration_fails_the_build(make_app):
    app = make_app()
    extra = Blueprint("api_extra", __name__, url_prefix="/api/v1/backoffice")

    @extra.get("/undeclared-read")
    @permission_required(VIEW)
    def undeclared():
        return jsonify(items=[])

    app.register_blueprint(extra)

    with pytest.raises(UndocumentedRoute, match=r"GET /api/v1/backoffice/undeclared-read"):
        build(app, BACKOFFICE)
    # The tenant side of the URL map is covered just the same.
    tenant_extra = Blueprint("tenant_extra", __name__, url_prefix="/api/v1")
    tenant_extra.add_url_rule("/invoices/<int:invoice_id>", "invoice", lambda invoice_id: "")
    other = make_app()
    other.register_blueprint(tenant_extra)
    with pytest.raises(UndocumentedRoute, match="/api/v1/invoices"):
        build(other, TENANT)


def test_a_declaration_whose_path_parameters_differ_from_the_route_fails_the_build(make_app):
    app = make_app()
    without_path = replace(BACKOFFICE.operations["api.run"], path=())
    broken = replace(BACKOFFICE, operations={**BACKOFFICE.operations, "api.run": without_path})

    with pytest.raises(UndocumentedRoute, match="path parameters"):
        build(app, broken)


def test_every_example_is_valid_against_its_schema(app):
    contracts = Contracts(app)
    checked = 0
    for document in contracts.documents:
        for item in document["paths"].values():
            for operation in item.values():
                bodies = [operation.get("requestBody", {}).get("content", {})]
                bodies += [r.get("content", {}) for r in operation["responses"].values()]
                for content in bodies:
                    for media in content.values():
                        if "example" in media:
                            checked += 1
                            errors = contracts.validate(document, media["schema"], media["example"])
                            assert errors == [], (operation["operationId"], errors)
                for param in operation["parameters"]:
                    if "example" in param:
                        checked += 1
                        assert contracts.validate(document, param["schema"], param["example"]) == []
    assert checked >= 20
    assert "date-time" in Draft202012Validator.FORMAT_CHECKER.checkers


def test_the_tenant_document_is_public_and_holds_no_secret(app):
    web = webtest.TestApp(app)

    served = web.get("/api/v1/openapi.json", status=200)

    text = served.text
    assert served.json == json.loads(json.dumps(build(app, TENANT)))
    assert app.config["SECRET_KEY"] not in text
    assert "/backoffice" not in text and "tlk_" in text  # the token's shape, never a token
    assert "Set-Cookie" not in served.headers


def test_the_backoffice_document_needs_the_view_permission(app, people):
    path = "/api/v1/backoffice/openapi.json"
    anonymous, stranger, viewer = browser(app), browser(app), browser(app)
    sign_in(stranger, people["stranger"])
    sign_in(viewer, people["viewer"])

    assert anonymous.get(path, status=401).json["error"] == "unauthorized"
    assert stranger.get(path, status=403).json["error"] == "forbidden"
    served = viewer.get(path, status=200).json
    assert served["components"]["securitySchemes"]["sessionCookie"]["in"] == "cookie"
    assert served["paths"]["/api/v1/backoffice/task-runs"]["get"]["x-required-permission"] == VIEW


def test_the_readme_client_section_is_written_from_the_document(app):
    readme = README.read_text()
    section = client_section(build(app, TENANT))

    assert readme_with_section(readme, section) == readme, "README is stale: run make catalog"
    for example in ('"period": "2026-10"', "/api/v1/statements/812", "Retry-After"):
        assert example in section


def test_the_readme_check_command_fails_on_a_stale_section(cli, tmp_path):
    stale = tmp_path / "README.md"
    stale.write_text(README.read_text().replace("6f1c0b9e", "0ld0ld00"))

    result = cli.invoke(args=["openapi", "readme", "--check", "--path", str(stale)])
    assert result.exit_code == 1
    assert "is stale" in result.stderr
    assert cli.invoke(args=["openapi", "readme", "--path", str(stale)]).exit_code == 0
    assert stale.read_text() == README.read_text()


def test_the_dump_command_prints_each_document(cli):
    for name, spec in (("tenant", TENANT), ("backoffice", BACKOFFICE)):
        result = cli.invoke(args=["openapi", "dump", name])
        assert result.exit_code == 0
        assert json.loads(result.output)["info"]["title"] == spec.title


# -- recorded responses -----------------------------------------------------------


@dataclass
class World:
    run_uuid: str
    running_uuid: str
    pending_request: str
    completed_request: str
    statement_id: int
    token: str


def seed(app: Flask) -> World:
    with app.app_context():
        tenant_id, token = tenant_with_token("Acme")
        statement_id = generate_statement(tenant_id, "2025-09").id
        run_uuid = finished_run(
            "diagnostics.probe",
            ["probe-1", "probe-2", "probe-3"],
            {"probe-2": "probe unit 2 failed"},
            tenants={"probe-2": tenant_id},
        )
        running = ledger.transitions.create_run(
            "diagnostics.probe", {}, "test", [TaskUnit("probe-9")], 100
        )
        running_uuid = running.run_uuid
        for email, permissions in (("viewer@example.com", [VIEW]), ("stranger@example.com", [])):
            make_user(email, *permissions)
    web = webtest.TestApp(app)
    pending = web.post_json(
        "/api/v1/statements/requests", {"period": PERIOD}, headers=bearer(token), status=202
    )
    completed = web.post_json(
        "/api/v1/statements/requests", {"period": "2025-09"}, headers=bearer(token), status=200
    )
    return World(
        run_uuid, running_uuid, pending.json["id"], completed.json["id"], statement_id, token
    )


def drive_the_tenant_api(app: Flask, world: World) -> None:
    web, auth = webtest.TestApp(app), bearer(world.token)
    requests = "/api/v1/statements/requests"
    web.post_json(requests, {"period": "2025-08"}, headers=auth, status=202)
    web.post_json(requests, {"period": "2025-09"}, headers=auth, status=200)
    for bad in ({"period": "2025-13"}, {"period": "2999-01"}, {"month": PERIOD}, [PERIOD]):
        web.post_json(requests, bad, headers=auth, status=400)
    web.post(requests, "x" * (MAX_BODY + 1), headers=auth, content_type=JSON, status=413)
    web.post_json(requests, {"period": PERIOD}, status=401)
    for request_id in (world.pending_request, world.completed_request):
        web.get(f"/api/v1/async-requests/{request_id}", headers=auth, status=200)
    web.get("/api/v1/async-requests/not-a-uuid", headers=auth, status=404)
    web.get(f"/api/v1/async-requests/{world.pending_request}", status=401)
    web.get(f"/api/v1/statements/{world.statement_id}", headers=auth, status=200)
    web.get("/api/v1/statements/99999999", headers=auth, status=404)
    web.get(f"/api/v1/statements/{world.statement_id}", status=401)
    web.get("/api/v1/openapi.json", status=200)
    # Flask's own errors on the prefix: an unknown URL, a method the route lacks.
    web.get("/api/v1/nothing-here", headers=auth, status=404)
    web.delete(requests, headers=auth, status=405)


def drive_over_the_rate_limit(app: Flask, world: World) -> None:
    # An address of its own: the requests before counted on the test client's address,
    # in a window that starts with this one's at the top of an hour.
    web = webtest.TestApp(app, extra_environ={"REMOTE_ADDR": "192.0.2.41"})
    auth = bearer(world.token)
    web.get("/api/v1/openapi.json", status=200)  # the address's one request of the window
    web.post_json("/api/v1/statements/requests", {"period": PERIOD}, headers=auth, status=429)
    web.get(f"/api/v1/async-requests/{world.pending_request}", headers=auth, status=429)
    web.get(f"/api/v1/statements/{world.statement_id}", headers=auth, status=429)
    web.get("/api/v1/openapi.json", status=429)


def drive_the_backoffice_api(app: Flask, world: World) -> None:
    base = "/api/v1/backoffice"
    reads = [
        "/task-runs",
        f"/task-runs/{world.run_uuid}",
        f"/task-runs/{world.run_uuid}/units",
        f"/task-runs/{world.run_uuid}/errors",
        f"/task-runs/{world.run_uuid}/unit?key=probe-2",
        f"/task-runs/{world.running_uuid}/compare",
        "/stale-units",
        "/units?key=probe-2",
        "/workers",
        "/queues",
        "/search?q=probe",
        "/schedules",
        "/schedules/payments.monthly_statements",
        "/openapi.json",
    ]
    anonymous, stranger, viewer = browser(app), browser(app), browser(app)
    sign_in(stranger, Operator("stranger@example.com"))
    sign_in(viewer, Operator("viewer@example.com"))
    for path in reads:
        anonymous.get(base + path, status=401)
        stranger.get(base + path, status=403)
        viewer.get(base + path, status=200)
    answers = {
        200: (
            "/task-runs?limit=1",
            f"/task-runs?status=running&type=diagnostics.probe&cursor={world.run_uuid}",
            f"/task-runs/{world.running_uuid}",
            f"/task-runs/{world.run_uuid}/units?status=failed&limit=2",
            f"/task-runs/{world.run_uuid}/errors?limit=1",
            "/stale-units?limit=5",
            "/units?tenant=1&key=",
            f"/search?q={world.run_uuid.upper()}",
            "/search?q=Acme",
            "/search?q=",
        ),
        400: (
            "/task-runs?status=exploded",
            "/task-runs?cursor=garbage",
            f"/task-runs/{world.run_uuid}/units?limit=0",
            f"/task-runs/{world.run_uuid}/unit",
            f"/task-runs/{world.running_uuid}/compare?with=%01",
            "/stale-units?cursor=nope",
            f"/task-runs/{world.run_uuid}/errors?cursor=no+such+group",
            "/units",
            "/units?key=a&tenant=1",
            "/search?q=%01",
        ),
        404: (
            "/task-runs/not-a-uuid",
            "/task-runs/not-a-uuid/units",
            "/task-runs/00000000-0000-4000-8000-000000000000/errors",
            "/schedules/no.such.schedule",
            f"/task-runs/{world.run_uuid}/unit?key=no-such-unit",
            f"/task-runs/{world.run_uuid}/compare",
            "/no-such-read",
        ),
    }
    for status, paths in answers.items():
        for path in paths:
            viewer.get(base + path, status=status)
    viewer.post(base + "/task-runs", status=405)


def drive_over_long_urls(app: Flask, world: World) -> None:
    """Every operation of both documents, its URL one byte over the limit: a 414 each."""
    web = webtest.TestApp(app)
    ids = {
        "run_uuid": world.run_uuid,
        "request_uuid": world.pending_request,
        "statement_id": str(world.statement_id),
        "name": "taskrunner.prune",
    }
    for document in Contracts(app).documents:
        for template, item in document["paths"].items():
            path = template.format(**ids)
            padding = "?pad=" + "x" * (MAX_REQUEST_TARGET - len(path) - len("?pad=") + 1)
            for method in item:
                # No credential: the length is refused before any is read.
                web.request(path + padding, method=method.upper(), status=414)


def drive_during_a_database_outage(app: Flask, outage: Flask, world: World) -> None:
    """Every operation of both documents while the database refuses every connection, asked
    as a signed-in operator with a valid token would: a 503 problem with Retry-After each."""
    viewer = browser(app)
    sign_in(viewer, Operator("viewer@example.com"))
    web = browser(outage)
    for name, value in viewer.cookies.items():
        web.set_cookie(name, value)
    ids = {
        "run_uuid": world.run_uuid,
        "request_uuid": world.pending_request,
        "statement_id": str(world.statement_id),
        "name": "taskrunner.prune",
    }
    for document in Contracts(app).documents:
        for template, item in document["paths"].items():
            for method in item:
                web.request(
                    template.format(**ids),
                    method=method.upper(),
                    headers={**bearer(world.token), "Content-Type": JSON},
                    body=json.dumps({"period": PERIOD}).encode() if method == "post" else b"",
                    status=503,
                )


def test_every_recorded_response_is_documented_field_by_field(make_app):
    app = make_app(MAX_CONTENT_LENGTH=MAX_BODY)
    recorded = record(app)
    world = seed(app)
    drive_the_tenant_api(app, world)
    drive_the_backoffice_api(app, world)
    drive_over_long_urls(app, world)
    # A 503 needs a queue that is down: another app, with the same recorder.
    down = make_app(QUEUE_DRIVER="redis", REDIS_URL="redis://127.0.0.1:1/0")
    recorded_down = record(down)
    webtest.TestApp(down).post_json(
        "/api/v1/statements/requests",
        {"period": "2025-07"},
        headers=bearer(world.token),
        status=503,
    )
    # A 503 of the database: another app whose database refuses every connection.
    outage = refused_app(make_app.base_config)
    recorded_outage = record(outage)
    drive_during_a_database_outage(app, outage, world)
    # A 429 needs an address over its rate limit: another app, one request per window.
    limited = make_app(TENANT_API_RATE_PER_ADDRESS=1, TENANT_API_RATE_WINDOW_SECONDS=3600)
    recorded_limited = record(limited)
    drive_over_the_rate_limit(limited, world)
    contracts = Contracts(app)

    failures = [
        f"{answer}: {v}"
        for answer in recorded + recorded_down + recorded_outage + recorded_limited
        for v in contracts.violations(answer)
    ]

    assert failures == []
    seen: dict[str, set[str]] = {}
    for answer in recorded + recorded_down + recorded_outage + recorded_limited:
        if answer.rule is not None:
            key = f"{answer.method} {openapi_path(answer.rule)}"
            seen.setdefault(key, set()).add(str(answer.status))
    for document in contracts.documents:
        for operation, statuses in operations(document).items():
            missing = statuses - seen.get(operation, set())
            assert not missing, f"{operation}: documented {sorted(missing)} never answered here"


def test_the_recorder_catches_a_header_its_response_does_not_list(make_app):
    app = make_app()
    recorded = record(app)
    seed(app)  # asks twice: a pending request (202) and a settled one (200)
    contracts = Contracts(app)
    [settled] = [a for a in recorded if (a.method, a.status) == ("POST", 200)]
    [pending] = [a for a in recorded if (a.method, a.status) == ("POST", 202)]
    assert contracts.violations(settled) == contracts.violations(pending) == []
    document = contracts.document_for(settled.path)
    responses = document["paths"][openapi_path(settled.rule)]["post"]["responses"]

    # As if the document forgot them (this app's document only: ``build`` caches per app).
    del responses["200"]["headers"]["Location"]
    responses["202"]["headers"]["Retry-After"]["required"] = False

    assert contracts.violations(settled) == ["header Location is not documented for 200"]
    assert contracts.violations(pending) == []  # listed, even as optional, is documented
    del responses["202"]["headers"]["Retry-After"]
    assert contracts.violations(pending) == ["header Retry-After is not documented for 202"]
    # A custom header the API would add is caught the same; the app-wide security ones are not.
    settled.headers["X-Request-Budget"] = "3"
    settled.headers["RateLimit-Remaining"] = "9"
    settled.headers["X-Content-Type-Options"] = "nosniff"
    assert contracts.violations(settled) == [
        "header Location is not documented for 200",
        "header X-Request-Budget is not documented for 200",
        "header RateLimit-Remaining is not documented for 200",
    ]


def test_the_recorder_catches_an_undocumented_parameter_status_field_and_error_body(make_app):
    app = make_app()
    extra = Blueprint("api_probe", __name__, url_prefix="/api/v1/backoffice")

    @extra.get("/task-runs/<run_uuid>/errors-probe")
    def leaky(run_uuid: str):
        request.args.get("secret_filter")
        return jsonify(uuid=run_uuid, groups=[], internal_id=7), 201

    app.register_blueprint(extra)
    recorded = record(app)
    webtest.TestApp(app).get(
        "/api/v1/backoffice/task-runs/x/errors-probe?secret_filter=1", status=201
    )
    contracts = Contracts(make_app())
    # Judge the probe's answer as if it were the documented operation on the same rule shape.
    [answer] = recorded
    answer.rule = "/api/v1/backoffice/task-runs/<run_uuid>/errors"

    problems = contracts.violations(answer)

    assert any("secret_filter" in p for p in problems), problems
    assert any("status 201 is not documented" in p for p in problems), problems
    answer.status = 200
    assert any("internal_id" in p for p in contracts.violations(answer))
    answer.status, answer.media_type, answer.body = 404, "application/json", {"error": "x"}
    assert any("media type" in p for p in contracts.violations(answer))


def test_flask_errors_on_the_api_prefixes_are_problem_bodies_with_their_headers(make_app):
    app = make_app(MAX_CONTENT_LENGTH=MAX_BODY)
    broken = Blueprint("api_broken", __name__, url_prefix="/api/v1/backoffice")
    broken.add_url_rule("/broken", "broken", lambda: 1 / 0)
    app.register_blueprint(broken)
    web = webtest.TestApp(app)
    with app.app_context():
        _tenant_id, token = tenant_with_token("Acme")

    wrong_method = web.delete("/api/v1/backoffice/task-runs", status=405)
    unknown = web.get("/api/v1/unknown", status=404)
    too_large = web.post(
        "/api/v1/statements/requests",
        "x" * (MAX_BODY + 1),
        headers=bearer(token),
        content_type=JSON,
        status=413,
    )

    assert wrong_method.content_type == MEDIA_TYPE
    assert "GET" in wrong_method.headers["Allow"]
    assert (wrong_method.json["error"], unknown.json["error"]) == (
        "method_not_allowed",
        "not_found",
    )
    assert too_large.json == {
        "error": "content_too_large",
        "title": "Request Entity Too Large",
        "status": 413,
        "detail": too_large.json["detail"],
    }
    crashed = web.get("/api/v1/backoffice/broken", status=500)
    assert (crashed.content_type, crashed.json["error"]) == (MEDIA_TYPE, "internal_error")
    assert "ZeroDivision" not in crashed.text
    # HTML elsewhere: the pages keep their error page.
    assert web.get("/backoffice/nothing", status=404).content_type == "text/html"


def test_a_url_over_the_limit_is_a_414_problem_before_any_credential_is_read(app):
    web = webtest.TestApp(app)
    path = "/api/v1/backoffice/task-runs?q="
    at_limit = path + "x" * (MAX_REQUEST_TARGET - len(path))

    assert web.get(at_limit, status=401).json["error"] == "unauthorized"
    over = web.get(at_limit + "x", status=414)
    unknown = web.get("/api/v1/nothing?pad=" + "x" * MAX_REQUEST_TARGET, status=414)

    assert over.content_type == unknown.content_type == MEDIA_TYPE
    assert over.json == {
        "error": "uri_too_long",
        "title": "Request URI Too Long",
        "status": 414,
        "detail": f"the path and query exceed {MAX_REQUEST_TARGET} bytes",
    }
    # Pages keep their own answers: the limit is the APIs'.
    assert web.get("/login?pad=" + "x" * MAX_REQUEST_TARGET).status_int == 200


def test_the_error_codes_are_frozen():
    # Clients branch on these: renaming one breaks them, whatever the document then says.
    assert CODES == {
        400: "bad_request",
        401: "unauthorized",
        403: "forbidden",
        404: "not_found",
        405: "method_not_allowed",
        413: "content_too_large",
        414: "uri_too_long",
        429: "too_many_requests",
        500: "internal_error",
        503: "unavailable",
    }


def test_a_rate_limited_answer_is_shaped_by_the_one_helper_and_matches_the_document(app):
    contracts = Contracts(app)
    document = contracts.document_for("/api/v1/statements/requests")
    response_spec = document["components"]["responses"]["ProblemTooManyRequests"]
    with app.test_request_context("/api/v1/statements/requests"):
        answer = problem(429, "slow down", retry_after=30)

    assert answer.headers["Retry-After"] == "30"
    assert response_spec["headers"]["Retry-After"]["required"] is True
    schema = response_spec["content"][MEDIA_TYPE]["schema"]
    assert contracts.validate(document, schema, json.loads(answer.get_data())) == []
