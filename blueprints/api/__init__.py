"""The JSON read API of the backoffice (README, "JSON API").

Each endpoint makes the same ``operations`` call as its HTML page and returns the
service's JSON shape of it, so the two cannot drift.
"""

from __future__ import annotations

from flask import Blueprint, abort, current_app, jsonify

from accounts.permissions import permission_required
from blueprints import params
from blueprints.api.contract import BACKOFFICE
from blueprints.backoffice.compare import comparison_or_404
from blueprints.backoffice.console import search_results
from blueprints.backoffice.pages import VIEW, paged, run_or_404
from blueprints.backoffice.schedules import schedule_or_404
from blueprints.openapi import build
from taskrunner.contract import operations

bp = Blueprint("api", __name__, url_prefix="/api/v1/backoffice")


@bp.get("/task-runs")
@permission_required(VIEW)
def runs():
    page = paged(
        operations.runs_page,
        limit=params.limit(),
        cursor=params.cursor(),
        type_=params.text("type"),
        status=params.run_status(),
    )
    return jsonify(operations.runs_json(page))


@bp.get("/task-runs/<run_uuid>")
@permission_required(VIEW)
def run(run_uuid: str):
    return jsonify(operations.run_report(run_or_404(run_uuid)))


@bp.get("/task-runs/<run_uuid>/units")
@permission_required(VIEW)
def units(run_uuid: str):
    run = run_or_404(run_uuid)
    page = paged(
        operations.run_units,
        run,
        status=params.unit_status("status"),
        reason=params.reason(),
        limit=params.limit(),
        cursor=params.cursor(),
    )
    return jsonify(operations.units_json(page))


@bp.get("/task-runs/<run_uuid>/unit")
@permission_required(VIEW)
def unit(run_uuid: str):
    # The key is a query parameter: a unit key never travels in a path (blueprints/unit_keys).
    run, key = run_or_404(run_uuid), params.unit_key()
    if not key:
        abort(400, description="give the unit's key")
    detail = operations.unit_detail(run, key)
    if detail is None:
        abort(404, description="no such unit in this run")
    return jsonify(detail.unit)


@bp.get("/task-runs/<run_uuid>/errors")
@permission_required(VIEW)
def errors(run_uuid: str):
    run = run_or_404(run_uuid)
    page = paged(
        operations.error_groups_page,
        run,
        limit=params.limit(),
        cursor=params.group_cursor(),
    )
    return jsonify(operations.error_groups_json(run, page))


@bp.get("/task-runs/<run_uuid>/compare")
@permission_required(VIEW)
def compare(run_uuid: str):
    return jsonify(operations.comparison_json(comparison_or_404(run_uuid)))


@bp.get("/stale-units")
@permission_required(VIEW)
def stale_units():
    page = paged(operations.stale_units_page, limit=params.limit(100, 500), cursor=params.cursor())
    return jsonify(operations.units_json(page))


@bp.get("/units")
@permission_required(VIEW)
def history():
    key, tenant = params.unit_key(), params.tenant()
    if (key is None) == (tenant is None):
        abort(400, description="give exactly one of key and tenant")
    page = paged(
        operations.unit_history,
        unit_key=key,
        tenant_id=tenant,
        limit=params.limit(),
        cursor=params.cursor(),
    )
    return jsonify(operations.units_json(page))


@bp.get("/workers")
@permission_required(VIEW)
def workers():
    return jsonify(operations.consumers())


@bp.get("/queues")
@permission_required(VIEW)
def queues():
    return jsonify(operations.queues())


@bp.get("/search")
@permission_required(VIEW)
def search():
    return jsonify(search_results(params.text("q") or ""))


@bp.get("/schedules")
@permission_required(VIEW)
def schedules():
    return jsonify(operations.schedules_json(operations.schedules()))


@bp.get("/schedules/<name>")
@permission_required(VIEW)
def schedule(name: str):
    return jsonify(operations.schedule_json(schedule_or_404(name)))


@bp.get("/openapi.json")
@permission_required(VIEW)
def document():
    return jsonify(build(current_app, BACKOFFICE))
