"""Bearer-token authentication of every tenant API request."""

from __future__ import annotations

from flask import g, request

from asyncrequests.tokens import authenticate
from blueprints.tenant_api import bp
from blueprints.tenant_api.responses import error

CHALLENGE = 'Bearer realm="tenant-api"'


def _bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


@bp.before_request
def require_tenant_token():
    token = _bearer_token()
    tenant_id = authenticate(token) if token else None
    if tenant_id is None:
        challenge = CHALLENGE + (', error="invalid_token"' if token else "")
        response = error(
            401,
            "unauthorized",
            "a valid tenant API token is required: Authorization: Bearer <token>",
        )
        response.headers["WWW-Authenticate"] = challenge
        return response
    g.tenant_id = tenant_id
    return None
