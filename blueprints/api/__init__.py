"""The JSON read API of the backoffice (SPEC §9): the shapes of ``taskrunner.reports``."""

from __future__ import annotations

from flask import Blueprint, abort, jsonify

from accounts.permissions import permission_required
from blueprints import params
from blueprints.backoffice.pages import VIEW, paged, run_or_404
from taskrunner import reports
from taskrunner.ledger import ledger

bp = Blueprint("api", __name__, url_prefix="/api/v1/backoffice")


@bp.get("/task-runs")
@permission_required(VIEW)
def runs():
    page = paged(
        ledger.runs_page,
        limit=params.limit(),
        cursor=params.cursor(),
        type_=params.text("type"),
        status=params.run_status(),
    )
    return jsonify(reports.runs_page(page))


@bp.get("/task-runs/<run_uuid>")
@permission_required(VIEW)
def run(run_uuid: str):
    return jsonify(reports.run_detail(run_or_404(run_uuid)))


@bp.get("/task-runs/<run_uuid>/units")
@permission_required(VIEW)
def units(run_uuid: str):
    run = run_or_404(run_uuid)
    page = paged(
        ledger.run_units_page,
        run,
        status=params.unit_status("status"),
        limit=params.limit(),
        cursor=params.cursor(),
    )
    return jsonify(reports.units_page(page))


@bp.get("/task-runs/<run_uuid>/errors")
@permission_required(VIEW)
def errors(run_uuid: str):
    run = run_or_404(run_uuid)
    return jsonify(reports.error_groups(run, ledger.error_groups(run)))


@bp.get("/stale-units")
@permission_required(VIEW)
def stale_units():
    page = paged(ledger.stale_units_page, limit=params.limit(100, 500), cursor=params.cursor())
    return jsonify(reports.units_page(page))


@bp.get("/units")
@permission_required(VIEW)
def history():
    key, tenant = params.text("key"), params.tenant()
    if (key is None) == (tenant is None):
        abort(400, description="give exactly one of key and tenant")
    page = paged(
        ledger.unit_history,
        unit_key=key,
        tenant_id=tenant,
        limit=params.limit(),
        cursor=params.cursor(),
    )
    return jsonify(reports.units_page(page))
