"""Live run pages: server-sent events over the same stream pieces as the course builder.

A stream probes what its page shows (``operations.run_marker``: the runs' statuses
and their active-unit counts, one indexed count) and sends ``changed`` when the
answer moves; the page then fetches itself and swaps its live regions in place
(``static/live.js``), never reloading. A run page's stream sends ``finished`` once
its run is closed and ends. Every stream ends after ``LIVE_STREAM_SECONDS`` (the
browser reconnects by itself), so no web worker is held forever, and it holds no
transaction (nor connection) between probes.
"""

from __future__ import annotations

from collections.abc import Iterator

from flask import Response, abort, current_app, request, stream_with_context

from accounts.permissions import permission_required
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import VIEW, run_or_404
from live import topics as live
from taskrunner.contract import RunStatus, operations

MAX_FOLLOWED = 200


def _stream(events: Iterator[str]) -> Response:
    return Response(
        stream_with_context(events),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _timing() -> tuple[float, float]:
    config = current_app.config
    return float(config["LIVE_STREAM_SECONDS"]), float(config["LIVE_POLL_SECONDS"])


@bp.get("/task-runs/<run_uuid>/stream")
@permission_required(VIEW)
def run_stream(run_uuid: str):
    run = run_or_404(run_uuid)
    return _stream(_run_events(run.id, run.uuid))


def _run_events(run_id: int, run_uuid: str) -> Iterator[str]:
    seconds, poll = _timing()
    yield "retry: 2000\n\n"
    for marker in live.watch(lambda: operations.run_marker(run_id), seconds, poll):
        status, finished_at = operations.run_state(run_id)
        payload = {
            "marker": marker,
            "status": status,
            "finished_at": finished_at.isoformat(timespec="seconds") + "Z" if finished_at else None,
        }
        yield live.sse("changed", payload)
        if payload["status"] != RunStatus.RUNNING:
            yield live.sse("finished", payload)
            return


@bp.get("/task-runs/stream")
@permission_required(VIEW)
def runs_stream():
    """The run list's stream: the running runs it shows (``run``, repeated) and new runs."""
    uuids = request.args.getlist("run")
    if len(uuids) > MAX_FOLLOWED or not all(operations.is_uuid(u) for u in uuids):
        abort(400, description=f"run must be up to {MAX_FOLLOWED} run uuids")
    run_ids = operations.run_ids_of(uuids)
    return _stream(_runs_events(run_ids))


def _runs_events(run_ids: list[int]) -> Iterator[str]:
    seconds, poll = _timing()
    yield "retry: 2000\n\n"
    for marker in live.watch(lambda: operations.runs_marker(run_ids), seconds, poll):
        yield live.sse("changed", {"marker": marker})
