"""A run's units as a download: one error group (``?reason=``) or all, as CSV or JSON."""

from __future__ import annotations

from flask import Response, stream_with_context

from accounts.permissions import permission_required
from blueprints import params
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import VIEW, run_or_404
from taskrunner.contract import operations


def _filename(run_uuid: str, ext: str) -> str:
    return f"attachment; filename=units-{run_uuid[:8]}.{ext}"


@bp.get("/task-runs/<run_uuid>/units.csv")
@permission_required(VIEW)
def units_csv(run_uuid: str):
    run = run_or_404(run_uuid)
    rows = operations.export_units(run, reason=params.reason())
    # Streamed: a group of a 100,000-unit run is never held whole in memory.
    return Response(
        stream_with_context(operations.csv_lines(rows)),
        mimetype="text/csv",
        headers={"Content-Disposition": _filename(run.uuid, "csv")},
    )


@bp.get("/task-runs/<run_uuid>/units.json")
@permission_required(VIEW)
def units_json(run_uuid: str):
    run = run_or_404(run_uuid)
    reason = params.reason()
    rows = operations.export_units(run, reason)
    # Streamed as the CSV is, in the same shape ({"uuid", "reason", "units"}).
    return Response(
        stream_with_context(operations.json_chunks(run.uuid, reason, rows)),
        mimetype="application/json",
        headers={"Content-Disposition": _filename(run.uuid, "json")},
    )
