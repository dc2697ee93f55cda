"""What the backoffice pages, the JSON API and the demo seed ask of the runner, and the only
way they reach it (as ``taskrunner.contract.operations``).

A page or an endpoint makes one call here and gets plain values back (runs are handed
over as they are, to be rendered, never queried). A read the ledger answers as the
page needs it is the ledger's own method, named here; what a page needs from several
reads is composed here (``run_detail``, ``run_list``, ``stale_units``, …). The HTML
view and the JSON view of one thing make the same call, and the ``*_json`` functions
only shape its answer (``reports``). Operator actions are the runner's services.

Reads that a long-lived caller (a live stream) repeats end their transaction before
they return, so no connection is held while the caller sleeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from flask import current_app

from taskrunner import console, delivery, reports, runner, schedule_actions
from taskrunner import schedules as schedule_service
from taskrunner.delivery import ParkedDelivery
from taskrunner.events import catalog
from taskrunner.ledger import (
    RUN_STATUSES,
    UNIT_STATUSES,
    Actor,
    Attention,
    Bucket,
    Comparison,
    ErrorGroup,
    InvalidCursor,
    Page,
    Throughput,
    is_uuid,
    ledger,
)
from taskrunner.models import OperatorAction, TaskRun
from taskrunner.registry import registry
from taskrunner.reports import comparison as comparison_json
from taskrunner.reports import csv_lines, json_chunks
from taskrunner.reports import error_groups as error_groups_json
from taskrunner.reports import runs_page as runs_json
from taskrunner.reports import schedule as schedule_json
from taskrunner.reports import schedules as schedules_json
from taskrunner.reports import units_page as units_json
from taskrunner.schedules import ScheduleView, SlotView, UnknownSchedule
from taskrunner.settle import settle_here
from taskrunner.types import NotRecorded, Refused, RunStatus

__all__ = [
    "RUN_STATUSES",
    "UNIT_STATUSES",
    "Actor",
    "Attention",
    "Bucket",
    "Comparison",
    "ErrorGroup",
    "InvalidCursor",
    "NotRecorded",
    "Page",
    "ParkedDelivery",
    "Refused",
    "RunDetail",
    "RunList",
    "ScheduleView",
    "SlotView",
    "UnknownSchedule",
    "StaleUnits",
    "Throughput",
    "UnitDetail",
    "comparison_json",
    "csv_lines",
    "json_chunks",
    "error_groups_json",
    "is_uuid",
    "runs_json",
    "schedule_json",
    "schedules_json",
    "settle_here",
    "units_json",
]

DETAIL_CAP = 20
# The JSON run (API and ``tasks status --json``): up to 100 failed and stale units and
# the run's newest 200 events, as ``run_detail(run, *JSON_CAPS)``.
JSON_CAPS = (reports.UNIT_LIST_CAP, 200)

# The ledger's reads that answer a page as they are (each raises ``InvalidCursor`` for a
# cursor that names nothing: the view's 400).
find_run = ledger.runs.find_run  # any case; None for a malformed or unknown uuid
runs_page = ledger.runs.runs_page
run_units = ledger.runs.run_units_page
run_events = ledger.runs.run_events
error_groups = ledger.errors.error_groups
error_groups_page = ledger.errors.error_groups_page
failed_tenants = ledger.errors.failed_tenants
unit_history = ledger.fleet.unit_history
failure_streak = ledger.fleet.failure_streak
stale_by_run = ledger.fleet.stale_counts_by_run
stale_units_page = ledger.fleet.stale_units_page  # without the per-run counts
count_pending_of_type = ledger.fleet.count_pending_of_type
count_retryable, last_action_id = ledger.actions.count_retryable, ledger.actions.last_action_id
attention = ledger.attention.attention
throughput = ledger.throughput.read
# Schedules: every declared one with its slots' states, and the operator actions on them.
schedules = schedule_service.schedules
schedule = schedule_service.schedule
schedules_missed = schedule_service.missed_count
schedule_unfinished = schedule_actions.unfinished
run_schedule_now = schedule_actions.run_now
pause_schedule = schedule_actions.pause
resume_schedule = schedule_actions.resume
schedule_actions = ledger.actions.on_schedule
consumers, queues, search = console.consumers, console.queues, console.search
# Operator actions, recorded with their ``Actor`` (who, web or CLI, from where); each
# raises ``Refused`` for what cannot be done.
retry, cancel, retry_stale = runner.retry, runner.cancel, runner.retry_stale
pause, resume = runner.pause, runner.resume


@dataclass(frozen=True, slots=True)
class RunList:
    """One page of the run list with the columns the page draws (keyed by ``run.id``)."""

    page: Page
    counts: dict[int, dict[str, int]]
    stale: dict[int, int]
    retried: dict[int, int]
    idle: dict[int, float]
    paused: set[str]
    types: list[str]


@dataclass(frozen=True, slots=True)
class RunDetail:
    """One run: counts, capped failed/skipped/stale lists, events (newest first), actions."""

    run: TaskRun
    counts: dict[str, int]
    failed: Page | None
    skipped: Page | None
    stale: Page | None
    events: list[dict[str, Any]]
    actions: list[OperatorAction]
    parked: list[ParkedDelivery]
    idle: float
    paused: bool
    retry_allowed: bool


@dataclass(frozen=True, slots=True)
class UnitDetail:
    run: TaskRun
    unit: dict[str, Any]
    events: list[dict[str, Any]]
    paused: bool
    retry_allowed: bool
    # The consumer and worker pid that ran it last (``console.last_ran_by``), if known.
    ran_by: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class StaleUnits:
    """Stale units across running runs, and (run uuid, type, count) per run."""

    page: Page
    by_run: list[tuple[str, str, int]]

    @property
    def total(self) -> int:
        return sum(n for _, _, n in self.by_run)


def is_registered(type_: str) -> bool:
    return registry.find(type_) is not None


def retry_allowed(run: TaskRun) -> bool:
    """Whether a retry of this run can be offered: not cancelled, its type registered."""
    return run.status != RunStatus.CANCELLED and is_registered(run.type)


def run_list(page: Page, type_: str | None = None) -> RunList:
    """The run list's columns for a page of ``runs_page``."""
    retried = ledger.attention.retried_runs(page.items)
    return RunList(
        page=page,
        counts=ledger.counts.live_counts(page.items),
        stale=ledger.attention.stale_per_run(page.items),
        retried=retried,
        # Only a retried run has idle time (closed, waiting for the retry).
        idle=ledger.attention.idle_by_run(list(retried)),
        paused=set(ledger.actions.paused_types()),
        types=ledger.runs.run_types(type_),
    )


