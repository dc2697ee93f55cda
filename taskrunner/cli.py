"""``flask tasks …``: thin commands over the runner's services."""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import Any

import click
from flask.cli import AppGroup

from database import iso
from security.echo import one_line
from security.refusal import read_text, refuse, write_text
from taskrunner import cli_notes, cli_options, delivery, operations, periodic, runner
from taskrunner.events import catalog_markdown
from taskrunner.ledger import ledger
from taskrunner.types import LeftoversNotCleared, NotRecorded, Refused, plural

tasks_cli = AppGroup("tasks", help="Start, inspect, retry, cancel and prune task runs.")
events_cli = AppGroup("events", help="The event catalog, and deliveries parked by subscribers.")
MAX_DAYS = 36_500  # a century; far beyond it the cut-off is before year 1: no datetime


@tasks_cli.command("start")
@click.argument("type_", metavar="TYPE")
@click.option(
    "--context", callback=cli_options.context, help="JSON object passed to the task type."
)
@click.option(
    "--wait",
    type=float,
    callback=cli_options.wait_seconds,
    help="Seconds to wait for the run to end.",
)
def start_command(type_: str, context: dict[str, Any], wait: float | None) -> None:
    """Start a run of a registered task type; print its uuid."""
    try:
        handle = runner.start(type_, context, "cli")
    except (Refused, NotRecorded) as exc:
        refuse(str(exc))
    except Exception as exc:
        cli_notes.dispatch_failed(exc)
    click.echo(f"started {type_}: {plural(handle.units_total, 'unit')}", err=True)
    # Said before anything else may fail or be interrupted (a wait stopped with Ctrl-C).
    click.echo(handle.uuid)
    if handle.units_total:
        cli_notes.warn_if_waiting(type_)
    ended = runner.ended_within(handle.uuid, wait) if wait else None
    if ended:
        click.echo(f"finished: {ended}", err=True)
    if wait and not ended:  # a check end to end fails when no worker ran the run
        refuse(f"run {handle.uuid} still running after {wait:g} s")


@tasks_cli.command("status")
@click.argument("run_uuid", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the stable JSON shape.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(1, 500))
@click.option(
    "--reason",
    help="Every failed unit of this error group (its reason as the error groups show it).",
)
@click.option("--csv", "as_csv", is_flag=True, help="The units as CSV (with --reason: its group).")
def status_command(
    run_uuid: str | None, as_json: bool, limit: int, reason: str | None, as_csv: bool
) -> None:
    """Recent runs, or one run with its counts and failed and stale units."""
    if as_csv and as_json:
        raise click.UsageError("give --csv or --json, not both")
    if (reason is not None or as_csv) and run_uuid is None:
        raise click.UsageError("--reason and --csv need a RUN_UUID")
    if reason is not None and not reason.strip():
        raise click.UsageError("--reason needs the text of an error group")
    if run_uuid is None:
        runs = operations.runs_json(operations.runs_page(limit=limit))["runs"]
        if as_json:
            click.echo(json.dumps({"runs": runs}, indent=2))
            return
        click.echo(f"{'uuid':36}  {'type':32} {'status':24} {'done':>13}  started")
        for run in runs:
            units = run["units"]
            done = units["completed"] + units["failed"] + units["skipped"]
            click.echo(
                f"{run['uuid']:36}  {run['type']:32} {run['status']:24} "
                f"{done:>6}/{units['total']:<6}  {run['started_at']}"
            )
        return
    run = ledger.runs.find_run(run_uuid)
    if run is None:
        refuse(f"no run {run_uuid}")
    if reason is not None or as_csv:
        _print_units(run, reason, as_json, as_csv)
        return
    detail = operations.run_report(run)
    if as_json:
        click.echo(json.dumps(detail, indent=2))
        return
    _print_detail(detail)


def _print_units(run: Any, reason: str | None, as_json: bool, as_csv: bool) -> None:
    """A group's units (or every unit of the run, for ``--csv`` alone), all of them, written
    as their pages are read: a group of a 100,000-unit run is never a list in memory."""
    rows = operations.export_units(run, reason=reason)
    if as_csv:
        for line in operations.csv_lines(rows):
            click.echo(line, nl=False)
        return
    if as_json:
        for chunk in operations.json_chunks(run.uuid, reason, rows):
            click.echo(chunk, nl=False)
        return
    count = 0
    for row in rows:
        count += 1
        click.echo(
            f"{_unit(row)}  attempts={row['attempts']}  kind={row['kind']}  {_said(row['reason'])}"
        )
    click.echo(f"{plural(count, 'unit')} in the error group {reason!r}", err=True)


