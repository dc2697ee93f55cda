"""Read-only pages: run list, run detail, unit detail, errors, events, stale units, history."""

from __future__ import annotations

from flask import abort, redirect, render_template, request, url_for
from flask_login import current_user

from accounts.permissions import permission_required
from blueprints import params
from blueprints.backoffice import bp
from taskrunner.contract import RunStatus
from taskrunner.ledger import ledger
from taskrunner.models import TaskRun
from taskrunner.queries import InvalidCursor, Page
from taskrunner.registry import registry

VIEW = "task-runner.runs.view"
MANAGE = "task-runner.runs.manage"
CAP = 20


def run_or_404(run_uuid: str) -> TaskRun:
    run = ledger.find_run(params.run_uuid_or_404(run_uuid))
    if run is None:
        abort(404, description="no such run")
    return run


def paged(read, *args, **kwargs) -> Page:
    try:
        return read(*args, **kwargs)
    except InvalidCursor as exc:
        abort(400, description=f"bad cursor: {exc}")


def can_manage() -> bool:
    return current_user.is_authenticated and current_user.has_permission(MANAGE)


def retry_allowed(run: TaskRun) -> bool:
    return run.status != RunStatus.CANCELLED and registry.find(run.type) is not None


@bp.get("/")
@permission_required(VIEW)
def home():
    return redirect(url_for("backoffice.runs"))


@bp.get("/task-runs")
@permission_required(VIEW)
def runs():
    filters = {"type_": params.text("type"), "status": params.run_status()}
    page = paged(ledger.runs_page, limit=params.limit(), cursor=params.cursor(), **filters)
    return render_template(
        "backoffice/runs.html",
        page=page,
        counts=ledger.live_counts(page.items),
        types=ledger.run_types(filters["type_"]),
        statuses=RunStatus,
        type_=filters["type_"],
        status=filters["status"],
        refresh=any(r.status == RunStatus.RUNNING for r in page.items),
    )


@bp.get("/task-runs/<run_uuid>")
@permission_required(VIEW)
def run(run_uuid: str):
    run = run_or_404(run_uuid)
    unit_status = params.unit_status()
    units = paged(
        ledger.run_units_page, run, status=unit_status, limit=params.limit(), cursor=params.cursor()
    )
    counts = ledger.run_counts(run)
    return render_template(
        "backoffice/run.html",
        run=run,
        counts=counts,
        units=units,
        unit_status=unit_status,
        failed=ledger.run_units_page(run, status="failed", limit=CAP) if counts["failed"] else None,
        skipped=(
            ledger.run_units_page(run, status="skipped", limit=CAP) if counts["skipped"] else None
        ),
        stale=ledger.run_units_page(run, stale_only=True, limit=CAP) if counts["stale"] else None,
        actions=ledger.run_actions(run),
        events=ledger.run_events(run, limit=CAP),
        can_manage=can_manage(),
        retry_allowed=retry_allowed(run),
        refresh=run.status == RunStatus.RUNNING,
        cap=CAP,
    )


@bp.get("/task-runs/<run_uuid>/units/<path:unit_key>")
@permission_required(VIEW)
def unit(run_uuid: str, unit_key: str):
    run = run_or_404(run_uuid)
    found = ledger.find_unit(run, params.unit_key_or_404(unit_key))
    if found is None:
        abort(404, description="no such unit in this run")
    return render_template(
        "backoffice/unit.html",
        run=run,
        unit=found,
        events=ledger.unit_events(run, found["unit_key"]),
    )


@bp.get("/task-runs/<run_uuid>/errors")
@permission_required(VIEW)
def errors(run_uuid: str):
    run = run_or_404(run_uuid)
    groups = ledger.error_groups(run)
    return render_template(
        "backoffice/errors.html", run=run, groups=groups, total=sum(g.count for g in groups)
    )


@bp.get("/task-runs/<run_uuid>/events")
@permission_required(VIEW)
def events(run_uuid: str):
    run = run_or_404(run_uuid)
    return render_template(
        "backoffice/events.html",
        run=run,
        events=ledger.run_events(run, limit=params.limit(200, 1000)),
    )


@bp.get("/stale-units")
@permission_required(VIEW)
def stale_units():
    page = paged(ledger.stale_units_page, limit=params.limit(100, 500), cursor=params.cursor())
    by_run = ledger.stale_counts_by_run() if page.items else []
    return render_template(
        "backoffice/stale.html",
        page=page,
        by_run=by_run,
        total=sum(n for _, _, n in by_run),
        can_manage=can_manage(),
    )


@bp.get("/units")
@permission_required(VIEW)
def history():
    key, tenant = params.text("key"), params.tenant()
    if key is not None and tenant is not None:
        abort(400, description="give either key or tenant, not both")
    page = None
    if key is not None or tenant is not None:
        page = paged(
            ledger.unit_history,
            unit_key=key,
            tenant_id=tenant,
            limit=params.limit(),
            cursor=params.cursor(),
        )
    streak = ledger.failure_streak(page.items) if page and not request.args.get("cursor") else 0
    return render_template(
        "backoffice/history.html", page=page, key=key, tenant=tenant, streak=streak
    )
