"""``flask schedules …``: thin commands over the schedules' service."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import click
from flask.cli import AppGroup

from database import iso
from security.refusal import refuse
from taskrunner import reports, schedule_actions
from taskrunner import schedules as service
from taskrunner.ledger import CLI
from taskrunner.types import NotRecorded, Refused

schedules_cli = AppGroup("schedules", help="See the periodic schedules; run, pause, resume one.")


def _known(call: Callable[..., Any], name: str, *args: Any, **kwargs: Any) -> Any:
    try:
        return call(name, *args, **kwargs)
    except service.UnknownSchedule as exc:
        refuse(str(exc))
    except schedule_actions.Unconfirmed as exc:
        refuse(f"{exc} (with --yes)")
    except (Refused, NotRecorded) as exc:
        refuse(str(exc))


def _slot_line(slot: service.SlotView | None) -> str:
    if slot is None:
        return "no slot yet"
    host = f" on {slot.host}" if slot.host else ""
    run = f" run {slot.run_uuid}" if slot.run_uuid else ""
    return f"{iso(slot.slot_at)} {slot.state}{host}{run}"


@schedules_cli.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON API's document.")
def list_command(as_json: bool) -> None:
    """Every schedule: its rule, next slot, last slot and missed slots (24 h)."""
    views = service.schedules()
    if as_json:
        click.echo(json.dumps(reports.schedules(views), indent=2))
        return
    for view in views:
        paused = f"  PAUSED by {view.paused_by}" if view.paused else ""
        missed = f"  {view.missed} missed (24 h)" if view.missed else ""
        click.echo(f"{view.name}  {view.rule}{paused}{missed}")
        click.echo(f"  next {iso(view.next_due_at) or '-'}  last {_slot_line(view.last_slot)}")


@schedules_cli.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print the JSON API's document.")
def show_command(name: str, as_json: bool) -> None:
    """One schedule with its last 100 slots."""
    view = _known(service.schedule, name)
    if as_json:
        click.echo(json.dumps(reports.schedule(view), indent=2))
        return
    click.echo(f"{view.name}: {view.starts}, {view.rule} [{view.expression}] {view.timezone}")
    if view.paused:
        click.echo(f"paused by {view.paused_by} at {iso(view.paused_at)}")
    click.echo(f"next due {iso(view.next_due_at) or '-'}; {view.missed} missed in 24 h")
    for slot in view.slots:
        reason = f"  {slot.reason}" if slot.reason else ""
        click.echo(f"  {_slot_line(slot)}{reason}")


@schedules_cli.command("run-now")
@click.argument("name")
@click.option(
    "--yes",
    is_flag=True,
    help="Start it even while its previous run runs or an earlier run-now still waits.",
)
def run_now_command(name: str, yes: bool) -> None:
    """Enqueue a slot now, the way its scheduler does."""
    slot = _known(schedule_actions.run_now, name, CLI, confirmed=yes)
    click.echo(f"{name}: slot {schedule_actions.slot_text(slot)} enqueued")


@schedules_cli.command("pause")
@click.argument("name")
def pause_command(name: str) -> None:
    """Pause a schedule: every scheduler skips its slots from its next check."""
    paused = _known(schedule_actions.pause, name, CLI)
    click.echo(f"schedule {name} " + ("paused" if paused else "was already paused"))


@schedules_cli.command("resume")
@click.argument("name")
def resume_command(name: str) -> None:
    """Resume a paused schedule."""
    resumed = _known(schedule_actions.resume, name, CLI)
    click.echo(f"schedule {name} " + ("resumed" if resumed else "was not paused"))
