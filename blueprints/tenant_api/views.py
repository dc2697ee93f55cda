"""Thin views over the statement-request and async-request services."""

from __future__ import annotations

from flask import g, jsonify, request, url_for

from asyncrequests.platform import find_for_tenant
from blueprints.problems import problem
from blueprints.tenant_api.blueprint import bp
from blueprints.tenant_api.responses import async_request_response, statement
from payments.statement_requests import (
    StatementsUnavailable,
    request_statement,
    tenant_statement,
)
from payments.statements import StatementError

NOT_FOUND = "no such resource"
UNAVAILABLE_RETRY_SECONDS = 60


@bp.post("/statements/requests")
def request_statement_view():
    """Ask for one period's statement: 202 with the pending request, 200 once it is ready."""
    body = request.get_json(silent=True)
    period = body.get("period") if isinstance(body, dict) else None
    if not isinstance(period, str):
        return problem(400, 'send a JSON body {"period": "YYYY-MM"}')
    try:
        view, _created = request_statement(g.tenant_id, period)
    except StatementsUnavailable as exc:
        return problem(503, str(exc), retry_after=UNAVAILABLE_RETRY_SECONDS)
    except StatementError as exc:
        return problem(400, str(exc))
    response = async_request_response(view, 202 if view.pending else 200)
    response.headers["Location"] = url_for("tenant_api.async_request", request_uuid=view.uuid)
    return response


@bp.get("/async-requests/<request_uuid>")
def async_request(request_uuid: str):
    view = find_for_tenant(g.tenant_id, request_uuid)
    if view is None:
        return problem(404, NOT_FOUND)
    return async_request_response(view)


@bp.get("/statements/<int:statement_id>", endpoint="statement")
def statement_view(statement_id: int):
    row = tenant_statement(g.tenant_id, statement_id)
    if row is None:
        return problem(404, NOT_FOUND)
    response = jsonify(statement(row))
    response.headers["Content-Disposition"] = (
        f'attachment; filename="statement-{row.period}-{row.id}.json"'
    )
    return response
