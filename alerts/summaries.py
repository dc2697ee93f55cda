"""What each rule's alert says: a summary as the backoffice pages show it.

Titles, counts, the top error groups with their kind, how many tenants, and links as
paths (each channel makes them absolute with ``BACKOFFICE_URL``). Never a unit's context,
a tenant's name or a receiver's address; ``content.compose`` scrubs every text again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alerts.content import duration_text
from taskrunner.contract import metrics, operations, plural

Summary = dict[str, Any]


def stale_units(total: int, by_reason: Mapping[str, int], at_least: int, window: float) -> Summary:
    return {
        "title": plural(total, "stale unit"),
        "text": f"{total} units have been stale (at least {at_least} for {window:g} min): "
        "their worker died, or they run or wait too long.",
        "facts": [[reason.capitalize(), str(n)] for reason, n in sorted(by_reason.items()) if n],
        "links": [{"label": "Stale units", "path": "/backoffice/stale-units"}],
    }


def parked_deliveries(parked: int) -> Summary:
    return {
        "title": f"{plural(parked, 'event delivery', 'event deliveries')} parked",
        "text": "A subscriber kept refusing events; their deliveries wait for an operator.",
        "facts": [["Parked deliveries", str(parked)]],
        "links": [{"label": "Parked events", "path": "/backoffice/parked-events"}],
    }


def queue_long_wait(queue: metrics.QueueFigures, limit: float) -> Summary:
    waited = int(queue.oldest_pending_seconds)
    return {
        "title": f"queue {queue.name}: oldest unit waiting {duration_text(waited)}",
        "text": f"The oldest pending unit of the {queue.name} queue has waited longer "
        f"than {limit:g} min.",
        "facts": [
            ["Queue", queue.name],
            ["Oldest wait", duration_text(waited)],
            ["Pending units", str(queue.pending_units)],
            ["Live consumers", str(queue.live_consumers)],
        ],
        "links": [{"label": "Queues", "path": "/backoffice/queues"}],
    }


def consumers_lost(states: Mapping[str, int]) -> Summary:
    lost = states.get("lost", 0)
    return {
        "title": f"{plural(lost, 'consumer')} lost",
        "text": "A consumer stopped heartbeating: its host or process is gone.",
        "facts": [["Lost", str(lost)], ["Live", str(states.get("live", 0))]],
        "links": [{"label": "Workers", "path": "/backoffice/workers"}],
    }


def run_failed(payload: Mapping[str, Any], run: Any) -> Summary:
    """A failed run as its page shows it: counts, duration, top error groups, tenants;
    ``run`` is the payload's run as the ledger has it (None: pruned)."""
    groups = operations.error_groups(run) if run is not None else []
    status = payload["status"].replace("_", " ")
    facts = [
        ["Type", payload["type"]],
        ["Status", status],
        ["Failed units", f"{payload['units_failed']} of {payload['units_total']}"],
        ["Completed units", str(payload["units_completed"])],
    ]
    if run is not None and run.finished_at is not None:
        seconds = int((run.finished_at - run.started_at).total_seconds())
        facts.append(["Run took", duration_text(seconds)])
    path = f"/backoffice/task-runs/{payload['run_uuid']}"
    return {
        "title": f"{payload['type']} {status}: {plural(payload['units_failed'], 'failed unit')}",
        "text": f"Run {payload['run_uuid']} of {payload['type']} ended {status}.",
        "run": payload["run_uuid"],
        "facts": facts,
        "error_groups": [
            {"reason": g.reason, "kind": g.kind, "count": g.count} for g in groups[:3]
        ],
        # A tenant failing in several groups, or in none of the three, counts once.
        "tenants": operations.failed_tenants(run) if run is not None else 0,
        "links": [
            {"label": "Run", "path": path},
            {"label": "Error groups", "path": f"{path}/errors"},
        ],
    }


def schedule_missed(payload: Mapping[str, Any]) -> Summary:
    name = payload["schedule"]
    return {
        "title": f"schedule {name} missed its slot",
        "text": f"The schedule {name} did not run at {payload['slot_at']}.",
        "facts": [["Schedule", name], ["Missed slots", str(payload["missed_slots"])]],
        "links": [{"label": "Schedule", "path": f"/backoffice/schedules/{name}"}],
    }
