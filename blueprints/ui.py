"""What every page shares: time filters, security headers, error pages, JSON bodies.

Errors are problem bodies (``blueprints.problems``) under ``/api/`` and HTML pages
elsewhere; the message is always escaped by Jinja (autoescape) or JSON encoding,
never interpolated raw. Nothing shown to a signed-in operator is stored by a browser
or a proxy cache (``Cache-Control: no-store`` on every response to them, error pages
included).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from flask import Flask, Response, current_app, g, render_template, request, send_from_directory
from flask.json.provider import DefaultJSONProvider
from flask_login import current_user
from flask_wtf.csrf import CSRFError
from sqlalchemy import exc as sa_exc
from werkzeug.exceptions import HTTPException

from accounts.permissions import page_of_form, sign_in_again
from blueprints.problems import problem, wants_problem
from database import OUTAGE_RETRY_SECONDS, database_outage, utcnow
from extensions import db
from security.refs import error_ref
from taskrunner.contract import plural  # the pages' and the CLIs' one helper

CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    )
)
SECURITY_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Permissions-Policy": "camera=(), microphone=(), geolocation=()",
}

PRIVATE_PATHS = ("/backoffice", "/builder", "/api/", "/login")


def _parse(value: datetime | str | None) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    try:
        return datetime.fromisoformat(value.rstrip("Z"))
    except ValueError:
        return None


def relative_time(value: datetime | str | None, now: datetime | None = None) -> str:
    """'3 min ago', 'in 2 h': coarse on purpose, the exact time sits next to it."""
    moment = _parse(value)
    if moment is None:
        return "—"
    seconds = ((now or utcnow()) - moment).total_seconds()
    future, seconds = seconds < 0, abs(seconds)
    if seconds < 5:
        return "just now"
    for limit, size, unit in (
        (60, 1, "s"),
        (3600, 60, "min"),
        (86400, 3600, "h"),
        (86400 * 60, 86400, "d"),
    ):
        if seconds < limit:
            amount = f"{int(seconds // size)} {unit}"
            break
    else:
        amount = f"{int(seconds // (86400 * 30))} mo"
    return f"in {amount}" if future else f"{amount} ago"


def absolute_time(value: datetime | str | None) -> str:
    moment = _parse(value)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else "—"


def iso_time(value: datetime | str | None) -> str:
    moment = _parse(value)
    return moment.isoformat(timespec="seconds") + "Z" if moment else ""


def duration(
    start: datetime | str | None, end: datetime | str | None = None, idle: float = 0
) -> str:
    """Time from ``start`` to ``end`` (or now), less ``idle`` seconds (closed, awaiting a retry)."""
    begin = _parse(start)
    if begin is None:
        return "—"
    return span(((_parse(end) or utcnow()) - begin).total_seconds() - idle)


def span(seconds: float | None) -> str:
    """A duration, the one way every page says it: '42 s', '3 min 05 s', '2 h 10 min',
    '3 d 4 h' (the units of the relative times next to it: '3 min ago')."""
    if seconds is None:
        return "—"
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    if seconds < 86400:
        return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
    return f"{seconds // 86400} d {seconds % 86400 // 3600} h"


def plain_json(value: Any) -> str:
    """JSON as an operator reads it: "—" stays "—", never "\\u2014" (autoescaped by Jinja)."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def thousands(n: int | None) -> str:
    return "0" if n is None else f"{n:,}"


def error_response(
    status: int, title: str, message: str, headers: dict[str, str] | None = None
) -> Response | tuple[str, int, dict[str, str]]:
    if wants_problem():
        return problem(status, message, headers=headers)
    page = render_template("error.html", status=status, title=title, message=message)
    return page, status, headers or {}


