"""OpenAPI 3.1 documents of the JSON APIs, built from declarations beside the views.

Each API package keeps a ``contract.py``: its component schemas and one
``Operation`` per endpoint (``blueprints/tenant_api/contract.py``,
``blueprints/api/contract.py``). ``build()`` walks the app's URL map and writes
the document: the path and its parameters come from the rule, 401 from the
document's security scheme, 403 from the view's ``permission_required`` mark,
the document-wide errors (a tenant's 429, a body's 413) from the ``Document``,
414 (a URL over ``MAX_REQUEST_TARGET``) on every operation; everything else is
declared. A route under the document's prefix without a declaration, a
declaration without a route, or a path parameter left undescribed makes
``build()`` raise, so the documents cannot lag the URL map.

Adding an operation (say ``GET /api/v1/backoffice/workers``):

1. write the view as usual (route, ``permission_required``, the service call);
2. add ``"api.workers": Operation(...)`` to ``OPERATIONS`` in the package's
   ``contract.py``: an ``operation_id``, a summary, its query ``Param``s, the
   success ``Reply`` (its schema name and an example) and the problem statuses
   the view itself answers (400 for a bad parameter, 404 for an unknown id);
3. put any new shape in that module's ``SCHEMAS`` with ``closed()``: every
   field listed and required, nothing else allowed;
4. ``pytest tests/web/test_api_contracts.py``: it fails on any route, query
   parameter, status, header (Location, Retry-After, WWW-Authenticate, …: carried
   or required) or response field the document lacks, then
   ``make catalog`` if the tenant API changed (the README's client section).

Objects are closed (``additionalProperties: false``) so that a field the
server adds without documenting it fails the schema checks; every error is a
problem body (``blueprints.problems``) with its stable ``error`` code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from flask import Flask
from werkzeug.routing import Rule

from blueprints.problems import (
    MAX_REQUEST_TARGET,
    MEDIA_TYPE,
    RETRY_STATUSES,
    code_for,
    title_for,
)

OPENAPI_VERSION = "3.1.0"
JSON = "application/json"
IGNORED_METHODS = {"HEAD", "OPTIONS"}
RULE_ARGUMENT = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")

DATE_TIME = {"type": "string", "format": "date-time"}
UUID = {"type": "string", "format": "uuid"}
RETRY_AFTER = {
    "description": "Seconds to wait before asking again.",
    "schema": {"type": "integer", "minimum": 1},
}


class UndocumentedRoute(LookupError):
    """A route and its document disagree: a declaration is missing or left over."""


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def nullable(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` or ``null``."""
    if "$ref" in schema:
        return {"anyOf": [dict(schema), {"type": "null"}]}
    widened = dict(schema)
    widened["type"] = [schema["type"], "null"]
    if "enum" in schema:
        widened["enum"] = [*schema["enum"], None]
    return widened


