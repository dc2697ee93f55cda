"""The run shapes shared by ``tasks status --json`` and the JSON API (SPEC §9)."""

from __future__ import annotations

from typing import Any

from taskrunner.ledger import iso, ledger
from taskrunner.models import TaskRun
from taskrunner.queries import ErrorGroup, Page

UNIT_LIST_CAP = 100


def run_summary(run: TaskRun, counts: dict[str, int] | None = None) -> dict[str, Any]:
    return {
        "uuid": run.uuid,
        "type": run.type,
        "status": run.status,
        "initiator": run.initiator,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "units": counts if counts is not None else ledger.run_counts(run),
    }


def run_detail(run: TaskRun, cap: int = UNIT_LIST_CAP) -> dict[str, Any]:
    return {
        **run_summary(run),
        "failed_units": ledger.run_units_page(run, status="failed", limit=cap).items,
        "stale_units": ledger.run_units_page(run, stale_only=True, limit=cap).items,
        "events": ledger.events_of(run),
    }


def recent_runs(limit: int = 20, **filters: Any) -> list[dict[str, Any]]:
    return [run_summary(run) for run in ledger.recent_runs(limit=limit, **filters)]


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
                "example": g.example,
                "count": g.count,
                "tenants": g.tenants,
                "tenant_sample": g.tenant_sample,
            }
            for g in groups
        ],
    }
