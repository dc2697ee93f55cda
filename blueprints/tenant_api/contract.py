"""The tenant API's OpenAPI document: public, served at ``/api/v1/openapi.json``.

Its examples are also the README's client section (``flask openapi readme``):
keep them realistic, they are what a client author copies.
"""

from __future__ import annotations

from typing import Any

from flask import Flask

from asyncrequests.models import RequestStatus
from blueprints.openapi import (
    DATE_TIME,
    UUID,
    Body,
    Document,
    Link,
    Operation,
    Param,
    Reply,
    closed,
    nullable,
    ref,
)
from blueprints.tenant_api.responses import RETRY_AFTER_SECONDS

PREFIX = "/api/v1/"
BACKOFFICE_PREFIX = "/api/v1/backoffice/"
EXAMPLE_REQUEST = "6f1c0b9e-3c1a-4e8b-9a57-2d4f0e1b7c21"
EXAMPLE_STATEMENT = 812
EXAMPLE_PERIOD = "2026-10"

PERIOD = {
    "type": "string",
    "pattern": r"^[0-9]{4}-(0[1-9]|1[0-2])$",
    "description": "A calendar month, `YYYY-MM`, that has ended.",
}
STATEMENT_ID = {"type": "integer", "minimum": 1, "maximum": 2**63 - 1}
PATH = {"type": "string", "pattern": "^/api/v1/"}

STATEMENT_RESULT = {
    "statement_id": EXAMPLE_STATEMENT,
    "period": EXAMPLE_PERIOD,
    "total_cents": 1873221,
    "currency": "EUR",
    "download_path": f"/api/v1/statements/{EXAMPLE_STATEMENT}",
}


def async_request_example(status: RequestStatus) -> dict[str, Any]:
    done = status is not RequestStatus.PENDING
    links = {"self": f"/api/v1/async-requests/{EXAMPLE_REQUEST}"}
    if status is RequestStatus.COMPLETED:
        links["statement"] = f"/api/v1/statements/{EXAMPLE_STATEMENT}"
    return {
        "id": EXAMPLE_REQUEST,
        "kind": "payments.statement",
        "subject": EXAMPLE_PERIOD,
        "status": str(status),
        "result": STATEMENT_RESULT if status is RequestStatus.COMPLETED else None,
        "reason": "there is no statement for the period 2026-10"
        if status is RequestStatus.FAILED
        else None,
        "created_at": "2026-11-29T11:02:10Z",
        "updated_at": "2026-11-29T11:02:13Z" if done else "2026-11-29T11:02:10Z",
        "finished_at": "2026-11-29T11:02:13Z" if done else None,
        "links": links,
    }


SCHEMAS: dict[str, Any] = {
    "StatementRequest": {
        "type": "object",
        "properties": {"period": PERIOD},
        "required": ["period"],
        "description": "Other members are ignored.",
    },
    "StatementResult": closed(
        {
            "statement_id": STATEMENT_ID,
            "period": PERIOD,
            "total_cents": {"type": "integer"},
            "currency": {"type": "string", "minLength": 3, "maxLength": 3},
            "download_path": PATH,
        }
    ),
    "AsyncRequest": closed(
        {
            "id": UUID,
            "kind": {"type": "string", "description": "`payments.statement`"},
            "subject": {"type": "string", "description": "The period of a statement."},
            "status": {"type": "string", "enum": [str(s) for s in RequestStatus]},
            "result": nullable(ref("StatementResult")),
            "reason": nullable(
                {"type": "string", "description": "Why it failed, safe to show; else null."}
            ),
            "created_at": DATE_TIME,
            "updated_at": DATE_TIME,
            "finished_at": nullable(DATE_TIME),
            "links": closed({"self": PATH, "statement": PATH}, optional=("statement",)),
        }
    ),
    "Statement": closed(
        {
            "id": STATEMENT_ID,
            "period": PERIOD,
            "total_cents": {"type": "integer"},
            "currency": {"type": "string", "minLength": 3, "maxLength": 3},
            "lines": {"type": "integer", "minimum": 0},
            "generated_at": DATE_TIME,
        }
    ),
    "OpenApiDocument": {"type": "object", "required": ["openapi", "info", "paths"]},
}

