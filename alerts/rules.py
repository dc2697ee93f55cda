"""The condition rules, judged at a moment, and how every rule's judgement is written.

Conditions are read from the metrics scrape's figures (``metrics.read``, through the
contract) by ``evaluate``, a periodic job: stale units (``ALERT_STALE_UNITS`` for
``ALERT_STALE_MINUTES``), parked deliveries, a queue's long wait (its oldest pending unit
older than the queue's threshold) and lost consumers. The rules the outbox tells (a run
that ended with failures, a missed schedule) are its listeners (``listeners``); nothing
re-judges their episodes, so ``evaluate`` reminds them. A rule switched off in
``ALERT_RULES`` is judged no more: ``evaluate`` ends its episodes (``switch_off``).

The messages are written with the episodes and handed to the channels by a job
(``alerts.deliver``), never inside the process that judged: a slow receiver holds up
no worker's unit and no other subscriber of the event that caused the alert.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from flask import current_app

from alerts import settings as alert_settings
from alerts import summaries
from alerts.channels import configured
from alerts.episodes import NOT_DECLARED, Episodes, prune_resolved_before
from alerts.settings import RULES, AlertSettings
from database import utcnow
from taskrunner.contract import (
    Cron,
    Every,
    crontab,
    deliver_events,
    job,
    metrics,
    periodic,
    publishing,
)

# Rules told by events: their episodes end with an event, and are reminded by ``evaluate``.
EVENT_RULES = ("run_failed", "schedule_missed")


@job("alerts.deliver", queue="default", timeout=300, retries=0)
def deliver_job(event_ids: list[str]) -> None:
    """Hand the alerts written by a judgement to the channels' subscribers."""
    deliver_events(event_ids)


def judge_now(judge: Callable[[Episodes], None], now: datetime | None = None) -> list[str]:
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
    return judge_now(lambda episodes: _conditions(episodes, scrape), scrape.now)


def _conditions(episodes: Episodes, scrape: metrics.Scrape) -> None:
    settings: AlertSettings = episodes.settings
    on = settings.enabled
    episodes.switch_off(tuple(rule for rule in RULES if rule not in on))
    declared = {schedule.name for schedule in scrape.schedules}
    episodes.forget_keys("schedule_missed", declared, NOT_DECLARED)
    episodes.send_held_resolutions()
    episodes.remind(tuple(rule for rule in EVENT_RULES if rule in on))
    if "stale_units" in on:
        total, window = sum(scrape.stale_units.values()), settings.stale_minutes
        if settings.stale_units > 0 and total >= settings.stale_units:
            summary = summaries.stale_units(total, scrape.stale_units, settings.stale_units, window)
            episodes.raise_("stale_units", "all", summary, hold_minutes=window)
        else:
            episodes.clear("stale_units", "all", window)
    if "deliveries_parked" in on:
        parked = scrape.parked_deliveries
        if settings.parked_deliveries > 0 and parked >= settings.parked_deliveries:
            episodes.raise_("deliveries_parked", "all", summaries.parked_deliveries(parked))
        else:
            episodes.clear("deliveries_parked", "all", settings.clear_minutes)
    if "queue_long_wait" in on:
        for queue in scrape.queues:
            limit = settings.queue_wait_of(queue.name)
            if limit > 0 and queue.oldest_pending_seconds >= limit * 60:
                summary = summaries.queue_long_wait(queue, limit)
                episodes.raise_("queue_long_wait", queue.name, summary)
            else:
                episodes.clear("queue_long_wait", queue.name, settings.clear_minutes)
    if "consumer_lost" in on:
        lost = scrape.consumers.get("lost", 0)
        if lost:
            episodes.raise_("consumer_lost", "all", summaries.consumers_lost(scrape.consumers))
        else:
            episodes.clear("consumer_lost", "all", settings.clear_minutes)


@periodic("alerts.evaluate", Every("ALERT_EVALUATE_SECONDS"), timeout=120)
def evaluate_alerts() -> None:
    """Judge the condition rules: stale units, parked deliveries, long waits, lost consumers."""
    evaluate()


def prune(now: datetime | None = None) -> int:
    """Delete episodes resolved longer ago than ``TASK_RUNNER_RETENTION_DAYS`` (their
    messages and deliveries go with them); return how many."""
    days = current_app.config["TASK_RUNNER_RETENTION_DAYS"]
    return prune_resolved_before((now or utcnow()) - timedelta(days=days))


@periodic("alerts.prune", Cron(crontab(minute="27", hour="3")), timeout=600)
def prune_alerts() -> None:
    """Daily: forget alert episodes resolved before the runs' retention."""
    prune()
