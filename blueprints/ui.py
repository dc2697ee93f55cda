"""What every page shares: time filters, security headers, error pages.

Error pages render as JSON under ``/api/`` and as HTML elsewhere; the message
is always escaped by Jinja (autoescape) or JSON encoding, never interpolated raw.
"""

from __future__ import annotations

from datetime import datetime

from flask import Flask, Response, jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from database import utcnow
from extensions import db

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


def duration(start: datetime | str | None, end: datetime | str | None = None) -> str:
    begin = _parse(start)
    if begin is None:
        return "—"
    seconds = int(((_parse(end) or utcnow()) - begin).total_seconds())
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m {seconds % 60:02d}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60:02d}m"


def wants_json() -> bool:
    return request.path.startswith("/api/")


def error_response(status: int, title: str, message: str) -> tuple[Response | str, int]:
    if wants_json():
        return jsonify(error=message), status
    return render_template("error.html", status=status, title=title, message=message), status


def _security_headers(response: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        response.headers.setdefault(name, value)
    if request.path.startswith(("/backoffice", "/api/", "/login")):
        response.headers.setdefault("Cache-Control", "no-store")
    return response


def init_app(app: Flask) -> None:
    app.after_request(_security_headers)
    app.add_template_filter(relative_time, "reltime")
    app.add_template_filter(absolute_time, "abstime")
    app.add_template_filter(iso_time, "isotime")
    app.add_template_global(duration, "duration")

    @app.errorhandler(CSRFError)
    def _csrf(exc: CSRFError):
        return error_response(
            400,
            "Form expired",
            "The form was missing its security token "
            "or it expired. Go back, reload the page and try again.",
        )

    @app.errorhandler(HTTPException)
    def _http(exc: HTTPException):
        return error_response(exc.code or 500, exc.name, exc.description or exc.name)

    @app.errorhandler(Exception)
    def _unexpected(exc: Exception):
        db.session.rollback()
        app.logger.exception("Unhandled error on %s", request.path)
        return error_response(
            500, "Something broke", "An unexpected error happened; it has been logged."
        )
