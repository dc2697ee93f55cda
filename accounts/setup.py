"""Bind accounts to the app: Flask-Login's user loader and its settings."""

from __future__ import annotations

from flask import Flask, session

from accounts.sessions import session_user
from extensions import login_manager

# The session cookie's key for the secret of the operator's server-side session.
SESSION_SECRET = "operator_session"


def load_user(user_id: str):
    """The user of this request: only through a live server-side session."""
    return session_user(user_id, session.get(SESSION_SECRET))


def init_app(app: Flask) -> None:
    login_manager.user_loader(load_user)
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Sign in to see this page."
    login_manager.session_protection = "basic"
