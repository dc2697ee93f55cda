"""JSON problem bodies (RFC 9457): the one shape of every error under ``/api/``.

``{"error": "not_found", "title": "Not Found", "status": 404, "detail": "no such run"}``,
served as ``application/problem+json``. ``error`` is the stable code a client
branches on (one per status, listed in ``CODES``); ``detail`` is for people and
may change. Views answer errors with ``problem()`` or ``abort()``; the app's
error handlers turn Flask's own errors (unknown URL, wrong method, a body over
``MAX_CONTENT_LENGTH``) into the same shape on these URLs, keeping their headers
(``Allow``), so no error there is ever HTML. A rate limit answers
``problem(429, detail, retry_after=seconds)`` (or raises Werkzeug's
``TooManyRequests(retry_after=…)``): both carry ``Retry-After``. A new status
gets its code here and its place in the documents (``blueprints/openapi.py``).
"""

from __future__ import annotations

from flask import Response, json, request
from werkzeug.http import HTTP_STATUS_CODES

MEDIA_TYPE = "application/problem+json"
API_PREFIX = "/api/"

# Stable codes: a client's branches depend on them, so they never follow a library's wording.
CODES: dict[int, str] = {
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
# Statuses whose answer tells the client when to try again.
RETRY_STATUSES = (429, 503)
# The longest request target (path and query, as sent) the APIs read; longer is a 414
# problem. The HTTP server's own limit sits above it, so the app answers first:
# gunicorn's limit_request_line (gunicorn.conf.py, wherever gunicorn is started).
MAX_REQUEST_TARGET = 4096
SERVER_REQUEST_LINE_LIMIT = 8190


def wants_problem() -> bool:
    """Whether this request is answered in problem bodies (the JSON APIs) rather than pages."""
    return request.path.startswith(API_PREFIX)


def refuse_long_request_target() -> Response | None:
    """A ``before_request`` hook: a 414 problem for a target over ``MAX_REQUEST_TARGET``."""
    environ = request.environ
    # gunicorn and Werkzeug's server keep the target as sent; a test client may not.
    target = environ.get("RAW_URI") or environ.get("REQUEST_URI") or request.full_path
    if wants_problem() and len(target) > MAX_REQUEST_TARGET:
        return problem(414, f"the path and query exceed {MAX_REQUEST_TARGET} bytes")
    return None


def code_for(status: int) -> str:
    return CODES.get(status) or HTTP_STATUS_CODES.get(status, "error").lower().replace(" ", "_")


def title_for(status: int) -> str:
    return HTTP_STATUS_CODES.get(status, "Error")


def problem(
    status: int,
    detail: str,
    *,
    retry_after: int | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """The problem response for ``status``; ``retry_after`` seconds for a 429 or a 503."""
    body = {
        "error": code_for(status),
        "title": title_for(status),
        "status": status,
        "detail": detail,
    }
    response = Response(json.dumps(body), status=status, mimetype=MEDIA_TYPE)
    if retry_after is not None:
        response.headers["Retry-After"] = str(max(1, int(retry_after)))
    response.headers.update(headers or {})
    return response
