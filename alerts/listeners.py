"""The rules the outbox tells: a run's close, a schedule's missed slot and its recovery.

Each listener is a subscriber of the runner's event: it judges in one transaction with
the messages it writes (``rules.judge_now``) and never sends from the process that made
the transition. The schedules' events are subscribed to once their module declares them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flask import current_app

from alerts import settings as alert_settings
from alerts import summaries
from alerts.episodes import Episodes, active_episode
from alerts.rules import judge_now
from taskrunner.contract import RunStatus, operations

ALERTING_RUN_STATUSES = (RunStatus.FAILED, RunStatus.COMPLETED_WITH_FAILURES)


def on_run_failed(event: Mapping[str, Any]) -> None:
    """A run closed with failures: its type's episode opens, or is reminded."""
    payload = event["payload"]
    settings = alert_settings.read(current_app.config)
    if "run_failed" not in settings.enabled or payload["status"] not in ALERTING_RUN_STATUSES:
        return
    threshold = settings.threshold_of(payload["type"])
    if not threshold.exceeded(payload["units_failed"], payload["units_total"]):
        return
    # Read once: the summary and both judgements below compare this one row.
    run = operations.find_run(payload["run_uuid"])
    summary = summaries.run_failed(payload, run)

    def judge(episodes: Episodes) -> None:
        latest = episodes.latest("run_failed", payload["type"])
        told = (latest.summary or {}).get("run") if latest is not None else None
        # The same event handed over again (delivery is at least once), maybe after its
        # episode was resolved, or a failure older than the one on-call last heard of.
        if told and (told == payload["run_uuid"] or ended_before(run, operations.find_run(told))):
            return
        if cleared_since(payload["type"], run):
            return  # told late: a run of the type ended clean after it, the type is well
        episodes.raise_("run_failed", payload["type"], summary)

    judge_now(judge)


def on_run_completed(event: Mapping[str, Any]) -> None:
    """A clean run of a type resolves its episode, unless a failure is newer news."""
    payload = event["payload"]
    type_ = payload["type"]
    # Most clean runs have nothing to resolve: a read, not a write transaction, says so.
    if not active_episode("run_failed", type_):
        return

    def judge(episodes: Episodes) -> None:
        episode = episodes.active("run_failed", type_)
        failed = (episode.summary or {}).get("run") if episode is not None else None
        if failed and finished_before(payload["run_uuid"], failed):
            return  # handed over late: the failed run ended after this one
        episodes.clear("run_failed", type_)

    judge_now(judge)


def cleared_since(type_: str, run: Any) -> bool:
    """Whether the type's newest clean run ended after ``run``."""
    newest = operations.runs_page(limit=1, type_=type_, status=RunStatus.COMPLETED).items
    return bool(newest) and ended_before(run, newest[0])


def finished_before(run_uuid: str, other_uuid: str) -> bool:
    """Whether run ``run_uuid`` ended before run ``other_uuid`` did."""
    return ended_before(operations.find_run(run_uuid), operations.find_run(other_uuid))


def ended_before(run: Any, other: Any) -> bool:
    """Whether ``run`` ended before ``other`` did; a run the ledger no longer has (None,
    pruned) ended long before."""
    if run is None:
        return other is not None
    if other is None or run.finished_at is None or other.finished_at is None:
        return False
    return run.finished_at < other.finished_at


def on_schedule_missed(event: Mapping[str, Any]) -> None:
    """A schedule missed its slot: one episode per schedule until it recovers."""
    payload = event["payload"]
    if "schedule_missed" not in alert_settings.read(current_app.config).enabled:
        return
    summary = summaries.schedule_missed(payload)
    judge_now(lambda episodes: episodes.raise_("schedule_missed", payload["schedule"], summary))


def on_schedule_recovered(event: Mapping[str, Any]) -> None:
    """A schedule that runs again resolves its episode."""
    judge_now(lambda episodes: episodes.clear("schedule_missed", event["payload"]["schedule"]))


LISTENERS = {
    "tasks.run.failed": on_run_failed,
    "tasks.run.completed": on_run_completed,
    "tasks.schedule.missed": on_schedule_missed,
    "tasks.schedule.recovered": on_schedule_recovered,
}
