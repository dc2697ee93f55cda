"""The operator pages of the task runner (README, "Backoffice"): thin views over operations."""

from __future__ import annotations

from blueprints.backoffice import (  # noqa: F401 - routes
    actions,
    alerts,
    attention,
    compare,
    console,
    exports,
    live,
    pages,
    schedules,
)
from blueprints.backoffice.blueprint import bp

__all__ = ["bp"]
