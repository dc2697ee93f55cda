"""The rules: what the ledger knows, judged at a moment, turned into episodes.

Two kinds. Conditions are read from the metrics scrape's figures (``metrics.read``,
through the contract) by ``evaluate``, a periodic job: stale units (``ALERT_STALE_UNITS``
for ``ALERT_STALE_MINUTES``), parked deliveries, a queue's long wait (its oldest pending
unit older than the queue's threshold) and lost consumers. Events are told by the
outbox: a run that ended ``failed`` or ``completed_with_failures`` above its type's
threshold opens (or reminds) the type's episode, and its next clean run resolves it; a
schedule's ``tasks.schedule.missed`` opens the schedule's episode and
``tasks.schedule.recovered`` resolves it.

The messages are written with the episodes and handed to the channels by a job
(``alerts.deliver``), never inside the process that judged: a slow receiver holds up
no worker's unit and no other subscriber of the event that caused the alert.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from flask import current_app

from alerts import settings as alert_settings
from alerts.channels import configured
from alerts.content import duration_text
from alerts.episodes import Episodes, active_episode
from alerts.settings import AlertSettings
from database import utcnow
from taskrunner.contract import (
    Every,
    RunStatus,
    deliver_events,
    job,
    metrics,
    operations,
    periodic,
    plural,
    publishing,
)

ALERTING_RUN_STATUSES = (RunStatus.FAILED, RunStatus.COMPLETED_WITH_FAILURES)
# Rules told by events: their episodes end with an event, and are reminded by ``evaluate``.
EVENT_RULES = ("run_failed", "schedule_missed")


@job("alerts.deliver", queue="default", timeout=300, retries=0)
def deliver_job(event_ids: list[str]) -> None:
    """Hand the alerts written by a judgement to the channels' subscribers."""
    deliver_events(event_ids)


def _judge(judge: Any, now: datetime | None = None) -> list[str]:
    """Run ``judge(episodes)`` in one transaction with its messages; queue their delivery."""
    config = current_app.config
    settings = alert_settings.read(config)
    with publishing(deliver=False) as publisher:
        episodes = Episodes(publisher, settings, now or utcnow(), bool(configured(config)))
        judge(episodes)
    if episodes.event_ids:
        deliver_job.enqueue(episodes.event_ids)
    return episodes.event_ids


def evaluate(now: datetime | None = None) -> list[str]:
    """Judge every condition rule as of ``now``; return the ids of the alerts it wrote."""
    scrape = metrics.read(now)
    return _judge(lambda episodes: _conditions(episodes, scrape), scrape.now)


def _conditions(episodes: Episodes, scrape: Any) -> None:
    settings: AlertSettings = episodes.settings
    on = settings.enabled
    episodes.remind(EVENT_RULES)
    if "stale_units" in on:
        _stale(episodes, scrape.stale_units, settings)
    if "deliveries_parked" in on:
        parked = scrape.parked_deliveries
        if settings.parked_deliveries > 0 and parked >= settings.parked_deliveries:
            episodes.raise_("deliveries_parked", "all", _parked_summary(parked))
        else:
            episodes.clear("deliveries_parked", "all", settings.clear_minutes)
    if "queue_long_wait" in on:
        for queue in scrape.queues:
            limit = settings.queue_wait_of(queue.name)
            if limit > 0 and queue.oldest_pending_seconds >= limit * 60:
                episodes.raise_("queue_long_wait", queue.name, _queue_summary(queue, limit))
            else:
                episodes.clear("queue_long_wait", queue.name, settings.clear_minutes)
    if "consumer_lost" in on:
        lost = scrape.consumers.get("lost", 0)
        if lost:
            episodes.raise_("consumer_lost", "all", _consumers_summary(scrape.consumers))
        else:
            episodes.clear("consumer_lost", "all", settings.clear_minutes)