def _unit(unit: dict[str, Any]) -> str:
    return f"{unit['unit_key']}  tenant={unit['tenant_id'] or '-'}"


def _said(reason: str | None) -> str:
    """A unit's reason on its one line (a stored reason keeps its newlines)."""
    return one_line(reason or "")


def _print_detail(detail: dict[str, Any]) -> None:
    units = detail["units"]
    click.echo(f"run       {detail['uuid']}")
    click.echo(f"type      {detail['type']}")
    click.echo(f"status    {detail['status']}")
    click.echo(f"initiator {detail['initiator']}")
    click.echo(f"started   {detail['started_at']}   finished {detail['finished_at'] or '-'}")
    names = ("total", "pending", "running", "completed", "failed", "skipped", "stale")
    click.echo("units     " + "  ".join(f"{name} {units[name]}" for name in names))
    for title, key in (("failed units", "failed_units"), ("stale units", "stale_units")):
        if detail[key]:
            click.echo(f"\n{title}:")
            for unit in detail[key]:
                why = unit["stale_reason"] if key == "stale_units" else unit["last_error"]
                stale = " [stale]" if unit["stale"] and key == "failed_units" else ""
                kind = f"  kind={unit['kind']}" if unit.get("kind") else ""
                click.echo(
                    f"  {_unit(unit)}  attempts={unit['attempts']}{kind}{stale}  {_said(why)}"
                )


