"""Permissions of operators and the view decorator that enforces them.

The decorator marks the view it wraps (``required_permission``) so a test can
walk the URL map and prove that no backoffice or API route is left unguarded.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar
from urllib.parse import urlencode, urlsplit

from flask import Response, abort, flash, redirect, request, session
from flask_login import current_user

from blueprints.problems import wants_problem

# The session cookie's key for the secret of the operator's server-side session.
SESSION_SECRET = "operator_session"
# What sign-in says to a browser whose session ended under it.
SESSION_ENDED = "Your session ended. Sign in again to carry on."

PERMISSIONS: dict[str, str] = {
    "task-runner.runs.view": "See task runs, their units, errors and events",
    "task-runner.runs.manage": "Retry and cancel task runs",
    "course-builder.runs.view": "See course-builder runs, their stages and steps",
    "course-builder.runs.manage": "Start, stop and retry course-builder runs",
}

F = TypeVar("F", bound=Callable[..., Any])


def login_url(next_path: str) -> str:
    return "/login?" + urlencode({"next": next_path})


def _next_path() -> str:
    # ``full_path`` always ends in "?" even without a query string.
    return request.full_path.rstrip("?") if request.query_string else request.path


def page_of_form() -> str | None:
    """The page a form was posted from (same site only): where the operator returns."""
    parts = urlsplit(request.referrer or "")
    if parts.netloc != request.host or not parts.path.startswith("/"):
        return None
    return parts.path + (f"?{parts.query}" if parts.query else "")


def sign_in_again(ended: bool) -> Response:
    """To sign-in, then back to what the operator was doing: the page itself for a read,
    the page a form was on for a post (its action may not be read back with a GET).

    ``ended``: this browser had a session that is gone (signed out elsewhere, expired, a
    password change); the sign-in page says so.
    """
    if ended:
        session.pop(SESSION_SECRET, None)
        flash(SESSION_ENDED, "info")
    back = _next_path() if request.method in ("GET", "HEAD") else page_of_form()
    return redirect(login_url(back) if back else "/login")


def wants_event_stream() -> bool:
    """Whether a browser's ``EventSource`` asks: it sends this ``Accept`` and nothing else."""
    return request.headers.get("Accept", "") == "text/event-stream"


def refused_stream() -> Response:
    """A live stream refused to a session that ended or lacks the permission: 204, which
    tells an ``EventSource`` to stop without reading a body. A sign-in page or an error
    page would be read as a stream and logged as a broken one in the browser's console;
    the page's script asks the page itself what went wrong (``static/live.js``)."""
    refused = Response(status=204)
    del refused.headers["Content-Type"]  # it has no body to type
    return refused


def permission_required(name: str) -> Callable[[F], F]:
    """Guard a view: sign-in first (401 JSON under /api/), then ``name`` (403)."""
    if name not in PERMISSIONS:
        raise ValueError(f"unknown permission {name!r}")

    def decorate(view: F) -> F:
        @wraps(view)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            if not current_user.is_authenticated:
                if wants_problem():
                    abort(401, description="sign in first: this API needs a backoffice session")
                if wants_event_stream():
                    return refused_stream()
                return sign_in_again(ended=SESSION_SECRET in session)
            if not current_user.has_permission(name):
                if wants_event_stream():
                    return refused_stream()
                abort(403, description=f"permission {name} required")
            return view(*args, **kwargs)

        guarded.required_permission = name  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return decorate
