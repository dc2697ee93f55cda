"""Permissions of operators and the view decorator that enforces them.

The decorator marks the view it wraps (``required_permission``) so a test can
walk the URL map and prove that no backoffice or API route is left unguarded.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any, TypeVar
from urllib.parse import urlencode

from flask import abort, redirect, request
from flask_login import current_user

from blueprints.problems import wants_problem

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
                return redirect(login_url(_next_path()))
            if not current_user.has_permission(name):
                abort(403, description=f"permission {name} required")
            return view(*args, **kwargs)

        guarded.required_permission = name  # type: ignore[attr-defined]
        return guarded  # type: ignore[return-value]

    return decorate
