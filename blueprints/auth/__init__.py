"""Sign-in and sign-out pages."""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import (
    Blueprint,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    session,
    url_for,
)
from flask_login import current_user, login_user, logout_user

from accounts.services import AccountError, SignInThrottled, authenticate
from accounts.sessions import end_session, open_session
from accounts.setup import SESSION_SECRET

bp = Blueprint("auth", __name__)

HOME = "/backoffice/task-runs"
# Where an operator lands without a ``next``: the first area their permissions open.
LANDINGS = (
    ("task-runner.runs.view", "/backoffice/task-runs"),
    ("course-builder.runs.view", "/builder/runs"),
)


def home_for(user) -> str:
    """The run list for a task-runner operator, the builds for a builder-only one."""
    for permission, path in LANDINGS:
        if user.is_authenticated and user.has_permission(permission):
            return path
    return HOME


def safe_next(target: str | None, home: str = HOME) -> str:
    """Only a path on this site: never another host, never a scheme-relative URL."""
    if not target:
        return home
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return home
    if "\\" in target or any(ord(c) < 32 for c in target):
        return home
    return target


@bp.app_context_processor
def _home() -> dict:
    return {"home_path": lambda: home_for(current_user)}


@bp.get("/")
def root():
    """The front door: the operator's first area (the run list, or the builds for a
    builder-only operator), through sign-in if need be."""
    if current_user.is_authenticated:
        return redirect(home_for(current_user))
    return redirect(url_for("auth.login"))


@bp.route("/login", methods=["GET", "POST"])
def login():
    asked = request.values.get("next")
    # Only a ``next`` that was asked for travels with the form: the landing is decided at sign-in.
    next_path = safe_next(asked) if asked else ""
    if current_user.is_authenticated and request.method == "GET":
        return redirect(safe_next(asked, home_for(current_user)))
    email = request.form.get("email", "")[:191]
    status = 200
    if request.method == "POST":
        try:
            user = authenticate(email, request.form.get("password", ""), request.remote_addr)
        except SignInThrottled as exc:
            flash(str(exc), "error")
            status = 429
        except AccountError as exc:
            flash(str(exc), "error")
        else:
            # A new session: nothing of the one before (its CSRF secret included) survives,
            # nor does its server-side row, which a copy of the old cookie would still open.
            end_session(session.get(SESSION_SECRET))
            session.clear()
            session[SESSION_SECRET] = open_session(user, current_app.permanent_session_lifetime)
            session.permanent = True
            login_user(user)
            return redirect(safe_next(asked, home_for(user)))
    return render_template("auth/login.html", email=email, next_path=next_path), status


@bp.post("/logout")
def logout():
    end_session(session.get(SESSION_SECRET))
    logout_user()
    session.clear()
    flash("Signed out.", "info")
    return redirect(url_for("auth.login"))
