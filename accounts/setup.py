"""Bind accounts to the app: Flask-Login's user loader and its settings."""

from __future__ import annotations

from flask import Flask

from accounts.services import load_user
from extensions import login_manager


def init_app(app: Flask) -> None:
    login_manager.user_loader(load_user)
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Sign in to see this page."
    login_manager.session_protection = "basic"