def _stale(episodes: Episodes, by_reason: Mapping[str, int], settings: AlertSettings) -> None:
    total = sum(by_reason.values())
    window = settings.stale_minutes
    if settings.stale_units > 0 and total >= settings.stale_units:
        summary = {
            "title": plural(total, "stale unit"),
            "text": f"{total} units have been stale (at least {settings.stale_units} "
            f"for {window:g} min): their worker died, or they run or wait too long.",
            "facts": [[reason.capitalize(), str(n)] for reason, n in sorted(by_reason.items())],
            "links": [{"label": "Stale units", "path": "/backoffice/stale-units"}],
        }
        episodes.raise_("stale_units", "all", summary, hold_minutes=window)
    else:
        episodes.clear("stale_units", "all", window)


def _parked_summary(parked: int) -> dict[str, Any]:
    return {
        "title": f"{plural(parked, 'event delivery', 'event deliveries')} parked",
        "text": "A subscriber kept refusing events; their deliveries wait for an operator.",
        "facts": [["Parked deliveries", str(parked)]],
        "links": [{"label": "Parked events", "path": "/backoffice/parked-events"}],
    }


def _queue_summary(queue: Any, limit: float) -> dict[str, Any]:
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


def _consumers_summary(states: Mapping[str, int]) -> dict[str, Any]:
    lost = states.get("lost", 0)
    return {
        "title": f"{plural(lost, 'consumer')} lost",
        "text": "A consumer stopped heartbeating: its host or process is gone.",
        "facts": [["Lost", str(lost)], ["Live", str(states.get("live", 0))]],
        "links": [{"label": "Workers", "path": "/backoffice/workers"}],
    }


def on_run_failed(event: Mapping[str, Any]) -> None:
    """A run closed with failures: its type's episode opens, or is reminded."""
    payload = event["payload"]
    settings = alert_settings.read(current_app.config)
    if "run_failed" not in settings.enabled or payload["status"] not in ALERTING_RUN_STATUSES:
        return
    threshold = settings.threshold_of(payload["type"])
    if not threshold.exceeded(payload["units_failed"], payload["units_total"]):
        return
    summary = run_summary(payload)

    def judge(episodes: Episodes) -> None:
        episode = episodes.active("run_failed", payload["type"])
        if episode is not None and (episode.summary or {}).get("run") == payload["run_uuid"]:
            return  # the same event handed over again
        episodes.raise_("run_failed", payload["type"], summary)

    _judge(judge)


def on_run_completed(event: Mapping[str, Any]) -> None:
    """A clean run of a type resolves its episode."""
    type_ = event["payload"]["type"]
    # Most clean runs have nothing to resolve: a read, not a write transaction, says so.
    if active_episode("run_failed", type_):
        _judge(lambda episodes: episodes.clear("run_failed", type_))


def run_summary(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A failed run as its page shows it: counts, duration, top error groups, tenants."""
    run = operations.find_run(payload["run_uuid"])
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
        "tenants": sum(g.tenants for g in groups),
        "links": [
            {"label": "Run", "path": path},
            {"label": "Error groups", "path": f"{path}/errors"},
        ],
    }


def on_schedule_missed(event: Mapping[str, Any]) -> None:
    """A schedule missed its slot: one episode per schedule until it recovers."""
    payload = event["payload"]
    if "schedule_missed" not in alert_settings.read(current_app.config).enabled:
        return
    name = payload["schedule"]
    summary = {
        "title": f"schedule {name} missed its slot",
        "text": f"The schedule {name} did not run at {payload['slot_at']}.",
        "facts": [["Schedule", name], ["Missed slots", str(payload["missed_slots"])]],
        "links": [{"label": "Schedule", "path": f"/backoffice/schedules/{name}"}],
    }
    _judge(lambda episodes: episodes.raise_("schedule_missed", name, summary))


def on_schedule_recovered(event: Mapping[str, Any]) -> None:
    """A schedule that runs again resolves its episode."""
    _judge(lambda episodes: episodes.clear("schedule_missed", event["payload"]["schedule"]))


LISTENERS = {
    "tasks.run.failed": on_run_failed,
    "tasks.run.completed": on_run_completed,
    "tasks.schedule.missed": on_schedule_missed,
    "tasks.schedule.recovered": on_schedule_recovered,
}


@periodic("alerts.evaluate", Every("ALERT_EVALUATE_SECONDS"), timeout=120)
def evaluate_alerts() -> None:
    """Judge the condition rules: stale units, parked deliveries, long waits, lost consumers."""
    evaluate()
