"""Read-only pages: run list, run detail, unit detail, errors, events, stale units, history."""

from __future__ import annotations

from flask import abort, redirect, render_template, request, url_for
from flask_login import current_user

from accounts.permissions import permission_required
from blueprints import params
from blueprints.backoffice import overview
from blueprints.backoffice.blueprint import bp
from taskrunner.contract import RunStatus, operations

VIEW = "task-runner.runs.view"
MANAGE = "task-runner.runs.manage"
CAP = 20
PARKED_CAP = 100


def run_or_404(run_uuid: str):
    run = operations.find_run(params.run_uuid_or_404(run_uuid))
    if run is None:
        abort(404, description="no such run")
    return run


def paged(read, *args, **kwargs):
    """The service's answer; a cursor that names nothing is the operator's 400."""
    try:
        return read(*args, **kwargs)
    except operations.InvalidCursor as exc:
        abort(400, description=f"bad cursor: {exc}")


def asked(limit: int) -> int | None:
    """The limit for the next page's link: the one in the address, none if it gave none."""
    return limit if request.args.get("limit") else None


def can_manage() -> bool:
    return current_user.is_authenticated and current_user.has_permission(MANAGE)


@bp.get("/")
@permission_required(VIEW)
def home():
    return redirect(url_for("backoffice.runs"))


@bp.get("/task-runs")
@permission_required(VIEW)
def runs():
    filters = {"type_": params.text("type"), "status": params.run_status()}
    failed_within = params.choice("failed_within", ("24h",))
    limit = params.limit()
    page = listed_runs(filters, failed_within, limit)
    listing = operations.run_list(page, filters["type_"])
    return render_template(
        "backoffice/runs.html",
        page=page,
        counts=listing.counts,
        stale=listing.stale,
        retried=listing.retried,
        paused=listing.paused,
        idle=listing.idle,
        charts=overview.current(),
        types=listing.types,
        statuses=RunStatus,
        type_=filters["type_"],
        status=filters["status"],
        failed_within=failed_within,
        limit=asked(limit),
        # The page's own query, not its running runs' uuids: 200 of those outgrow a request
        # line (gunicorn's 8,190 bytes), and the stream could never open.
        stream=url_for("backoffice.runs_stream", **request.args) if page.items else None,
    )


def listed_runs(filters: dict, failed_within: str | None, limit: int):
    """The run list's page for these filters (its stream reads the same page)."""
    return paged(
        operations.runs_page,
        limit=limit,
        cursor=params.cursor(),
        failed_recently=failed_within is not None,
        **filters,
    )


def listed_running_uuids() -> list[str]:
    """The running runs of the run list's page that the request's query names."""
    filters = {"type_": params.text("type"), "status": params.run_status()}
    page = listed_runs(filters, params.choice("failed_within", ("24h",)), params.limit())
    return [r.uuid for r in page.items if r.status == RunStatus.RUNNING]


@bp.get("/overview")
@permission_required(VIEW)
def overview_strip():
    """The throughput strip alone (what the run list shows above its table)."""
    charts = overview.charts(operations.throughput())
    return render_template("backoffice/overview.html", charts=charts)


@bp.get("/task-runs/<run_uuid>")
@permission_required(VIEW)
def run(run_uuid: str):
    run = run_or_404(run_uuid)
    unit_status = params.unit_status()
    reason = params.reason()
    limit = params.limit()
    units = paged(
        operations.run_units,
        run,
        status=unit_status,
        limit=limit,
        cursor=params.cursor(),
        reason=reason,
    )
    detail = operations.run_detail(run, cap=CAP)
    return render_template(
        "backoffice/run.html",
        run=run,
        counts=detail.counts,
        units=units,
        unit_status=unit_status,
        reason=reason,
        limit=asked(limit),
        failed=detail.failed,
        skipped=detail.skipped,
        stale=detail.stale,
        actions=detail.actions,
        events=detail.events,
        parked=detail.parked,
        can_manage=can_manage(),
        retry_allowed=detail.retry_allowed,
        idle=detail.idle,
        stream=(
            url_for("backoffice.run_stream", run_uuid=run.uuid)
            if run.status == RunStatus.RUNNING
            else None
        ),
        cap=CAP,
        paused=detail.paused,
        compared=operations.compare_counts(run),
    )


@bp.get("/task-runs/<run_uuid>/units/<unit_key:unit_key>")
@permission_required(VIEW)
def unit(run_uuid: str, unit_key: str):
    run = run_or_404(run_uuid)
    detail = operations.unit_detail(run, params.unit_key_or_404(unit_key))
    if detail is None:
        abort(404, description="no such unit in this run")
    return render_template(
        "backoffice/unit.html",
        run=run,
        unit=detail.unit,
        events=detail.events,
        can_manage=can_manage(),
        retry_allowed=detail.retry_allowed,
        paused=detail.paused,
        ran_by=detail.ran_by,
    )


@bp.get("/task-runs/<run_uuid>/errors")
@permission_required(VIEW)
def errors(run_uuid: str):
    run = run_or_404(run_uuid)
    groups = operations.error_groups(run)
    return render_template(
        "backoffice/errors.html",
        run=run,
        groups=groups,
        # The run's failed units, not the sum of the groups listed: only the biggest are.
        total=operations.count_failed(run),
        shown=sum(g.count for g in groups),
        retrying=sum(g.retrying for g in groups),
        can_manage=can_manage(),
        retry_allowed=operations.retry_allowed(run),
        # Live like the run page, on the run's own stream: a retried group's units settle.
        stream=(
            url_for("backoffice.run_stream", run_uuid=run.uuid)
            if run.status == RunStatus.RUNNING
            else None
        ),
    )


@bp.get("/task-runs/<run_uuid>/events")
@permission_required(VIEW)
def events(run_uuid: str):
    run = run_or_404(run_uuid)
    return render_template(
        "backoffice/events.html",
        run=run,
        events=operations.run_events(run, limit=params.limit(200, 1000)),
    )


@bp.get("/stale-units")
@permission_required(VIEW)
def stale_units():
    limit = params.limit(100, 500)
    run_uuid = params.text("run")
    run = run_or_404(run_uuid) if run_uuid else None
    stale = paged(operations.stale_units, limit=limit, cursor=params.cursor(), run=run)
    return render_template(
        "backoffice/stale.html",
        run=run,
        page=stale.page,
        by_run=stale.by_run,
        total=stale.total,
        limit=asked(limit),
        can_manage=can_manage(),
    )


@bp.get("/parked-events")
@permission_required(VIEW)
def parked_events():
    deliveries, total, max_attempts = operations.parked_events(limit=PARKED_CAP)
    return render_template(
        "backoffice/parked.html",
        deliveries=deliveries,
        total=total,
        max_attempts=max_attempts,
    )


@bp.get("/units")
@permission_required(VIEW)
def history():
    key, tenant, limit = params.unit_key(), params.tenant(), params.limit()
    if key is not None and tenant is not None:
        abort(400, description="give either key or tenant, not both")
    page = None
    if key is not None or tenant is not None:
        page = paged(
            operations.unit_history,
            unit_key=key,
            tenant_id=tenant,
            limit=limit,
            cursor=params.cursor(),
        )
    streak = operations.failure_streak(page.items) if page and not request.args.get("cursor") else 0
    return render_template(
        "backoffice/history.html",
        page=page,
        key=key,
        tenant=tenant,
        limit=asked(limit),
        streak=streak,
    )