HEADERS = {
    "Location": {
        "description": "Where to poll the request.",
        "schema": PATH,
    },
    "WWW-Authenticate": {
        "description": 'The bearer challenge, `Bearer realm="tenant-api"`.',
        "schema": {"type": "string", "pattern": "^Bearer "},
    },
    "Content-Disposition": {
        "description": "A download named `statement-<period>-<id>.json`.",
        "schema": {"type": "string", "pattern": "^attachment; filename="},
    },
}

POLL = Link(
    "getAsyncRequest",
    {"request_uuid": "$response.body#/id"},
    "Poll the request until it is completed or failed.",
)
DOWNLOAD = Link(
    "getStatement",
    {"statement_id": "$response.body#/result/statement_id"},
    "Download the statement of a completed request.",
)

OPERATIONS: dict[str, Operation] = {
    "tenant_api.request_statement_view": Operation(
        "requestStatement",
        "Ask for one period's statement",
        description=(
            "Opens an async request, or returns the pending one for that period: asking "
            "again is safe. Poll its `Location` after `Retry-After` seconds."
        ),
        body=Body("The period.", "StatementRequest", {"period": EXAMPLE_PERIOD}),
        replies=(
            Reply(
                202,
                "The request is pending: poll `Location` after `Retry-After` seconds.",
                "AsyncRequest",
                async_request_example(RequestStatus.PENDING),
                headers={"Location": True, "Retry-After": True},
                links={"poll": POLL},
            ),
            Reply(
                200,
                "Settled already: completed (the statement exists) or failed.",
                "AsyncRequest",
                async_request_example(RequestStatus.COMPLETED),
                headers={"Location": True},
                links={"poll": POLL, "download": DOWNLOAD},
            ),
        ),
        errors=(400, 503),
    ),
    "tenant_api.async_request": Operation(
        "getAsyncRequest",
        "Poll an async request",
        description=(
            "`pending` (with `Retry-After`), `completed` (with `result` and "
            "`links.statement`) or `failed` (with `reason`). Another tenant's request "
            "is a 404, like one that does not exist."
        ),
        path=(Param("request_uuid", "The request's `id`.", UUID, EXAMPLE_REQUEST),),
        replies=(
            Reply(
                200,
                "The request.",
                "AsyncRequest",
                async_request_example(RequestStatus.COMPLETED),
                headers={"Retry-After": False},
                links={"download": DOWNLOAD},
            ),
        ),
        errors=(404,),
    ),
    "tenant_api.statement": Operation(
        "getStatement",
        "Download a statement",
        description="Another tenant's statement is a 404, like one that does not exist.",
        path=(
            Param(
                "statement_id",
                "The statement's id (`result.statement_id`).",
                STATEMENT_ID,
                EXAMPLE_STATEMENT,
            ),
        ),
        replies=(
            Reply(
                200,
                "The statement, as a JSON download.",
                "Statement",
                {
                    "id": EXAMPLE_STATEMENT,
                    "period": EXAMPLE_PERIOD,
                    "total_cents": 1873221,
                    "currency": "EUR",
                    "lines": 14,
                    "generated_at": "2026-11-29T11:02:12Z",
                },
                headers={"Content-Disposition": True},
            ),
        ),
        errors=(404,),
    ),
    "tenant_api_document.document": Operation(
        "getTenantApiDocument",
        "This document",
        public=True,
        replies=(
            Reply(
                200,
                "The OpenAPI document of the tenant API.",
                "OpenApiDocument",
                {"openapi": "3.1.0", "info": {"title": "Taskledger tenant API"}, "paths": {}},
            ),
        ),
    ),
}


def _bearer(_app: Flask) -> dict[str, Any]:
    return {
        "type": "http",
        "scheme": "bearer",
        "description": "A tenant API token (`tlk_…`), created by an operator and shown once.",
    }


TENANT = Document(
    title="Taskledger tenant API",
    description=(
        "A tenant's own clients ask for their statements and poll for them. Every call "
        "but this document's carries `Authorization: Bearer <token>`; no cookies. Errors "
        "are problem bodies (`application/problem+json`) with a stable `error` code. "
        f"A pending request's `Retry-After` is {RETRY_AFTER_SECONDS} seconds."
    ),
    covers=lambda path: path.startswith(PREFIX) and not path.startswith(BACKOFFICE_PREFIX),
    security_scheme="tenantToken",
    security=_bearer,
    operations=OPERATIONS,
    schemas=SCHEMAS,
    headers=HEADERS,
    every_operation_errors=(429,),
    body_errors=(413,),
    problem_headers={401: {"WWW-Authenticate": True}},
)
