"""Sign-in and sign-out pages."""

from __future__ import annotations

from urllib.parse import urlsplit

from flask import Blueprint, flash, redirect, render_template, request, url_for
from flask_login import current_user, login_user, logout_user

from accounts.services import AccountError, SignInThrottled, authenticate

bp = Blueprint("auth", __name__)

HOME = "/backoffice/task-runs"


def safe_next(target: str | None) -> str:
    """Only a path on this site: never another host, never a scheme-relative URL."""
    if not target:
        return HOME
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return HOME
    if "\\" in target or any(ord(c) < 32 for c in target):
        return HOME
    return target


@bp.route("/login", methods=["GET", "POST"])
def login():
    next_path = safe_next(request.values.get("next"))
    if current_user.is_authenticated and request.method == "GET":
        return redirect(next_path)
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
            login_user(user)
            return redirect(next_path)
    return render_template("auth/login.html", email=email, next_path=next_path), status


@bp.post("/logout")
def logout():
    logout_user()
    flash("Signed out.", "info")
    return redirect(url_for("auth.login"))
