"""Bearer-token authentication and rate limits of every tenant API request.

Every request (the public document's too) counts on its address's limit, and an
authenticated one on its token's too, before anything else happens: a flood of
guessed tokens is slowed down like a flood of real calls. Over a limit, the answer is a 429 with
``Retry-After``. A token is read from the Authorization header only; one put in
the query string is refused like a missing one (and scrubbed from the logs).
"""

from __future__ import annotations

from flask import current_app, g, request

from asyncrequests.tokens import authenticate, public_id
from blueprints.problems import problem
from blueprints.tenant_api.blueprint import bp
from security import ratelimit

CHALLENGE = 'Bearer realm="tenant-api"'


def _bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def _limits(token: str | None, authenticated: bool) -> list[ratelimit.Limit]:
    config = current_app.config
    limits = [
        ratelimit.Limit(
            f"tenant-api:address:{ratelimit.client_network(request.remote_addr)}",
            config["TENANT_API_RATE_PER_ADDRESS"],
        )
    ]
    if authenticated and token:
        limits.append(
            ratelimit.Limit(
                f"tenant-api:token:{public_id(token)}", config["TENANT_API_RATE_PER_TOKEN"]
            )
        )
    return limits


def over_rate_limit(token: str | None = None, authenticated: bool = False):
    """Count this request; a 429 problem if it went over a limit, else None."""
    wait = ratelimit.hit(
        _limits(token, authenticated), current_app.config["TENANT_API_RATE_WINDOW_SECONDS"]
    )
    if wait:
        return problem(429, f"too many requests; retry in {wait} s", retry_after=wait)
    return None


@bp.before_request
def require_tenant_token():
    token = _bearer_token()
    tenant_id = authenticate(token) if token else None
    limited = over_rate_limit(token, tenant_id is not None)
    if limited is not None:
        return limited
    if tenant_id is None:
        challenge = CHALLENGE + (', error="invalid_token"' if token else "")
        return problem(
            401,
            "a valid tenant API token is required: Authorization: Bearer <token>",
            headers={"WWW-Authenticate": challenge},
        )
    g.tenant_id = tenant_id
    return None
