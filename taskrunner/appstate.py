"""The runner's state of one app, made by the app factory.

Each piece lives in ``app.extensions`` under a ``taskrunner.`` key, next to the
module that reads it: the task type registry, event subscribers, the tenant hooks and
the scrubber seam. Two apps in one process share none
of it, and a fresh app starts with none of a previous one's registrations.
"""

from __future__ import annotations

from flask import Flask

from taskrunner import events, redaction, registry, slot_keeper, tenant_scope


def init_app(app: Flask) -> None:
    """Give ``app`` empty runner state, before the modules' init functions fill it."""
    registry.init_app(app)
    events.init_app(app)
    tenant_scope.init_app(app)
    redaction.init_app(app)
    slot_keeper.init_app(app)
