"""The run shapes shared by ``tasks status --json`` and the JSON API (README, "JSON output")."""

from __future__ import annotations

from typing import Any

from database import iso
from taskrunner.ledger import ErrorGroup, Page, ledger
from taskrunner.models import TaskRun

UNIT_LIST_CAP = 100


def run_summary(run: TaskRun, counts: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "uuid": run.uuid,
        "type": run.type,
        "status": run.status,
        "initiator": run.initiator,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "units": counts if counts is not None else ledger.runs.run_counts(run),
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
    """``{"runs": [...], "next_cursor"}``; stale counts only where a run is still running."""
    return {"runs": [run_summary(run) for run in page.items], "next_cursor": page.next_cursor}


def units_page(page: Page) -> dict[str, Any]:
    return {"units": page.items, "next_cursor": page.next_cursor}


def error_groups(run: TaskRun, groups: list[ErrorGroup]) -> dict[str, Any]:
    return {
        "uuid": run.uuid,
        "groups": [
            {
                "reason": g.reason,
                "kind": g.kind,
                "where": g.where,
                "example": g.example,
                "count": g.count,
                "tenants": g.tenants,
                "tenant_sample": g.tenant_sample,
            }
            for g in groups
        ],
    }
