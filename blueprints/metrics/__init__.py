"""``GET /metrics``: the ledger's figures for Prometheus, behind a bearer token.

Not behind the backoffice sign-in (Prometheus has no session): ``METRICS_TOKEN`` is the
key. Unset, the endpoint does not exist (404, as any unknown path); set, a request
without ``Authorization: Bearer <token>`` is a 401. The answer carries bounded labels
only (type, status, queue, reason, schedule, state): never a tenant, a unit or a run.
"""

from __future__ import annotations

import hashlib
import hmac

from flask import Blueprint, Response, abort, current_app, request

from alerts import operators
from blueprints.metrics import exposition
from taskrunner.contract import metrics

bp = Blueprint("metrics", __name__)

CHALLENGE = 'Bearer realm="metrics"'


def bearer_token(header: str) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


def token_matches(given: str, expected: str) -> bool:
    """Compared in constant time; digests first, so not even the length shows.

    ``given`` is a header value, its bytes read as Latin-1 (WSGI's rule): its bytes are
    compared with the UTF-8 of the configured token.
    """
    return hmac.compare_digest(
        hashlib.sha256(given.encode("latin-1", "replace")).digest(),
        hashlib.sha256(expected.encode()).digest(),
    )


@bp.get("/metrics")
def scrape() -> Response:
    expected = current_app.config.get("METRICS_TOKEN") or ""
    if not expected:
        abort(404)
    given = bearer_token(request.headers.get("Authorization", ""))
    if given is None or not token_matches(given, expected):
        return Response(
            "a valid bearer token is required\n",
            401,
            {"WWW-Authenticate": CHALLENGE, "Cache-Control": "no-store"},
            mimetype="text/plain",
        )
    body, content_type = exposition.render(
        metrics.read(), request.headers.get("Accept", ""), operators.open_by_rule()
    )
    return Response(body, 200, {"Cache-Control": "no-store"}, content_type=content_type)