def run_detail(run: TaskRun, cap: int = DETAIL_CAP, events: int = DETAIL_CAP) -> RunDetail:
    """Everything the run page and the run's JSON show, with lists capped at ``cap``."""
    stale, stale_total = ledger.runs.stale_preview(run, limit=cap)
    counts = {**ledger.counts.live_counts([run])[run.id], "stale": stale_total}
    return RunDetail(
        run=run,
        counts=counts,
        failed=run_units(run, status="failed", limit=cap) if counts["failed"] else None,
        skipped=run_units(run, status="skipped", limit=cap) if counts["skipped"] else None,
        stale=stale if stale_total else None,
        events=ledger.runs.run_events(run, limit=events),
        actions=ledger.runs.run_actions(run),
        parked=delivery.parked(run_id=run.id, limit=cap),
        idle=ledger.attention.idle_seconds(run),
        paused=ledger.actions.is_paused(run.type),
        retry_allowed=retry_allowed(run),
    )


def unit_detail(run: TaskRun, unit_key: str) -> UnitDetail | None:
    found = ledger.runs.find_unit(run, unit_key)
    if found is None:
        return None
    unit_id = ledger.runs.unit_id(run, found["unit_key"])
    return UnitDetail(
        run=run,
        unit=found,
        events=ledger.runs.unit_events(run, found["unit_key"]),
        paused=ledger.actions.is_paused(run.type),
        retry_allowed=retry_allowed(run),
        ran_by=console.last_ran_by(unit_id) if unit_id is not None else None,
    )


