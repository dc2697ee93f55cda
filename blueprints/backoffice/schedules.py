"""Schedules: every periodic schedule and its slots; run now, pause and resume (manage)."""

from __future__ import annotations

from flask import abort, flash, g, redirect, render_template, request, url_for

from accounts.permissions import permission_required
from blueprints.backoffice.actions import actor, confirmed
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import MANAGE, VIEW, can_manage
from blueprints.params import MAX_TEXT
from taskrunner.contract import Refused, operations


def schedule_or_404(name: str) -> operations.ScheduleView:
    if len(name) > MAX_TEXT:
        abort(404, description="no such schedule")
    try:
        return operations.schedule(name)
    except operations.UnknownSchedule:
        abort(404, description="no such schedule")


@bp.get("/schedules")
@permission_required(VIEW)
def schedules():
    views = operations.schedules()
    # The navigation's badge counts what this page just read: one read, not two.
    g.missed_schedules = sum(1 for view in views if view.missed)
    return render_template("backoffice/schedules.html", schedules=views, can_manage=can_manage())


@bp.get("/schedules/<name>")
@permission_required(VIEW)
def schedule(name: str):
    view = schedule_or_404(name)
    return render_template(
        "backoffice/schedule.html",
        schedule=view,
        actions=operations.schedule_actions(view.name),
        can_manage=can_manage(),
    )


def _confirm(view: operations.ScheduleView, endpoint: str, verb: str, message: str, **extra):
    return render_template(
        "backoffice/confirm.html",
        run=None,
        count=1,
        noun=("schedule", "schedules"),
        back=url_for("backoffice.schedule", name=view.name),
        action=url_for(endpoint, name=view.name),
        title=f"{verb} {view.name}",
        verb=verb,
        unit_word="schedule",
        allow_zero=True,
        fields=extra,
        message=message,
    )


@bp.post("/schedules/<name>/run-now")
@permission_required(MANAGE)
def schedule_run_now(name: str):
    view = schedule_or_404(name)
    pending = operations.schedule_unfinished(view.name)
    named = pending[0] if pending else None
    # A run still running (or a slot still queued) is named on the confirmation page:
    # confirming that page (and no earlier one) is confirming again, so a second run is
    # never started by one click.
    if not confirmed() or (named and request.form.get("running") != named):
        if pending:
            message = (
                f"Refused for now: {view.name}: {pending[1]}. "
                "Confirm again to start another one beside it."
            )
        else:
            message = (
                f"A slot of {view.name} is enqueued now and runs the way a scheduled slot "
                f"does ({view.starts}), started by you."
            )
        fields = {"running": named} if named else {}
        return _confirm(view, "backoffice.schedule_run_now", "Run now", message, **fields)
    try:
        slot = operations.run_schedule_now(view.name, actor(), confirmed=bool(named), beside=named)
    except (Refused, operations.NotRecorded) as exc:
        flash(f"Not started: {exc}", "error")
    else:
        flash(f"{view.name}: a slot at {slot.isoformat(sep=' ')} UTC was enqueued.", "success")
    return redirect(url_for("backoffice.schedule", name=view.name))


@bp.post("/schedules/<name>/pause")
@permission_required(MANAGE)
def schedule_pause(name: str):
    view = schedule_or_404(name)
    if not confirmed():
        message = (
            f"Every scheduler skips the slots of {view.name} from its next check, until it is "
            "resumed; its skipped slots show as paused, never missed."
        )
        return _confirm(view, "backoffice.schedule_pause", "Pause", message)
    try:
        paused = operations.pause_schedule(view.name, actor())
    except operations.NotRecorded as exc:
        flash(f"Not paused: {exc}", "error")
    else:
        flash(f"{view.name} paused." if paused else f"{view.name} was already paused.", "success")
    return redirect(url_for("backoffice.schedule", name=view.name))


@bp.post("/schedules/<name>/resume")
@permission_required(MANAGE)
def schedule_resume(name: str):
    view = schedule_or_404(name)
    if not confirmed():
        message = f"Schedulers run the slots of {view.name} again from their next check."
        return _confirm(view, "backoffice.schedule_resume", "Resume", message)
    try:
        resumed = operations.resume_schedule(view.name, actor())
    except operations.NotRecorded as exc:
        flash(f"Not resumed: {exc}", "error")
    else:
        flash(f"{view.name} resumed." if resumed else f"{view.name} was not paused.", "success")
    return redirect(url_for("backoffice.schedule", name=view.name))
