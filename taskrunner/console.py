"""The on-call console's reads: consumers and what they run, queues, search.

Shapes shared by the pages and the JSON API (``/api/v1/backoffice/workers``,
``/queues``, ``/search``). Consumers' rows come from their own heartbeats
(``tasks.presence``); what a worker runs is named by its Huey task id, and a unit
job's id (``u<unit id>.<token>``) is resolved to the unit and its run here.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import select

from database import iso, utcnow
from taskrunner.dispatch import queue_of
from taskrunner.ledger import ledger
from taskrunner.registry import registry
from taskrunner.reports import run_summaries
from tasks.presence import LOST_AFTER_BEATS, ConsumerPresence
from tasks.queues import queues as queue_instances
from tasks.routing import QUEUE_NAMES

UNIT_TASK_ID = re.compile(r"^u(\d+)\.[0-9a-f]{32}$")


def _age(since: datetime | None, now: datetime) -> int | None:
    return max(0, int((now - since).total_seconds())) if since else None


def lost_before(now: datetime) -> datetime:
    """A consumer whose last beat is older than this is lost (three beats missed)."""
    beat = float(current_app.config["CONSUMER_HEARTBEAT_SECONDS"])
    return now - timedelta(seconds=LOST_AFTER_BEATS * beat)


def workers_running(now: datetime) -> tuple[set[str], set[str]]:
    """What live consumers' workers execute now, as ``host:pid`` (a periodic slot's
    claimer), and every host a consumer reports from, live or lost."""
    running, hosts, live_since = set(), set(), lost_before(now)
    for row in ledger.session.execute(select(ConsumerPresence)).scalars():
        hosts.add(row.host)
        if row.heartbeat_at >= live_since:
            running.update(f"{row.host}:{item.get('pid')}" for item in row.running or [])
    return running, hosts


def consumers() -> dict[str, Any]:
    """Every registered consumer, live or lost, with what its workers execute now."""
    now = utcnow()
    lost_before_now = lost_before(now)
    rows = list(
        ledger.session.execute(
            select(ConsumerPresence).order_by(ConsumerPresence.host, ConsumerPresence.started_at)
        ).scalars()
    )
    unit_ids = [
        unit_id
        for row in rows
        for item in [*(row.running or []), *(row.deaths or [])]
        if (unit_id := _unit_id(item)) is not None
    ]
    units = ledger.fleet.units_by_ids(unit_ids)
    items = []
    for row in rows:
        live = row.heartbeat_at >= lost_before_now
        running = []
        # A lost consumer's last report is history, not what runs now.
        for item in row.running or [] if live else []:
            match = UNIT_TASK_ID.match(str(item.get("task_id", "")))
            since = _parse(item.get("since"))
            running.append(
                {
                    "pid": item.get("pid"),
                    "task": item.get("task"),
                    "task_id": item.get("task_id"),
                    "since": iso(since),
                    "elapsed_seconds": _age(since, now),
                    "unit": units.get(int(match.group(1))) if match else None,
                }
            )
        items.append(
            {
                "id": row.id,
                "host": row.host,
                "pid": row.pid,
                "queues": list(row.queues or []),
                "worker_type": row.worker_type,
                "workers": row.workers,
                "started_at": iso(row.started_at),
                "heartbeat_at": iso(row.heartbeat_at),
                "heartbeat_age_seconds": _age(row.heartbeat_at, now),
                "state": "live" if live else "lost",
                "running": running,
                "worker_deaths": row.worker_deaths or 0,
                "deaths": [
                    {
                        "at": death.get("at"),
                        "pid": death.get("pid"),
                        "task_id": death.get("task_id") or None,
                        "unit": units.get(_unit_id(death)),
                    }
                    for death in row.deaths or []
                ],
            }
        )
    ledger.session.rollback()
    return {"consumers": items}


def _unit_id(item: dict[str, Any]) -> int | None:
    """The unit a worker's Huey task id names (``u<unit id>.<token>``), if it names one."""
    match = UNIT_TASK_ID.match(str(item.get("task_id", "")))
    return int(match.group(1)) if match else None


def last_ran_by(unit_id: int) -> dict[str, Any] | None:
    """The consumer and worker pid that ran this unit last, as consumers report it: a
    worker that died running it, or one running it now (or when its consumer was lost)."""
    found = None
    for row in ledger.session.execute(select(ConsumerPresence)).scalars():
        for item, died in [
            *((item, False) for item in row.running or []),
            *((item, True) for item in row.deaths or []),
        ]:
            if _unit_id(item) != unit_id:
                continue
            when = str(item.get("since") or item.get("at") or "")
            if found is None or when > found["at"]:
                found = {
                    "consumer": row.id,
                    "host": row.host,
                    "pid": item.get("pid"),
                    "at": when,
                    "died": died,
                }
    return found


