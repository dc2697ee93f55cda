"""The tenant API's OpenAPI document: public, it holds no secret and needs no token."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify

from blueprints.openapi import build
from blueprints.tenant_api.auth import over_rate_limit
from blueprints.tenant_api.contract import TENANT

bp = Blueprint("tenant_api_document", __name__, url_prefix="/api/v1")
# Public, but counted on its address's limit like every tenant API request.
bp.before_request(over_rate_limit)


@bp.get("/openapi.json")
def document():
    return jsonify(build(current_app, TENANT))
