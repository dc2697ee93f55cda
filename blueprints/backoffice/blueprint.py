"""The backoffice blueprint, on its own so its view modules import it without a cycle."""

from __future__ import annotations

from flask import Blueprint

bp = Blueprint("backoffice", __name__, url_prefix="/backoffice")
