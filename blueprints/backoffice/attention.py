"""What the navigation shows on every page: the badges of things that need an operator.

A template global, not a context processor: only a page that draws the navigation
(signed in, allowed to read runs) pays for the two counts.
"""

from __future__ import annotations

from flask import g
from flask_login import current_user

from blueprints.backoffice.blueprint import bp
from taskrunner.contract import operations

VIEW = "task-runner.runs.view"


def attention() -> operations.Attention | None:
    """The badges' counts, read once per request; None for whoever cannot read runs."""
    if not (current_user.is_authenticated and current_user.has_permission(VIEW)):
        return None
    if "attention" not in g:
        g.attention = operations.attention()
    return g.attention


def missed_schedules() -> int:
    """Schedules with a missed slot in the last 24 h, read once per request (0 for whoever
    cannot read runs)."""
    if not (current_user.is_authenticated and current_user.has_permission(VIEW)):
        return 0
    if "missed_schedules" not in g:
        g.missed_schedules = operations.schedules_missed()
    return g.missed_schedules


@bp.app_context_processor
def _globals() -> dict:
    return {"attention": attention, "missed_schedules": missed_schedules}
