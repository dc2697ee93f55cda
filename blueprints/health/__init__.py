"""Liveness for load balancers: no login, no secrets."""

from __future__ import annotations

from flask import Blueprint, jsonify
from sqlalchemy import text

from extensions import db

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    db.session.execute(text("SELECT 1"))
    return jsonify(status="ok")
