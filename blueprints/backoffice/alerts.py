"""The Alerts page: the rules, open and recent episodes with their deliveries, and a mute
of one rule for an hour (confirmed, audited), over the alerts' operator service."""

from __future__ import annotations

from flask import abort, flash, redirect, render_template, url_for

from accounts.permissions import permission_required
from alerts import operators
from alerts.settings import RULES
from blueprints.backoffice.actions import actor, confirmed
from blueprints.backoffice.blueprint import bp
from blueprints.backoffice.pages import MANAGE, VIEW, can_manage


@bp.get("/alerts")
@permission_required(VIEW)
def alerts():
    open_episodes, recent = operators.episodes()
    try:
        rules, setting_error = operators.rules(), None
    except ValueError as exc:  # a malformed ALERT_* setting: say which, show the episodes
        rules, setting_error = [], str(exc)
    return render_template(
        "backoffice/alerts.html",
        rules=rules,
        setting_error=setting_error,
        open_episodes=open_episodes,
        recent=recent,
        can_manage=can_manage(),
    )


@bp.post("/alerts/rules/<rule>/mute")
@permission_required(MANAGE)
def mute_rule(rule: str):
    if rule not in RULES:
        abort(404)
    back = url_for("backoffice.alerts")
    if not confirmed():
        open_count = sum(1 for e in operators.episodes(limit=0)[0] if e.rule == rule)
        return render_template(
            "backoffice/confirm.html",
            run=None,
            count=open_count,
            allow_zero=True,
            noun=("open episode", "open episodes"),
            unit_word="open episode",
            back=back,
            action=url_for("backoffice.mute_rule", rule=rule),
            title=f"Mute {rule} for {operators.MUTE_HOURS} h",
            verb="Mute",
            fields={},
            message=f"For {operators.MUTE_HOURS} hour no alert of {rule} is sent: its "
            "episodes still open and resolve here, and the mute is recorded with your name.",
        )
    until = operators.mute(rule, actor())
    flash(f"{rule} muted until {until:%H:%M} UTC.", "success")
    return redirect(back)