@tasks_cli.command("compare")
@click.argument("run_uuid")
@click.argument("other_uuid", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print the JSON API's shape.")
def compare_command(run_uuid: str, other_uuid: str | None, as_json: bool) -> None:
    """A run against another (default: the previous run of its type)."""
    run = ledger.runs.find_run(run_uuid)
    if run is None:
        refuse(f"no run {run_uuid[:40]}")
    try:
        answer = operations.comparison_json(operations.compare(run, other_uuid))
    except Refused as exc:
        refuse(str(exc))
    if as_json:
        click.echo(json.dumps(answer, indent=2))
        return
    duration = answer["duration_seconds"]
    click.echo(f"run       {answer['uuid']}  ({answer['type']})")
    click.echo(f"with      {answer['with']}")
    click.echo(
        f"duration  {duration['run']:g} s vs {duration['with']:g} s ({duration['change']:+g} s)"
    )
    for name in ("newly_failing", "recovered", "still_failing"):
        changed = answer[name]
        click.echo(f"\n{name.replace('_', ' ')}: {changed['count']}")
        for unit in changed["units"]:
            runs = f"  {unit['failing_runs']} runs in a row" if unit["failing_runs"] else ""
            why = unit["last_error"] if unit["status"] == "failed" else unit["previous_error"]
            click.echo(f"  {_unit(unit)}{runs}  {_said(why)}")
    for group in answer["new_error_groups"]:
        click.echo(
            f"\nnew error group ({group['count']}, {group['kind']}): {_said(group['reason'])}"
        )


@tasks_cli.command("retry")
@click.argument("run_uuid")
@click.option("--failed-only", is_flag=True, help="Only failed units, not pending or stale ones.")
@click.option(
    "--reason",
    help="Only the failed units of this error group (its reason as the error groups show it).",
)
@click.option("--unit", "units", multiple=True, help="Only this unit (repeatable).")
def retry_command(
    run_uuid: str, failed_only: bool, reason: str | None, units: tuple[str, ...]
) -> None:
    """Re-dispatch a run's failed, pending and stale units as a new dispatch."""
    if reason is not None and units:
        raise click.UsageError("give --reason or --unit, not both")
    if reason is not None and not reason.strip():
        raise click.UsageError("--reason needs the text of an error group")
    try:
        count = runner.retry(
            run_uuid,
            failed_only=failed_only or reason is not None,
            reason=reason,
            unit_keys=list(units) if units else None,
        )
    except (Refused, NotRecorded) as exc:
        refuse(str(exc))
    except Exception as exc:
        cli_notes.dispatch_failed(exc)
    click.echo(f"re-dispatched {plural(count, 'unit')} of run {run_uuid}")
    if count:
        cli_notes.warn_if_waiting(ledger.runs.get_run(run_uuid).type)


@tasks_cli.command("pause")
@click.argument("type_", metavar="TYPE")
def pause_command(type_: str) -> None:
    """Pause a task type: its units stay pending, spending no try, until resumed."""
    try:
        paused = runner.pause(type_)
    except (Refused, NotRecorded) as exc:
        refuse(str(exc))
    click.echo(f"task type {type_} " + ("paused" if paused else "was already paused"))


@tasks_cli.command("resume")
@click.argument("type_", metavar="TYPE")
def resume_command(type_: str) -> None:
    """Resume a paused task type: the units that waited are dispatched again."""
    try:
        count = runner.resume(type_)
    except (Refused, NotRecorded) as exc:
        refuse(str(exc))
    except Exception as exc:
        cli_notes.dispatch_failed(exc)
    if count is None:
        click.echo(f"task type {type_} was not paused")
        return
    click.echo(f"task type {type_} resumed: {plural(count, 'waiting unit')} dispatched")
    if count:
        cli_notes.warn_if_waiting(type_)


@tasks_cli.command("cancel")
@click.argument("run_uuid")
def cancel_command(run_uuid: str) -> None:
    """Cancel a running run: queued jobs revoked, pending and running units skipped."""
    try:
        count = runner.cancel(run_uuid)
    except (Refused, NotRecorded) as exc:
        refuse(str(exc))
    click.echo(f"cancelled run {run_uuid}: {plural(count, 'unit')} skipped")


@tasks_cli.command("prune")
@click.option("--days", type=click.IntRange(0, MAX_DAYS), help="Days to keep (default: config).")
def prune_command(days: int | None) -> None:
    """Delete terminal runs older than the retention, and the queues' leftovers."""
    try:
        report = runner.prune(days)
    except LeftoversNotCleared as exc:
        refuse(str(exc))
    click.echo(
        f"pruned {plural(report.runs, 'run')} ({plural(report.units, 'unit')}, "
        f"{plural(report.events, 'event')}, {plural(report.actions, 'operator action')}, "
        f"{plural(report.queue_keys, 'queue leftover')}, {plural(report.slots, 'schedule slot')})"
    )


@tasks_cli.command("detect-stuck")
def detect_stuck_command() -> None:
    """Run the stuck sweep once: stale units, missed schedule slots, lost slot bodies."""
    swept = periodic.detect_stuck()
    slots = ((swept.missed, "missed"), (swept.lost, "ended: worker lost"))
    said = [f"{plural(n, 'schedule slot')} {what}" for n, what in slots if n]
    click.echo(", ".join([f"{plural(swept.units, 'unit')} newly stale", *said]))


@events_cli.command("parked")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 10_000))
def parked_command(as_json: bool, limit: int) -> None:
    """List the deliveries parked after a subscriber refused them too often."""
    parked = delivery.parked(limit=limit)
    if as_json:
        rows = [{**asdict(d), "parked_at": iso(d.parked_at)} for d in parked]
        click.echo(json.dumps({"parked": rows}, indent=2))
        return
    for d in parked:
        click.echo(
            f"{d.event_id}  {d.name:22} run={d.run_uuid or '-'}  {d.subscriber}  "
            f"attempts={d.attempts}  {one_line(d.last_error or '')}"
        )
    click.echo(plural(len(parked), "parked delivery", "parked deliveries"), err=True)


@events_cli.command("redeliver")
@click.argument("event_ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every parked delivery.")
def redeliver_command(event_ids: tuple[str, ...], every: bool) -> None:
    """Hand parked deliveries of these events (or --all) to their subscribers again now."""
    if bool(event_ids) == every:
        raise click.UsageError("give EVENT_ID... or --all")
    taken, refused = delivery.redeliver_parked(event_ids)
    if not taken + refused:
        named = ", ".join(event_ids) if len(event_ids) <= 3 else plural(len(event_ids), "event")
        refuse("no parked delivery" + (f" of {named}" if event_ids else ""))
    if refused:
        refuse(f"{refused} of {taken + refused} deliveries refused again, still parked")
    click.echo(f"re-delivered {plural(taken, 'parked delivery', 'parked deliveries')}")


@events_cli.command("catalog")
@click.option("--check", is_flag=True, help="Exit 1 if docs/EVENTS.md is stale.")
@click.option("--path", default="docs/EVENTS.md", show_default=True)
def catalog_command(check: bool, path: str) -> None:
    """Write the event catalog generated from the code."""
    text = catalog_markdown()
    if check:
        current = read_text(path, missing="")
        if current != text:
            refuse(f"{path} is stale: run `flask events catalog`")
        click.echo(f"{path} is up to date")
        return
    write_text(path, text)
    click.echo(f"wrote {path}")
