"""The on-call console: workers, queues (pause and resume a type), search."""

from __future__ import annotations

from typing import Any

from flask import abort, flash, redirect, render_template, request, url_for

from accounts.permissions import permission_required
from blueprints import params
from blueprints.backoffice.actions import actor, confirmed, dispatch_failed
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import MANAGE, VIEW, can_manage
from taskrunner.contract import Refused, operations
from tenancy import services as tenants

SEARCH_LIMIT = 20
# The kinds of match a search pages through one at a time (``in``).
SEARCH_SECTIONS = ("tenants", "runs", "units", "errors")


def search_results(query: str) -> dict[str, Any]:
    """The runner's matches and the tenants' (the runner knows nothing of tenants), each
    counted; ``in`` and ``page``: one section's page of ``SEARCH_LIMIT``."""
    section, page = params.choice("in", SEARCH_SECTIONS), params.page()
    if page > 1 and section is None:
        abort(400, description="page needs in: the section to page through")
    # ``in=tenants`` names none of the runner's sections: it reads none of them.
    result = operations.search(query, SEARCH_LIMIT, section, page)
    result["tenants"], result["counts"]["tenants"] = [], 0
    if result["query"] and section in (None, "tenants"):
        offset = (page - 1) * SEARCH_LIMIT
        result["tenants"] = tenants.matching(query, SEARCH_LIMIT, offset)
        result["counts"]["tenants"] = (
            len(result["tenants"])
            if section is None and len(result["tenants"]) < SEARCH_LIMIT
            else tenants.count_matching(query)
        )
    result["section"], result["page"] = section, page
    return result


@bp.get("/workers")
@permission_required(VIEW)
def workers():
    data = operations.consumers()
    return render_template(
        "backoffice/workers.html",
        consumers=data["consumers"],
        live=sum(1 for c in data["consumers"] if c["state"] == "live"),
    )


@bp.get("/queues")
@permission_required(VIEW)
def queues():
    data = operations.queues()
    return render_template(
        "backoffice/queues.html",
        queues=data["queues"],
        paused=data["paused_types"],
        settled_as_of=data["settled_as_of"],
        settled_lag_seconds=data["settled_lag_seconds"],
        can_manage=can_manage(),
    )


@bp.get("/search")
@permission_required(VIEW)
def search():
    query = params.text("q") or ""
    result = search_results(query)
    if result["exact_run"] and not request.args.get("all"):
        return redirect(url_for("backoffice.run", run_uuid=result["exact_run"]))
    return render_template("backoffice/search.html", result=result, q=query)


def _type_or_404(type_: str) -> str:
    if not operations.is_registered(type_):
        abort(404, description="no such task type")
    return type_


def _confirm_type_action(type_: str, endpoint: str, verb: str, message: str) -> str | None:
    """The confirmation page of a pause or resume, with the pending units it concerns; None
    once the operator confirmed."""
    if confirmed():
        return None
    return render_template(
        "backoffice/confirm.html",
        run=None,
        count=operations.count_pending_of_type(type_),
        back=url_for("backoffice.queues"),
        action=url_for(endpoint, type_=type_),
        title=f"{endpoint.rpartition('.')[2].capitalize()} {type_}",
        verb=verb,
        unit_word="pending unit",
        allow_zero=True,
        fields={},
        message=message,
    )


@bp.post("/task-types/<type_>/pause")
@permission_required(MANAGE)
def pause(type_: str):
    _type_or_404(type_)
    page = _confirm_type_action(
        type_,
        "backoffice.pause",
        "Pause",
        f"Units of {type_} stay pending until it is resumed: they spend no try "
        "and do not expire. Units already running finish their attempt.",
    )
    if page is not None:
        return page
    try:
        paused = operations.pause(type_, actor())
    except (Refused, operations.NotRecorded) as exc:
        flash(f"Not paused: {exc}", "error")
    else:
        flash(f"{type_} paused." if paused else f"{type_} was already paused.", "success")
    return redirect(url_for("backoffice.queues"))


@bp.post("/task-types/<type_>/resume")
@permission_required(MANAGE)
def resume(type_: str):
    _type_or_404(type_)
    page = _confirm_type_action(
        type_,
        "backoffice.resume",
        "Resume and dispatch",
        f"The units of {type_} that waited are dispatched again.",
    )
    if page is not None:
        return page
    try:
        count = operations.resume(type_, actor())
    except (Refused, operations.NotRecorded) as exc:  # nothing was written: no dispatch
        flash(f"Not resumed: {exc}", "error")
    except Exception as exc:
        dispatch_failed(exc)
    else:
        if count is None:
            flash(f"{type_} was not paused.", "success")
            return redirect(url_for("backoffice.queues"))
        units = f"{count:,} waiting unit{'' if count == 1 else 's'}"
        flash(f"{type_} resumed; {units} dispatched.", "success")
    return redirect(url_for("backoffice.queues"))
