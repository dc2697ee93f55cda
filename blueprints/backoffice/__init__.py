"""The operator pages of the task runner (SPEC §9): thin views over the ledger and the runner."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("backoffice", __name__, url_prefix="/backoffice")

from blueprints.backoffice import actions, pages  # noqa: E402,F401 - routes register on import
