"""``flask alerts``: send a test alert to the channels, list the rules and open episodes."""

from __future__ import annotations

import json
import sys

import click
from flask import current_app
from flask.cli import AppGroup

from alerts import operators
from alerts.channels import configured
from alerts.settings import CHANNELS
from security.refusal import refuse

alerts_cli = AppGroup("alerts", help="The alert rules, their open episodes, a test send.")


@alerts_cli.command("test")
@click.option("--channel", type=click.Choice(CHANNELS), help="Only this channel.")
def test_command(channel: str | None) -> None:
    """Send a test alert to each configured channel and print each receiver's answer."""
    try:
        available = configured(current_app.config)
    except ValueError as exc:
        refuse(str(exc))
    if channel is not None and channel not in available:
        refuse(f"channel {channel} is not configured")
    if not available:
        refuse("no alert channel is configured (README: Alerts and metrics)")
    answers = operators.send_test([channel] if channel else None)
    for answer in answers:
        click.echo(f"{answer.channel}: {'ok' if answer.ok else 'FAILED'} {answer.answer}")
    if not all(answer.ok for answer in answers):
        sys.exit(1)


@alerts_cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def list_command(as_json: bool) -> None:
    """The rules (on, channels, muted) and the open episodes."""
    try:
        listing = operators.listing()
    except ValueError as exc:  # a malformed ALERT_* setting
        refuse(str(exc))
    if as_json:
        click.echo(json.dumps(listing, indent=2))
        return
    for rule in listing["rules"]:
        state = "on" if rule["enabled"] else "off"
        muted = f", muted until {rule['muted_until']}" if rule["muted_until"] else ""
        channels = ", ".join(rule["channels"]) or "no channel"
        click.echo(f"{rule['name']:<18} {state:<3} → {channels}{muted}")
    click.echo("")
    if not listing["open_episodes"]:
        click.echo("No open episode.")
    for episode in listing["open_episodes"]:
        click.echo(
            f"{episode['opened_at']}  {episode['rule']}/{episode['key']}  {episode['title']}"
        )