def _members_once(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    members = dict(pairs)
    if len(members) != len(pairs):
        raise ValueError("a JSON object names a member twice")
    return members


class BoundedJSONProvider(DefaultJSONProvider):
    """JSON whose nesting is too deep for the parser is malformed JSON, not a crash.

    Python's parser answers ``[`` × 1,100 with a RecursionError, which
    ``request.get_json`` does not treat as bad input; as a ValueError it becomes a 400.
    An object that names a member twice is malformed too: the parser would keep the last
    one silently, where a proxy or a log reading the same body may take the first.
    """

    def loads(self, s: str | bytes, **kwargs: Any) -> Any:
        if "object_hook" not in kwargs:  # a caller's own hook would lose to a pairs hook
            kwargs.setdefault("object_pairs_hook", _members_once)
        try:
            return super().loads(s, **kwargs)
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None


def _security_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    hsts = current_app.config.get("HSTS_SECONDS")
    if hsts:
        response.headers.setdefault("Strict-Transport-Security", f"max-age={hsts}")
    if request.path.startswith(PRIVATE_PATHS) or current_user.is_authenticated:
        response.headers["Cache-Control"] = "no-store"
    return response


def tenant_names(ids: Iterable[Any]) -> dict[int, str]:
    """Tenant names of these ids, read once per request for all the ids a page shows."""
    from flask import g

    from tenancy.services import names

    known: dict[int, str | None] = g.setdefault("tenant_names", {})
    wanted = {int(i) for i in ids if i is not None}
    missing = wanted - known.keys()
    if missing:
        found = names(missing)
        known.update({i: found.get(i) for i in missing})
    return {i: name for i in wanted if (name := known.get(i))}


def after_outage() -> None:
    """What is left of a request the database failed: its transaction rolled back, and no
    one signed in (the answer is made without asking the database who it is for)."""
    try:
        db.session.rollback()
    except Exception:  # the connection is gone already: nothing to roll back
        pass
    g._login_user = current_app.login_manager.anonymous_user()  # type: ignore[attr-defined]


def favicon() -> Response:
    """The icon a browser asks for at the root, whatever page it shows."""
    return send_from_directory(
        current_app.static_folder or "static", "favicon.svg", mimetype="image/svg+xml"
    )


def init_app(app: Flask) -> None:
    app.json = BoundedJSONProvider(app)
    app.add_url_rule("/favicon.ico", "favicon", favicon)
    app.add_template_global(tenant_names, "tenant_names")
    app.after_request(_security_headers)
    app.add_template_filter(relative_time, "reltime")
    app.add_template_filter(span, "span")
    app.add_template_filter(absolute_time, "abstime")
    app.add_template_filter(iso_time, "isotime")
    app.add_template_global(duration, "duration")
    app.add_template_global(span, "span")
    app.add_template_filter(thousands, "thousands")
    app.add_template_filter(plain_json, "plainjson")
    app.add_template_global(plural, "plural")

    @app.errorhandler(CSRFError)
    def _csrf(exc: CSRFError):
        if (
            not wants_problem()
            and request.path != "/login"
            and page_of_form() is not None
            and not current_user.is_authenticated
        ):
            # A page's form whose session has ended since (signed out in another tab: its
            # CSRF secret went with it): sign in again, then back to that page.
            return sign_in_again(ended=True)
        return error_response(
            400,
            "Form expired",
            "The form was missing its security token "
            "or it expired. Go back, reload the page and try again.",
        )

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        # Keep what the exception says besides its body: Allow on a 405, Retry-After on a 429.
        headers = {k: v for k, v in exc.get_headers() if k.lower() != "content-type"}
        return error_response(exc.code or 500, exc.name, exc.description or exc.name, headers)

    @app.errorhandler(sa_exc.OperationalError)
    @app.errorhandler(sa_exc.InterfaceError)
    @app.errorhandler(sa_exc.TimeoutError)
    def _database_unavailable(exc: Exception):
        outage = database_outage(exc)
        if outage is None:
            return _unexpected(exc)
        after_outage()
        app.logger.warning("Database unavailable on %s: %s", request.path, outage)
        return error_response(
            503,
            "Database unavailable",
            f"The backoffice cannot reach its database right now ({outage.summary}). "
            f"Try again in a few seconds.",
            {"Retry-After": str(OUTAGE_RETRY_SECONDS)},
        )

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        db.session.rollback()
        # The scrubbing log layer ends this line with "[ref <code>]", the same code as
        # the answer's: whoever is shown the 500 can name its one log entry.
        app.logger.exception("Unhandled error on %s", request.path)
        return error_response(
            500,
            "Something broke",
            f"An unexpected error happened; it has been logged, ref {error_ref(exc)}.",
        )
