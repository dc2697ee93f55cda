"""Bind accounts to the app: Flask-Login's user loader and its settings."""

from __future__ import annotations

import logging

from flask import Flask, current_app, session

from accounts import sessions, throttle
from accounts.permissions import SESSION_SECRET
from accounts.sessions import session_user
from extensions import login_manager
from security import ratelimit
from taskrunner.contract import Cron, crontab, periodic

logger = logging.getLogger(__name__)


def load_user(user_id: str):
    """The user of this request: only through a live server-side session."""
    return session_user(user_id, session.get(SESSION_SECRET))


def init_app(app: Flask) -> None:
    login_manager.user_loader(load_user)
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Sign in to see this page."
    login_manager.session_protection = "basic"


@periodic("security.prune", Cron(crontab(minute="47", hour="3")), timeout=300)
def prune_security_state() -> None:
    """Daily: expired operator sessions, quiet sign-in counters, ended rate-limit windows."""
    window = current_app.config["TENANT_API_RATE_WINDOW_SECONDS"]
    pruned = sessions.prune_expired() + throttle.forget_quiet() + ratelimit.prune(window)
    if pruned:
        logger.info("Pruned %d expired sessions, sign-in counters and rate-limit counters", pruned)
