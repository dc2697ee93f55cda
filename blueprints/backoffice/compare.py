"""Two runs compared: tonight's against last night's (or any other run)."""

from __future__ import annotations

from flask import abort, render_template

from accounts.permissions import permission_required
from blueprints import params
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import VIEW, run_or_404
from taskrunner.contract import Refused, operations


def comparison_or_404(run_uuid: str) -> operations.Comparison:
    """The comparison the address asks for; a run to compare with that is not there, 404."""
    run = run_or_404(run_uuid)
    other = params.text("with")
    if other is not None and not operations.is_uuid(other):
        abort(404, description="no such run to compare with")
    try:
        return operations.compare(run, other)
    except Refused as exc:
        abort(404, description=str(exc))


@bp.get("/task-runs/<run_uuid>/compare")
@permission_required(VIEW)
def compare(run_uuid: str):
    return render_template("backoffice/compare.html", c=comparison_or_404(run_uuid))
