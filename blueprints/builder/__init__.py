"""Course-builder pages: the runs list, a run's stages and steps, and its live stream.

The stream is server-sent events woken by the run's live topic (``live``): it
reads only the topic's version while nothing changes and tells the page when it
moved; the page then swaps in a fresh copy of its run section (``static/live.js``, as
the run pages). The topic is a database row, so a bump made by a worker on any host
reaches a stream on any web host. A stream ends after ``BUILDER_STREAM_SECONDS`` (the
page opens a new one); its caps, keep-alives and session check are ``live.streams``'.
"""

from __future__ import annotations

from flask import (
    Blueprint,
    abort,
    current_app,
    flash,
    redirect,
    render_template,
    request,
    url_for,
)
from flask_login import current_user

from accounts.permissions import permission_required
from blueprints import params
from blueprints.streams import event_stream
from coursebuilder import reports, stages
from coursebuilder.models import RunStatus
from coursebuilder.stages import BuilderError, UnknownRun, live_topic
from live import topics as live

bp = Blueprint("builder", __name__, url_prefix="/builder")

VIEW = "course-builder.runs.view"
MANAGE = "course-builder.runs.manage"
PAGE_SIZE = 50


def run_or_404(run_uuid: str):
    try:
        return stages.find_run(run_uuid)
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
        marker=live.version(live_topic(run.uuid)),
        can_retry=run.status == RunStatus.FAILED and current_user.has_permission(MANAGE),
    )


@bp.post("/runs/<run_uuid>/retry")
@permission_required(MANAGE)
def retry(run_uuid: str):
    """Resume a failed build from its failed stage, after a confirmation with the count."""
    run = run_or_404(run_uuid)
    back = url_for("builder.run", run_uuid=run.uuid)
    after_retry = params.form_id("after_retry", "a retry")
    if request.form.get("confirm") != "yes":
        count = reports.retryable_steps(run)
        return render_template(
            "backoffice/confirm.html",
            run=None,
            count=count,
            noun=("step", "steps"),
            back=back,
            action=url_for("builder.retry", run_uuid=run.uuid),
            title="Retry this course build",
            verb="Retry",
            # What the confirmation was shown after: sent twice, the second finds a newer retry.
            fields={"after_retry": str(stages.last_retry(run.id))},
            message=f"This resumes “{run.title}” from its failed stage ({run.stage}): its "
            "failed and not-run steps are queued again; completed steps keep their output.",
        )
    try:
        stage, steps = stages.retry(run.uuid, actor=current_user.email, after_retry=after_retry)
    except BuilderError as exc:
        flash(f"Not retried: {exc}", "error")
    else:
        flash(
            f"Retrying stage {stage}: {steps:,} step{'' if steps == 1 else 's'} queued again.",
            "success",
        )
    return redirect(back)


@bp.get("/runs/<run_uuid>/stream")
@permission_required(VIEW)
def stream(run_uuid: str):
    run = run_or_404(run_uuid)
    run_id, topic = run.id, live_topic(run.uuid)

    def changes(marker: str) -> tuple[list[str], bool]:
        status, stage = stages.run_state(run_id)
        payload = {"marker": marker, "status": status, "stage": stage}
        if status == RunStatus.RUNNING:
            return [live.sse("changed", payload)], False
        return [live.sse("changed", payload), live.sse("finished", payload)], True

    seconds = float(current_app.config.get("BUILDER_STREAM_SECONDS", 60))
    return event_stream(lambda: live.version(topic), changes, seconds)
