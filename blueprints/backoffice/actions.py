"""Retry and cancel: POST forms with CSRF, a confirmation step, then the same runner services
the CLI uses, recorded as operator actions with the user and address."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from flask_login import current_user

from accounts.permissions import permission_required
from blueprints.backoffice import bp
from blueprints.backoffice.pages import MANAGE, run_or_404
from taskrunner import runner
from taskrunner.contract import Refused
from taskrunner.ledger import ledger


def actor() -> runner.Actor:
    return runner.Actor(name=current_user.email, source="web", address=request.remote_addr)


def confirmed() -> bool:
    return request.form.get("confirm") == "yes"


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


@bp.post("/task-runs/<run_uuid>/retry")
@permission_required(MANAGE)
def retry(run_uuid: str):
    run = run_or_404(run_uuid)
    failed_only = request.form.get("failed_only") in ("1", "yes", "on", "true")
    back = url_for("backoffice.run", run_uuid=run.uuid)
    if not confirmed():
        count = ledger.count_retryable(run, failed_only)
        what = "failed units" if failed_only else "failed, pending and stale units"
        return render_template(
            "backoffice/confirm.html",
            run=run,
            count=count,
            back=back,
            action=url_for("backoffice.retry", run_uuid=run.uuid),
            title="Retry failed units" if failed_only else "Retry all unfinished units",
            verb="Retry",
            fields={"failed_only": "1" if failed_only else "0"},
            message=f"This re-dispatches {_plural(count, 'unit')} ({what}) of this run. "
            "Attempts add up; the run goes back to running.",
        )
    try:
        count = runner.retry(run.uuid, failed_only=failed_only, actor=actor())
    except Refused as exc:
        flash(f"Nothing retried: {exc}", "error")
    else:
        flash(f"Retrying {_plural(count, 'unit')}.", "success")
    return redirect(back)


@bp.post("/task-runs/<run_uuid>/cancel")
@permission_required(MANAGE)
def cancel(run_uuid: str):
    run = run_or_404(run_uuid)
    back = url_for("backoffice.run", run_uuid=run.uuid)
    if not confirmed():
        counts = ledger.run_counts(run)
        count = counts["pending"] + counts["running"]
        return render_template(
            "backoffice/confirm.html",
            run=run,
            count=count,
            back=back,
            action=url_for("backoffice.cancel", run_uuid=run.uuid),
            title="Cancel this run",
            verb="Cancel run",
            fields={},
            danger=True,
            message=f"This skips {_plural(count, 'unit')} that are pending or running and "
            "revokes their queued jobs. A unit already running finishes its current "
            "attempt, but its result is not recorded.",
        )
    try:
        skipped = runner.cancel(run.uuid, actor=actor())
    except Refused as exc:
        flash(f"Not cancelled: {exc}", "error")
    else:
        flash(f"Run cancelled; {_plural(skipped, 'unit')} skipped.", "success")
    return redirect(back)


@bp.post("/stale-units/retry")
@permission_required(MANAGE)
def retry_stale():
    back = url_for("backoffice.stale_units")
    if not confirmed():
        by_run = ledger.stale_counts_by_run()
        count = sum(n for _, _, n in by_run)
        return render_template(
            "backoffice/confirm.html",
            run=None,
            count=count,
            back=back,
            action=url_for("backoffice.retry_stale"),
            title="Retry stale units",
            verb="Retry",
            fields={},
            message=f"This re-dispatches {_plural(count, 'stale unit')} across "
            f"{_plural(len(by_run), 'running run')}.",
        )
    count, refusals = runner.retry_stale(actor=actor())
    for refusal in refusals:
        flash(f"Skipped: {refusal}", "error")
    flash(f"Retrying {_plural(count, 'stale unit')}.", "success" if count else "info")
    return redirect(back)