def _parse(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.removesuffix("Z"))
    except ValueError:
        return None


def waiting_count(name: str) -> int | None:
    """Huey's own count of the jobs waiting in a queue; None when it cannot be read."""
    if name not in QUEUE_NAMES:
        # A type routed to a queue that does not exist (a typo): nothing can be enqueued
        # there, and asking the backend would read as the backend being down.
        return 0
    try:
        return int(queue_instances().huey(name).pending_count())
    except Exception:
        current_app.logger.warning("Queue %s could not be counted", name)
        return None


def queues() -> dict[str, Any]:
    """Per queue: waiting jobs, the oldest waiting unit, running, settled per minute/hour."""
    now = utcnow()
    active = ledger.fleet.active_by_type()
    throughput = ledger.throughput.finished_by_type(now)
    finished = throughput["types"]
    paused = ledger.actions.paused_types()
    blank = {
        "running": 0,
        "pending_units": 0,
        "oldest_pending_at": None,
        "completed_last_minute": 0,
        "failed_last_minute": 0,
        "completed_last_hour": 0,
        "failed_last_hour": 0,
    }
    per_queue: dict[str, dict[str, Any]] = {name: {**blank, "types": []} for name in QUEUE_NAMES}
    types = set(registry.types()) | set(active) | set(finished) | set(paused)
    for type_ in sorted(types):
        queue = per_queue.setdefault(queue_of(type_), {**blank, "types": []})
        a = active.get(type_, {})
        f = finished.get(type_, {})
        queue["running"] += a.get("running", 0)
        queue["pending_units"] += a.get("pending", 0)
        oldest = a.get("oldest_pending_at")
        if oldest is not None and (
            queue["oldest_pending_at"] is None or oldest < queue["oldest_pending_at"]
        ):
            queue["oldest_pending_at"] = oldest
        for key in ("completed", "failed"):
            queue[f"{key}_last_minute"] += f.get(f"{key}_minute", 0)
            queue[f"{key}_last_hour"] += f.get(f"{key}_hour", 0)
        pause = paused.get(type_)
        queue["types"].append(
            {
                "type": type_,
                "registered": registry.find(type_) is not None,
                "pending_units": a.get("pending", 0),
                "running": a.get("running", 0),
                "paused": pause is not None,
                "paused_at": iso(pause.paused_at) if pause else None,
                "paused_by": pause.paused_by if pause else None,
            }
        )
    items = []
    for name, queue in per_queue.items():
        oldest = queue.pop("oldest_pending_at")
        items.append(
            {
                "name": name,
                "waiting": waiting_count(name),
                "oldest_pending_at": iso(oldest),
                "oldest_pending_seconds": _age(oldest, now),
                **queue,
            }
        )
    ledger.session.rollback()
    as_of = throughput["as_of"]
    return {
        "queues": items,
        "paused_types": sorted(paused),
        "settled_as_of": iso(as_of),
        "settled_lag_seconds": _age(as_of, now),
    }


SECTIONS = ("runs", "units", "errors")
# A run's uuid as the pages show it (8 characters) or longer: unique, it opens the run.
RUN_PREFIX = re.compile(r"[0-9a-f]{8}[0-9a-f-]{0,28}")


def search(
    query: str, limit: int = 20, section: str | None = None, page: int = 1
) -> dict[str, Any]:
    """Runs by uuid or uuid prefix (any case), units by key prefix, failed units by error text;
    each counted (up to ``SEARCH_COUNT_CAP``) and paged, ``limit`` a page. ``section``: only
    that one, at ``page``.

    Tenants are looked up by the caller (the runner knows nothing of tenants).
    """
    text = query.strip()
    if not text:
        return {
            "query": "",
            "exact_run": None,
            "runs": [],
            "units": [],
            "errors": [],
            "counts": dict.fromkeys(SECTIONS, 0),
        }
    fleet = ledger.fleet
    reads = {
        "runs": (fleet.search_runs, fleet.count_runs),
        "units": (fleet.search_unit_keys, fleet.count_unit_keys),
        "errors": (fleet.search_errors, fleet.count_errors),
    }
    result: dict[str, Any] = {"query": text, "counts": {}}
    for name, (read, count) in reads.items():
        if section is not None and name != section:
            result[name], result["counts"][name] = [], 0
            continue
        found = read(text, limit, offset=(page - 1) * limit if name == section else 0)
        result[name] = found
        result["counts"][name] = (
            len(found) if len(found) < limit and name != section else count(text)
        )
    runs = result["runs"]
    unique = result["counts"]["runs"] == 1 and len(runs) == 1
    result["exact_run"] = (
        runs[0].uuid if unique and RUN_PREFIX.fullmatch(text.lower()) and section is None else None
    )
    result["runs"] = run_summaries(runs)
    ledger.session.rollback()
    return result
