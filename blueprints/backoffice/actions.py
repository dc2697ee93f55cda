"""Retry and cancel: POST forms with CSRF, a confirmation step, then the same runner services
the CLI uses, recorded as operator actions with the user and address."""

from __future__ import annotations

from flask import abort, flash, redirect, render_template, request, url_for
from flask_login import current_user

from accounts.permissions import permission_required
from blueprints import params
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import MANAGE, run_or_404
from blueprints.ui import plural
from database import database_outage
from taskrunner.contract import Refused, operations, redact


def actor() -> operations.Actor:
    return operations.Actor(name=current_user.email, source="web", address=request.remote_addr)


def confirmed() -> bool:
    return request.form.get("confirm") == "yes"


def _plural(n: int, word: str) -> str:
    return plural(n, word)


def _retry_target() -> tuple[str | None, list[str] | None]:
    """The error group (``reason``) or the units (``unit``, repeatable) a retry is narrowed to."""
    reason = request.form.get("reason")
    keys = [k for k in request.form.getlist("unit") if k]
    if reason is not None and keys:
        abort(400, description="give a reason or units, not both")
    if reason is not None:
        reason = params.checked_reason(reason)
        if not reason.strip():
            abort(400, description="reason must be the text of an error group")
    if len(keys) > 500 or any(len(k) > 191 or any(ord(c) < 32 for c in k) for k in keys):
        abort(400, description="units must be up to 500 unit keys")
    if "unit" in request.form and not keys:
        abort(400, description="select at least one unit")
    return reason, keys or None


@bp.post("/task-runs/<run_uuid>/retry")
@permission_required(MANAGE)
def retry(run_uuid: str):
    run = run_or_404(run_uuid)
    reason, keys = _retry_target()
    failed_only = request.form.get("failed_only") in ("1", "yes", "on", "true") or bool(reason)
    stale_only = request.form.get("stale_only") in ("1", "yes", "on", "true")
    if stale_only and (reason is not None or keys or failed_only):
        abort(400, description="stale units alone: not with a reason, units or failed only")
    after_action = params.form_id("after_action", "an operator action")
    back = request.form.get("back_to")
    if back == "errors":
        back = url_for("backoffice.errors", run_uuid=run.uuid)
    elif back == "unit" and keys and len(keys) == 1:
        back = url_for("backoffice.unit", run_uuid=run.uuid, unit_key=keys[0])
    elif back == "stale":
        back = url_for("backoffice.stale_units", run=run.uuid)
    else:
        back = url_for("backoffice.run", run_uuid=run.uuid)
    if not confirmed():
        count = operations.count_retryable(
            run, failed_only, stale_only=stale_only, reason=reason, unit_keys=keys
        )
        fields: dict[str, object] = {"failed_only": "1" if failed_only else "0"}
        if stale_only:
            title = "Retry the stale units of this run"
            what = "stale units: worker lost, running too long or never started"
            fields["stale_only"] = "1"
        elif reason is not None:
            title = "Retry one error group"
            what = f"the failed units whose reason is \u201c{reason}\u201d"
            fields["reason"] = reason
        elif keys is not None:
            title = "Retry this unit" if len(keys) == 1 else "Retry the selected units"
            what = f"of {_plural(len(keys), 'selected unit')}, those failed, pending or stale"
            fields["unit"] = keys
        else:
            title = "Retry failed units" if failed_only else "Retry all unfinished units"
            what = "failed units" if failed_only else "failed, pending and stale units"
        fields["back_to"] = request.form.get("back_to", "")
        # What the confirmation was shown for: sent twice, the second finds a newer action.
        fields["after_action"] = str(operations.last_action_id(run))
        return render_template(
            "backoffice/confirm.html",
            run=run,
            count=count,
            back=back,
            action=url_for("backoffice.retry", run_uuid=run.uuid),
            title=title,
            verb="Retry",
            fields=fields,
            message=f"This re-dispatches {_plural(count, 'unit')} ({what}) of this run. "
            "Attempts add up; the run goes back to running.",
        )
    try:
        count = operations.retry(
            run.uuid,
            actor=actor(),
            failed_only=failed_only,
            stale_only=stale_only,
            reason=reason,
            unit_keys=keys,
            after_action=after_action,
        )
    except (Refused, operations.NotRecorded) as exc:  # nothing was written: no dispatch
        flash(f"Nothing retried: {exc}", "error")
    except Exception as exc:
        dispatch_failed(exc)
    else:
        flash(f"Retrying {_plural(count, 'unit')}.", "success")
    return redirect(back)


def dispatch_failed(exc: Exception) -> None:
    """The queue refused a dispatch the ledger had committed: the runner failed the units
    it could not queue and logged why; say so, as the command line does."""
    if database_outage(exc):
        raise exc  # the outage page answers it
    flash(
        f"Dispatch failed: {redact(exc)}. The units it could not queue are failed: retry "
        "them once the queue is back.",
        "error",
    )


@bp.post("/task-runs/<run_uuid>/cancel")
@permission_required(MANAGE)
def cancel(run_uuid: str):
    run = run_or_404(run_uuid)
    back = url_for("backoffice.run", run_uuid=run.uuid)
    if not confirmed():
        count = operations.count_cancellable(run)
        return render_template(
            "backoffice/confirm.html",
            run=run,
            count=count,
            back=back,
            action=url_for("backoffice.cancel", run_uuid=run.uuid),
            title="Cancel this run",
            verb="Cancel run",
            # The count shown travels with the form: the banner can say what moved since.
            fields={"expected": str(count)},
            danger=True,
            message=f"This skips {_plural(count, 'unit')} that are pending or running and "
            "revokes their queued jobs. A unit already running finishes its current "
            "attempt, but its result is not recorded.",
        )
    try:
        skipped = operations.cancel(run.uuid, actor())
    except (Refused, operations.NotRecorded) as exc:
        flash(f"Not cancelled: {exc}", "error")
    else:
        flash(f"Run cancelled; {_plural(skipped, 'unit')} skipped.{_moved(skipped)}", "success")
    return redirect(back)


def _moved(skipped: int) -> str:
    """Why the skipped count differs from the one confirmed: units finished in between."""
    raw = request.form.get("expected", "")
    if not (raw.isascii() and raw.isdigit() and len(raw) < 12):
        return ""
    expected = int(raw)
    if expected <= skipped:
        return ""
    return (
        f" {_plural(expected, 'unit')} were pending or running when you confirmed; "
        f"{_plural(expected - skipped, 'unit')} finished in between."
    )


@bp.post("/stale-units/retry")
@permission_required(MANAGE)
def retry_stale():
    back = url_for("backoffice.stale_units")
    if not confirmed():
        by_run = operations.stale_by_run()
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
    try:
        count, refusals = operations.retry_stale(actor())
    except Exception as exc:
        dispatch_failed(exc)
        return redirect(back)
    for refusal in refusals:
        flash(f"Skipped: {refusal}", "error")
    flash(f"Retrying {_plural(count, 'stale unit')}.", "success" if count else "info")
    return redirect(back)