def closed(properties: Mapping[str, Any], optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """An object with exactly these fields, all required but ``optional``."""
    return {
        "type": "object",
        "properties": dict(properties),
        "required": [name for name in properties if name not in optional],
        "additionalProperties": False,
    }


def array(items: Mapping[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": dict(items)}


@dataclass(frozen=True)
class Param:
    name: str
    description: str
    schema: Mapping[str, Any]
    example: Any = None


@dataclass(frozen=True)
class Link:
    operation_id: str
    parameters: Mapping[str, str]
    description: str


@dataclass(frozen=True)
class Reply:
    status: int
    description: str
    schema: str
    example: Any
    # Header name (in the document's ``headers``, or Retry-After) → always carried?
    headers: Mapping[str, bool] = field(default_factory=dict)
    links: Mapping[str, Link] = field(default_factory=dict)


@dataclass(frozen=True)
class Body:
    description: str
    schema: str
    example: Any


@dataclass(frozen=True)
class Operation:
    operation_id: str
    summary: str
    replies: tuple[Reply, ...]
    # Problem statuses the view itself answers; auth and document-wide ones are added.
    errors: tuple[int, ...] = ()
    path: tuple[Param, ...] = ()
    query: tuple[Param, ...] = ()
    body: Body | None = None
    public: bool = False
    description: str = ""


@dataclass(frozen=True)
class Document:
    title: str
    description: str
    covers: Callable[[str], bool]
    security_scheme: str
    security: Callable[[Flask], dict[str, Any]]
    operations: Mapping[str, Operation]
    schemas: Mapping[str, Any]
    # Response headers by name: description and schema.
    headers: Mapping[str, Any]
    # Problems every operation may answer, and those of operations reading a body.
    every_operation_errors: tuple[int, ...] = ()
    body_errors: tuple[int, ...] = ()
    # Headers carried by a problem of that status (Retry-After is added for 429 and 503).
    problem_headers: Mapping[int, Mapping[str, bool]] = field(default_factory=dict)
    version: str = "1"


def openapi_path(rule: str) -> str:
    """``/task-runs/<run_uuid>`` → ``/task-runs/{run_uuid}``."""
    return RULE_ARGUMENT.sub(r"{\1}", rule)


def covered_rules(app: Flask, document: Document) -> list[tuple[Rule, str]]:
    """(rule, method) of every route the document must describe, in URL order."""
    found = []
    for rule in sorted(app.url_map.iter_rules(), key=lambda r: r.rule):
        if document.covers(rule.rule):
            found += [(rule, method) for method in sorted(rule.methods - IGNORED_METHODS)]
    return found


def problem_schema(status: int) -> dict[str, Any]:
    return closed(
        {
            "error": {"const": code_for(status), "description": "Stable code to branch on."},
            "title": {"type": "string"},
            "status": {"const": status},
            "detail": {"type": "string", "description": "For people; the wording may change."},
        }
    )


def problem_name(status: int) -> str:
    return "Problem" + code_for(status).title().replace("_", "")


def build(app: Flask, document: Document) -> dict[str, Any]:
    """The OpenAPI document, cached per app (routes and declarations are fixed at start)."""
    cache = app.extensions.setdefault("openapi", {})
    if document.title not in cache:
        cache[document.title] = _build(app, document)
    return cache[document.title]


def _build(app: Flask, document: Document) -> dict[str, Any]:
    found: dict[str, tuple[str, str, dict[str, Any]]] = {}
    problems: set[int] = set()
    for rule, method in covered_rules(app, document):
        operation = document.operations.get(rule.endpoint)
        if operation is None:
            raise UndocumentedRoute(
                f"{method} {rule.rule} ({rule.endpoint}) is not in the {document.title} "
                "document: declare its Operation in the package's contract.py"
            )
        if rule.endpoint in found:
            raise UndocumentedRoute(f"{rule.endpoint} answers several methods: split it")
        permission = getattr(app.view_functions[rule.endpoint], "required_permission", None)
        spec, statuses = _operation(operation, rule, permission, document)
        problems |= statuses
        found[rule.endpoint] = (openapi_path(rule.rule), method.lower(), spec)
    leftovers = sorted(set(document.operations) - set(found))
    if leftovers:
        raise UndocumentedRoute(f"declared without a route: {', '.join(leftovers)}")
    # In declaration order: the document reads the way its author wrote it.
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in document.operations:
        path, method, spec = found[endpoint]
        paths.setdefault(path, {})[method] = spec
    return {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": document.title,
            "version": document.version,
            "description": document.description,
        },
        "security": [{document.security_scheme: []}],
        "paths": paths,
        "components": {
            "securitySchemes": {document.security_scheme: document.security(app)},
            "schemas": dict(document.schemas),
            "responses": {
                problem_name(status): _problem_response(status, document)
                for status in sorted(problems)
            },
        },
    }


# Every request under /api/ may be refused for its length before its view runs
# (``blueprints.problems.refuse_long_request_target``), and answered 503 with Retry-After
# while the database cannot answer (``blueprints.ui``): problems like any other.
EVERY_API_ERROR = (414, 503)
PROBLEM_NOTES = {
    414: f"the path and query together exceed {MAX_REQUEST_TARGET:,} bytes",
    503: "the database cannot answer right now (refused or dropped connections); "
    "try again after `Retry-After` seconds",
}


def _operation(
    operation: Operation, rule: Rule, permission: str | None, document: Document
) -> tuple[dict[str, Any], set[int]]:
    declared = {param.name for param in operation.path}
    if declared != set(rule.arguments):
        raise UndocumentedRoute(
            f"{rule.rule}: path parameters {sorted(rule.arguments)} declared as {sorted(declared)}"
        )
    errors = {*operation.errors, *document.every_operation_errors, *EVERY_API_ERROR}
    if not operation.public:
        errors.add(401)
    if permission:
        errors.add(403)
    if operation.body is not None:
        errors |= set(document.body_errors)
    description = operation.description
    if permission:
        description = (description + "\n\n" if description else "") + (
            f"Needs the permission `{permission}`."
        )
    spec: dict[str, Any] = {
        "operationId": operation.operation_id,
        "summary": operation.summary,
        "parameters": [_parameter(p, "path") for p in operation.path]
        + [_parameter(p, "query") for p in operation.query],
        "responses": {str(reply.status): _reply(reply, document) for reply in operation.replies}
        | {
            str(status): {"$ref": f"#/components/responses/{problem_name(status)}"}
            for status in sorted(errors)
        },
    }
    if description:
        spec["description"] = description
    if permission:
        spec["x-required-permission"] = permission
    if operation.public:
        spec["security"] = []
    if operation.body is not None:
        spec["requestBody"] = {
            "required": True,
            "description": operation.body.description,
            "content": {
                JSON: {"schema": ref(operation.body.schema), "example": operation.body.example}
            },
        }
    return spec, errors


def _parameter(param: Param, location: str) -> dict[str, Any]:
    spec = {
        "name": param.name,
        "in": location,
        "required": location == "path",
        "description": param.description,
        "schema": dict(param.schema),
    }
    if location == "query":
        # Blank is absent (the pages' filter forms send `?type=&status=`).
        spec["allowEmptyValue"] = True
    if param.example is not None:
        spec["example"] = param.example
    return spec


def _reply(reply: Reply, document: Document) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "description": reply.description,
        "content": {JSON: {"schema": ref(reply.schema), "example": reply.example}},
    }
    if reply.headers:
        spec["headers"] = _headers(reply.headers, document)
    if reply.links:
        spec["links"] = {
            name: {
                "operationId": link.operation_id,
                "parameters": dict(link.parameters),
                "description": link.description,
            }
            for name, link in reply.links.items()
        }
    return spec


def _headers(headers: Mapping[str, bool], document: Document) -> dict[str, Any]:
    # Inline: a reference could not say whether this response always carries the header.
    known = {"Retry-After": RETRY_AFTER, **document.headers}
    return {name: {**known[name], "required": required} for name, required in headers.items()}


def _problem_response(status: int, document: Document) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "description": f"{title_for(status)} (problem body, `error`: `{code_for(status)}`)"
        + (f": {PROBLEM_NOTES[status]}." if status in PROBLEM_NOTES else ""),
        "content": {MEDIA_TYPE: {"schema": problem_schema(status)}},
    }
    headers = dict(document.problem_headers.get(status, {}))
    if status in RETRY_STATUSES:
        headers["Retry-After"] = True
    if headers:
        spec["headers"] = _headers(headers, document)
    return spec
