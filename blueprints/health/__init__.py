"""Liveness for load balancers: no login, no secrets."""

from __future__ import annotations

from flask import Blueprint, current_app, jsonify
from sqlalchemy import exc as sa_exc
from sqlalchemy import text

from blueprints.ui import after_outage
from database import OUTAGE_RETRY_SECONDS, database_outage
from extensions import db

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz():
    try:
        db.session.execute(text("SELECT 1"))
    except (sa_exc.OperationalError, sa_exc.InterfaceError, sa_exc.TimeoutError) as exc:
        outage = database_outage(exc)
        if outage is None:
            raise
        after_outage()
        current_app.logger.warning("Health check: %s", outage)
        answer = jsonify(status="unavailable", database=outage.summary)
        return answer, 503, {"Retry-After": str(OUTAGE_RETRY_SECONDS)}
    return jsonify(status="ok")
