"""The run shapes shared by ``tasks status --json`` and the JSON API (SPEC §9)."""

from __future__ import annotations

from typing import Any

from taskrunner.ledger import iso, ledger
from taskrunner.models import TaskRun

UNIT_LIST_CAP = 100


def run_summary(run: TaskRun) -> dict[str, Any]:
    return {
        "uuid": run.uuid,
        "type": run.type,
        "status": run.status,
        "initiator": run.initiator,
        "started_at": iso(run.started_at),
        "finished_at": iso(run.finished_at),
        "units": ledger.unit_counts(run),
    }


def run_detail(run: TaskRun, cap: int = UNIT_LIST_CAP) -> dict[str, Any]:
    return {
        **run_summary(run),
        "failed_units": ledger.units_of(run, statuses=["failed"], limit=cap),
        "stale_units": ledger.units_of(run, stale_only=True, limit=cap),
        "events": ledger.events_of(run),
    }


def recent_runs(limit: int = 20, **filters: Any) -> list[dict[str, Any]]:
    return [run_summary(run) for run in ledger.recent_runs(limit=limit, **filters)]
