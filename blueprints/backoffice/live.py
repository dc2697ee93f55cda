"""Live run pages: server-sent events over the same stream pieces as the course builder.

A stream probes what its page shows (``live_probes.run_marker``: the runs' statuses
and their active-unit counts, one indexed count) and sends ``changed`` when the
answer moves; the page then fetches itself and swaps its live regions in place
(``static/live.js``), never reloading. A run page's stream sends ``finished`` once
its run is closed and ends. The caps, keep-alives, the session check and the end of
every stream are ``live.streams``'; a stream holds no transaction (nor connection)
between probes.
"""

from __future__ import annotations

from flask import abort, current_app, request

from accounts.permissions import permission_required
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import VIEW, listed_running_uuids, run_or_404
from blueprints.streams import event_stream
from live.topics import sse
from taskrunner.contract import RunStatus, live_probes, operations

MAX_FOLLOWED = 200


def _seconds() -> float:
    return float(current_app.config["LIVE_STREAM_SECONDS"])


@bp.get("/task-runs/<run_uuid>/stream")
@permission_required(VIEW)
def run_stream(run_uuid: str):
    run_id = run_or_404(run_uuid).id

    def changes(marker: str) -> tuple[list[str], bool]:
        status, finished_at = live_probes.run_state(run_id)
        payload = {
            "marker": marker,
            "status": status,
            "finished_at": finished_at.isoformat(timespec="seconds") + "Z" if finished_at else None,
        }
        if status == RunStatus.RUNNING:
            return [sse("changed", payload)], False
        return [sse("changed", payload), sse("finished", payload)], True

    return event_stream(lambda: live_probes.run_marker(run_id), changes, _seconds())


@bp.get("/task-runs/stream")
@permission_required(VIEW)
def runs_stream():
    """The run list's stream: the running runs it shows and new runs. The page names itself
    by its own query (filters, ``limit``, ``cursor``); ``run`` (repeated uuids) names the
    runs instead."""
    uuids = request.args.getlist("run")
    if len(uuids) > MAX_FOLLOWED or not all(operations.is_uuid(u) for u in uuids):
        abort(400, description=f"run must be up to {MAX_FOLLOWED} run uuids")
    if not uuids:
        uuids = listed_running_uuids()
    run_ids = live_probes.run_ids_of(uuids)
    return event_stream(
        lambda: live_probes.runs_marker(run_ids),
        lambda marker: ([sse("changed", {"marker": marker})], False),
        _seconds(),
    )