EXPORT_PAGE = 500


def export_units(
    run: TaskRun, reason: str | None = None, status: str | None = None
) -> Iterator[dict[str, Any]]:
    """Every unit of the run (``reason``: of one error group), as exported, page by page."""
    cursor = None
    while True:
        page = released(
            lambda cursor=cursor: ledger.runs.run_units_page(
                run, status=status, reason=reason, limit=EXPORT_PAGE, cursor=cursor
            )
        )
        yield from reports.export_rows(page.items)
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def stale_units(
    limit: int = 100, cursor: str | None = None, run: TaskRun | None = None
) -> StaleUnits:
    """Stale units across running runs (or of one), oldest first; raises ``InvalidCursor``."""
    page = ledger.fleet.stale_units_page(
        limit=limit, cursor=cursor, run_id=run.id if run is not None else None
    )
    # Past the last page too: stale units on the pages before are still there to count.
    by_run = ledger.fleet.stale_counts_by_run() if page.items or cursor else []
    if run is not None:
        by_run = [item for item in by_run if item[0] == run.uuid]
    return StaleUnits(page, by_run)


def compare(run: TaskRun, other_uuid: str | None = None) -> Comparison:
    """``run`` against ``other_uuid`` (default: the previous run of its type).

    Raises ``Refused`` when there is nothing to compare with: no earlier run of the type,
    an unknown run, or the run itself.
    """
    other = _other_run(run, other_uuid)
    return ledger.compare.compare(run, other)


def compare_counts(run: TaskRun) -> tuple[TaskRun, int, int] | None:
    """(the previous run of its type, newly failing, recovered); None without one."""
    other = ledger.compare.previous_run(run)
    if other is None:
        return None
    newly, recovered = ledger.compare.counts(run, other)
    return other, newly, recovered


def _other_run(run: TaskRun, other_uuid: str | None) -> TaskRun:
    if other_uuid is None:
        other = ledger.compare.previous_run(run)
        if other is None:
            raise Refused(f"no earlier run of {run.type} to compare run {run.uuid} with")
        return other
    other = ledger.runs.find_run(other_uuid)
    if other is None:
        raise Refused(f"no run {other_uuid[:40]}")
    if other.id == run.id:
        raise Refused("a run is compared with another run, not with itself")
    return other


def count_cancellable(run: TaskRun) -> int:
    counts = ledger.counts.live_counts([run])[run.id]
    return counts["pending"] + counts["running"]


def count_failed(run: TaskRun) -> int:
    return ledger.counts.live_counts([run])[run.id]["failed"]


def parked_events(limit: int = 100) -> tuple[list[ParkedDelivery], int, int]:
    """(newest parked deliveries, how many are parked, the attempts before parking)."""
    return (
        delivery.parked(limit=limit),
        delivery.count_parked(),
        current_app.config["TASK_RUNNER_EVENT_MAX_ATTEMPTS"],
    )


def event_names() -> list[str]:
    return [event.name for event in catalog()]


def released(read: Callable[[], Any]) -> Any:
    """``read()``, its transaction released at once: nothing is held between polls or pages."""
    try:
        return read()
    finally:
        ledger.session.rollback()  # no transaction held while the caller sleeps


# -- JSON shapes (README, "JSON output") of what the calls above return -------------------


def run_report(run: TaskRun) -> dict[str, Any]:
    """The JSON of one run (the API, ``tasks status RUN --json``): ``run_detail`` shaped."""
    return run_json(run_detail(run, *JSON_CAPS))


def run_json(detail: RunDetail) -> dict[str, Any]:
    """The run's JSON: failed and stale units, events oldest first."""
    return reports.run_detail(
        detail.run,
        detail.counts,
        failed_units=detail.failed.items if detail.failed else [],
        stale_units=detail.stale.items if detail.stale else [],
        events=list(reversed(detail.events)),
    )
