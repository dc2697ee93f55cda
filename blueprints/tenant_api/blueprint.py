"""The tenant API blueprint, on its own so its modules import it without a cycle."""

from __future__ import annotations

from flask import Blueprint

from extensions import csrf

bp = Blueprint("tenant_api", __name__, url_prefix="/api/v1")
csrf.exempt(bp)
