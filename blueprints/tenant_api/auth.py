"""Bearer-token authentication and rate limits of every tenant API request.

Every request (the public document's too) counts on its address's limit before
anything else happens, its token's lookup included: a flood of guessed tokens is
slowed down like a flood of real calls, and a guess over the limit costs no read. A
request whose token is live then counts on that token's limit too. Over a limit, the
answer is a 429 with ``Retry-After``. A token is read from the Authorization header
only; one put in the query string is refused like a missing one (and scrubbed from the
logs).
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


def _address_limit() -> ratelimit.Limit:
    return ratelimit.Limit(
        f"tenant-api:address:{ratelimit.client_network(request.remote_addr)}",
        current_app.config["TENANT_API_RATE_PER_ADDRESS"],
    )


def _token_limit(token: str) -> ratelimit.Limit:
    return ratelimit.Limit(
        f"tenant-api:token:{public_id(token)}", current_app.config["TENANT_API_RATE_PER_TOKEN"]
    )


def _refused_over(limit: ratelimit.Limit):
    """Count this request on ``limit``; a 429 problem if it went over, else None."""
    wait = ratelimit.hit([limit], current_app.config["TENANT_API_RATE_WINDOW_SECONDS"])
    if wait:
        return problem(429, f"too many requests; retry in {wait} s", retry_after=wait)
    return None


def over_rate_limit():
    """Count this request on its address's limit; a 429 problem if it went over, else None."""
    return _refused_over(_address_limit())


@bp.before_request
def require_tenant_token():
    # The address is counted before the token is looked up: a guess over the limit costs
    # no read of the tokens. Only a token found live counts on its own limit, so guessing
    # another tenant's public id never spends that tenant's requests.
    limited = over_rate_limit()
    if limited is not None:
        return limited
    token = _bearer_token()
    tenant_id = authenticate(token) if token else None
    if tenant_id is None:
        challenge = CHALLENGE + (', error="invalid_token"' if token else "")
        return problem(
            401,
            "a valid tenant API token is required: Authorization: Bearer <token>",
            headers={"WWW-Authenticate": challenge},
        )
    limited = _refused_over(_token_limit(token))
    if limited is not None:
        return limited
    g.tenant_id = tenant_id
    return None
