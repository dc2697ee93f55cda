"""Course-builder pages: the runs list, a run's stages and steps, and its live stream.

The stream is server-sent events woken by the run's live key: it reads only
that key while nothing changes and tells the page when it moved; the page then
reloads its run section. A stream ends after ``BUILDER_STREAM_SECONDS`` (the
browser reconnects by itself), so no web worker is held forever.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

from flask import Blueprint, Response, abort, current_app, render_template, stream_with_context
from sqlalchemy import select

from accounts.permissions import permission_required
from blueprints import params
from coursebuilder import live, reports
from coursebuilder.models import GenerationRun, RunStatus
from coursebuilder.service import UnknownRun
from extensions import db

bp = Blueprint("builder", __name__, url_prefix="/builder")

VIEW = "course-builder.runs.view"
PAGE_SIZE = 50
POLL_SECONDS = 0.25


def run_or_404(run_uuid: str) -> GenerationRun:
    try:
        return reports.find_run(run_uuid)
    except UnknownRun:
        abort(404, description="no such course build")


@bp.get("/runs")
@permission_required(VIEW)
def runs():
    before = params.text("before")
    before_id = run_or_404(before).id if before else None
    page = reports.recent_runs(limit=PAGE_SIZE + 1, before_id=before_id)
    more = len(page) > PAGE_SIZE
    page = page[:PAGE_SIZE]
    statuses = {run.id: reports.run_status(run) for run in page}
    return render_template(
        "builder/runs.html",
        runs=page,
        statuses=statuses,
        progress={run.id: reports.progress(run, statuses[run.id]) for run in page},
        older=page[-1].uuid if more else None,
    )


@bp.get("/runs/<run_uuid>")
@permission_required(VIEW)
def run(run_uuid: str):
    run = run_or_404(run_uuid)
    status = reports.run_status(run)
    return render_template(
        "builder/run.html",
        run=run,
        status=status,
        progress=reports.progress(run, status),
        steps=reports.steps_of(run),
        marker=live.marker(run.uuid),
    )


@bp.get("/runs/<run_uuid>/stream")
@permission_required(VIEW)
def stream(run_uuid: str):
    run = run_or_404(run_uuid)
    seconds = float(current_app.config.get("BUILDER_STREAM_SECONDS", 60))
    return Response(
        stream_with_context(_events(run.id, run.uuid, seconds)),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _events(run_id: int, run_uuid: str, seconds: float) -> Iterator[str]:
    deadline = time.monotonic() + seconds
    last = None
    yield "retry: 2000\n\n"
    while True:
        marker = live.marker(run_uuid)
        if marker != last:
            last = marker
            db.session.rollback()  # see what the workers committed
            status = db.session.execute(
                select(GenerationRun.status, GenerationRun.stage).where(GenerationRun.id == run_id)
            ).one()
            payload = json.dumps({"marker": marker, "status": status.status, "stage": status.stage})
            yield f"event: changed\ndata: {payload}\n\n"
            if status.status != RunStatus.RUNNING:
                yield f"event: finished\ndata: {payload}\n\n"
                return
        if time.monotonic() >= deadline:
            return
        time.sleep(POLL_SECONDS)
