"""The run shapes shared by ``tasks status --json`` and the JSON API (README, "JSON output")."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterable, Iterator
from typing import Any

from database import iso
from taskrunner.ledger import Comparison, ErrorGroup, Page, ledger
from taskrunner.models import TaskRun
from taskrunner.tenant_scope import names_of

UNIT_LIST_CAP = 100
# A group's units as exported (the pages' CSV and JSON, ``tasks status --reason --csv``).
EXPORT_COLUMNS = ("tenant_id", "tenant_name", "unit_key", "attempts", "kind", "reason", "finished")
# A spreadsheet runs a cell starting with one of these as a formula: a tenant's name or a
# reason is data, never a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def run_summary(run: TaskRun, counts: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "uuid": run.uuid,
        "type": run.type,
        "status": run.status,
        "initiator": run.initiator,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "units": counts if counts is not None else ledger.counts.run_counts(run),
    }


def run_detail(
    run: TaskRun,
    counts: dict[str, int],
    failed_units: list[dict[str, Any]],
    stale_units: list[dict[str, Any]],
    events: list[dict[str, Any]],
) -> dict[str, Any]:
    """One run with its failed and stale units and its events (oldest first)."""
    return {
        **run_summary(run, counts),
        "failed_units": failed_units,
        "stale_units": stale_units,
        "events": events,
    }


def runs_page(page: Page) -> dict[str, Any]:
    """``{"runs": [...], "next_cursor"}``; stale counts only where a run is still running.

    The counts of the whole page are read together, never one run at a time.
    """
    return {"runs": run_summaries(page.items), "next_cursor": page.next_cursor}


def run_summaries(runs: list[TaskRun]) -> list[dict[str, Any]]:
    counts = ledger.counts.counts_of(runs)
    return [run_summary(run, counts[run.id]) for run in runs]


def units_page(page: Page) -> dict[str, Any]:
    return {"units": page.items, "next_cursor": page.next_cursor}


def error_groups(run: TaskRun, page: Page) -> dict[str, Any]:
    """``{"uuid", "groups": [...], "next_cursor"}``: a page of the run's error groups."""
    groups: list[ErrorGroup] = page.items
    return {
        "uuid": run.uuid,
        "groups": [
            {
                "reason": g.reason,
                "kind": g.kind,
                "where": g.where,
                "example": g.example,
                "count": g.count,
                "retrying": g.retrying,
                "tenants": g.tenants,
                "tenant_sample": g.tenant_sample,
            }
            for g in groups
        ],
        "next_cursor": page.next_cursor,
    }


def schedule_slot(slot: Any) -> dict[str, Any]:
    """One slot of a schedule (``run_uuid`` only when it started a run)."""
    shaped = {
        "slot_at": iso(slot.slot_at),
        "state": slot.state,
        "host": slot.host,
        "claimed_at": iso(slot.claimed_at),
        "finished_at": iso(slot.finished_at),
        "initiator": slot.initiator,
        "reason": slot.reason,
    }
    if slot.run_uuid:
        shaped["run_uuid"] = slot.run_uuid
    return shaped


def schedule(view: Any) -> dict[str, Any]:
    """One schedule as ``flask schedules show --json`` and the JSON API give it."""
    last = view.last_slot
    return {
        "name": view.name,
        "starts": view.starts,
        "rule": view.rule,
        "expression": view.expression,
        "timezone": view.timezone,
        "grace_seconds": view.grace_seconds,
        "paused": view.paused,
        "paused_by": view.paused_by,
        "paused_at": iso(view.paused_at),
        "next_due_at": iso(view.next_due_at),
        "first_known_at": iso(view.first_known_at),
        "last_slot": schedule_slot(last) if last is not None else None,
        "slots": [schedule_slot(slot) for slot in view.slots],
        "missed": view.missed,
        "missed_since": iso(view.missed_from),
    }


def schedules(views: list[Any]) -> dict[str, Any]:
    return {"schedules": [schedule(view) for view in views]}


def export_rows(units: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Unit dicts as exported: the tenant named, the reason and finish time as shown."""
    names = names_of(u["tenant_id"] for u in units)
    return [
        {
            "tenant_id": u["tenant_id"],
            "tenant_name": names.get(u["tenant_id"]) if u["tenant_id"] is not None else None,
            "unit_key": u["unit_key"],
            "attempts": u["attempts"],
            "kind": u["kind"],
            "reason": u["last_error"],
            "finished": u["finished_at"],
        }
        for u in units
    ]


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(_FORMULA_START) else text


def csv_lines(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The header, then one CSV line per exported row (streamed: a group may be large)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(EXPORT_COLUMNS)
    for row in rows:
        writer.writerow([_cell(row[column]) for column in EXPORT_COLUMNS])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    if buffer.getvalue():
        yield buffer.getvalue()


def json_chunks(uuid: str, reason: str | None, rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """``{"uuid", "reason", "units": [...]}`` a unit at a time (streamed, as ``csv_lines``)."""
    yield json.dumps({"uuid": uuid, "reason": reason})[:-1] + ', "units": ['
    separator = ""
    for row in rows:
        yield separator + json.dumps(row)
        separator = ", "
    yield "]}\n"


def comparison(c: Comparison) -> dict[str, Any]:
    """Two runs compared (README, "JSON output"): the three sets, new groups, speed."""
    return {
        "uuid": c.run.uuid,
        "with": c.other.uuid,
        "type": c.run.type,
        **{
            name: {"count": changed.count, "units": changed.units}
            for name, changed in (
                ("newly_failing", c.newly_failing),
                ("recovered", c.recovered),
                ("still_failing", c.still_failing),
            )
        },
        "new_error_groups": [
            {"reason": g.reason, "kind": g.kind, "where": g.where, "count": g.count}
            for g in c.new_groups
        ],
        "new_error_groups_count": c.new_groups_count,
        "duration_seconds": {
            "run": round(c.durations[0], 1),
            "with": round(c.durations[1], 1),
            "change": round(c.durations[0] - c.durations[1], 1),
        },
        "throughput_per_minute": {"run": c.throughputs[0], "with": c.throughputs[1]},
    }
