"""JSON shapes of the tenant API."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from flask import Response, jsonify, url_for

from asyncrequests.platform import RequestView
from payments.models import Statement

# How long a client should wait before polling a pending request again.
RETRY_AFTER_SECONDS = 2


def iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") + "Z" if value else None


def async_request(view: RequestView) -> dict[str, Any]:
    links = {"self": url_for("tenant_api.async_request", request_uuid=view.uuid)}
    if view.result and "statement_id" in view.result:
        links["statement"] = url_for(
            "tenant_api.statement", statement_id=view.result["statement_id"]
        )
    return {
        "id": view.uuid,
        "kind": view.kind,
        "subject": view.subject,
        "status": str(view.status),
        "result": view.result,
        "reason": view.reason,
        "created_at": iso(view.created_at),
        "updated_at": iso(view.updated_at),
        "finished_at": iso(view.finished_at),
        "links": links,
    }


def async_request_response(view: RequestView, status: int = 200) -> Response:
    response = jsonify(async_request(view))
    response.status_code = status
    if view.pending:
        response.headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


def statement(row: Statement) -> dict[str, Any]:
    return {
        "id": row.id,
        "period": row.period,
        "total_cents": row.total_cents,
        "currency": row.currency,
        "lines": row.lines,
        "generated_at": iso(row.generated_at),
    }
