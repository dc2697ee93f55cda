"""The metric families of ``GET /metrics``: names, help texts and labels, in one place.

Every family is a gauge of what the ledger holds at the scrape (the runner's
``metrics.read``), never a counter kept by a process: the prune deletes old runs, so
counts of the ledger's rows may fall, and a family that falls is not a Prometheus
counter. The run-duration histogram is a window (the runs closed in the last 24 h):
read it with ``histogram_quantile`` as it is, not through ``rate()``.

Alert episodes open per rule (``taskledger_alert_episodes_open{rule}``) come from the
alerts' own tables (``alerts.operators.open_by_rule``), every rule with its count.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from taskrunner.contract import metrics

# Every family this endpoint exports (docs/operations.md and the shipped dashboard and
# rules name no other; tests/unit/test_metrics_shipped.py checks both).
FAMILIES = (
    "taskledger_units",
    "taskledger_runs",
    "taskledger_run_last_finished_timestamp_seconds",
    "taskledger_run_duration_seconds",
    "taskledger_stale_units",
    "taskledger_queue_waiting_jobs",
    "taskledger_queue_backend_up",
    "taskledger_queue_pending_units",
    "taskledger_queue_running_units",
    "taskledger_queue_oldest_pending_seconds",
    "taskledger_queue_consumers",
    "taskledger_consumers",
    "taskledger_parked_deliveries",
    "taskledger_paused_types",
    "taskledger_schedule_last_success_timestamp_seconds",
    "taskledger_schedule_next_due_timestamp_seconds",
    "taskledger_alert_episodes_open",
)


def unix(moment: datetime) -> float:
    """A naive UTC time (the ledger's) as Unix seconds."""
    return moment.replace(tzinfo=UTC).timestamp()


def families(scrape: metrics.Scrape) -> Iterator[Metric]:
    """The families of one scrape, in ``FAMILIES`` order."""
    units = GaugeMetricFamily(
        "taskledger_units",
        "Units of the runs the ledger keeps (pruned runs are gone), by type and status.",
        labels=["type", "status"],
    )
    for (type_, status), n in sorted(scrape.units.items()):
        units.add_metric([type_, status], n)
    yield units

    runs = GaugeMetricFamily(
        "taskledger_runs",
        "Runs the ledger keeps, by type and status.",
        labels=["type", "status"],
    )
    for (type_, status), n in sorted(scrape.runs.items()):
        runs.add_metric([type_, status], n)
    yield runs

    last = GaugeMetricFamily(
        "taskledger_run_last_finished_timestamp_seconds",
        "When the newest kept run of a type closed in a status (Unix time).",
        labels=["type", "status"],
    )
    for (type_, status), moment in sorted(scrape.last_finished.items()):
        last.add_metric([type_, status], unix(moment))
    yield last

    durations = HistogramMetricFamily(
        "taskledger_run_duration_seconds",
        "Duration from start to close of the runs that closed in the last 24 h, by type "
        "and closing status (a window, not a counter).",
        labels=["type", "status"],
    )
    for item in sorted(scrape.durations, key=lambda d: (d.type, d.status)):
        buckets = [
            (floatToGoString(bound), n)
            for bound, n in zip(scrape.duration_bounds, item.buckets, strict=True)
        ]
        durations.add_metric(
            [item.type, item.status], [*buckets, ("+Inf", item.count)], item.total_seconds
        )
    yield durations

    stale = GaugeMetricFamily(
        "taskledger_stale_units",
        "Stale units of running runs, by reason: worker lost, running too long, never started.",
        labels=["reason"],
    )
    for reason, n in scrape.stale_units.items():
        stale.add_metric([reason], n)
    yield stale

    yield from _queue_families(scrape)

    consumers = GaugeMetricFamily(
        "taskledger_consumers",
        "Registered queue consumers, live or lost (silent for three heartbeats).",
        labels=["state"],
    )
    for state, n in scrape.consumers.items():
        consumers.add_metric([state], n)
    yield consumers

    yield GaugeMetricFamily(
        "taskledger_parked_deliveries",
        "Event deliveries parked after a subscriber refused them too often.",
        value=scrape.parked_deliveries,
    )
    yield GaugeMetricFamily(
        "taskledger_paused_types",
        "Task types paused by an operator (their units wait without spending a try).",
        value=scrape.paused_types,
    )
    yield from _schedule_families(scrape)


def _queue_families(scrape: metrics.Scrape) -> Iterator[Metric]:
    waiting = GaugeMetricFamily(
        "taskledger_queue_waiting_jobs",
        "Jobs waiting in a queue, as its backend counts them (absent: it could not be read).",
        labels=["queue"],
    )
    pending = GaugeMetricFamily(
        "taskledger_queue_pending_units",
        "Pending units of running runs whose type runs on a queue.",
        labels=["queue"],
    )
    running = GaugeMetricFamily(
        "taskledger_queue_running_units",
        "Running units of running runs whose type runs on a queue.",
        labels=["queue"],
    )
    oldest = GaugeMetricFamily(
        "taskledger_queue_oldest_pending_seconds",
        "Age of a queue's oldest pending unit, paused types left out (0: none waits).",
        labels=["queue"],
    )
    served = GaugeMetricFamily(
        "taskledger_queue_consumers",
        "Live consumers serving a queue.",
        labels=["queue"],
    )
    for queue in scrape.queues:
        if queue.waiting is not None:
            waiting.add_metric([queue.name], queue.waiting)
        pending.add_metric([queue.name], queue.pending_units)
        running.add_metric([queue.name], queue.running_units)
        oldest.add_metric([queue.name], queue.oldest_pending_seconds)
        served.add_metric([queue.name], queue.live_consumers)
    yield waiting
    yield GaugeMetricFamily(
        "taskledger_queue_backend_up",
        "1 when the queue backend (Redis, or the SQLite or PostgreSQL queue) answered the "
        "count of every queue, else 0.",
        value=int(all(queue.waiting is not None for queue in scrape.queues)),
    )
    yield pending
    yield running
    yield oldest
    yield served


def _schedule_families(scrape: metrics.Scrape) -> Iterator[Metric]:
    success = GaugeMetricFamily(
        "taskledger_schedule_last_success_timestamp_seconds",
        "When a periodic schedule's newest slot that ran without raising ended "
        "(Unix time; absent: none yet).",
        labels=["schedule"],
    )
    due = GaugeMetricFamily(
        "taskledger_schedule_next_due_timestamp_seconds",
        "When the slot after a schedule's newest run is due (Unix time; in the past: "
        "overdue; absent: none ran yet).",
        labels=["schedule"],
    )
    for schedule in scrape.schedules:
        if schedule.last_run_at is not None:
            success.add_metric([schedule.name], unix(schedule.last_run_at))
        if schedule.next_due_at is not None:
            due.add_metric([schedule.name], unix(schedule.next_due_at))
    yield success
    yield due


def alert_family(open_by_rule: dict[str, int]) -> Metric:
    family = GaugeMetricFamily(
        "taskledger_alert_episodes_open",
        "Alert episodes open now (alerted, not yet resolved), by rule.",
        labels=["rule"],
    )
    for rule, n in sorted(open_by_rule.items()):
        family.add_metric([rule], n)
    return family


class _Scraped(Collector):
    def __init__(self, scrape: metrics.Scrape, open_by_rule: dict[str, int]) -> None:
        self.scrape = scrape
        self.open_by_rule = open_by_rule

    def collect(self) -> Iterator[Metric]:
        yield from families(self.scrape)
        yield alert_family(self.open_by_rule)


def render(
    scrape: metrics.Scrape, accept: str, open_by_rule: dict[str, int] | None = None
) -> tuple[bytes, str]:
    """The scrape in the format the client asked for (OpenMetrics or text 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scraped(scrape, open_by_rule or {}))
    try:
        encoder, content_type = choose_encoder(accept)
        return encoder(registry), content_type
    except (TypeError, ValueError):
        # A version or escaping the client library cannot read ("version=garbage"): the
        # text format every scraper reads. A fault of the scrape itself raises again here.
        encoder, content_type = choose_encoder("")
        return encoder(registry), content_type
