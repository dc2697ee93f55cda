"""The operator pages of the task runner (README, "Backoffice"): thin views over operations."""

from __future__ import annotations

from blueprints.backoffice import actions, attention, console, live, pages  # noqa: F401 - routes
from blueprints.backoffice.blueprint import bp

__all__ = ["bp"]
