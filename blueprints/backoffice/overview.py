"""The run list's overview strip: units finished per minute and per hour, drawn as SVG.

Server-rendered rectangles with classes (no chart library, no inline style, so it
works under the CSP). It reads without colour: completed bars rise above the
baseline, failed bars hang below it, each bar carries its numbers in a ``<title>``,
and the totals are written out in words next to the chart.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from flask import current_app

from taskrunner.contract import operations

UP = 36.0  # height above the baseline for completed units
DOWN = 16.0  # below it for failed ones
GAP = 1.0


@dataclass(frozen=True, slots=True)
class Bar:
    x: float
    width: float
    up: float  # height of the completed bar (drawn upwards from the baseline)
    down: float  # height of the failed bar (drawn downwards)
    label: str
    completed: int
    failed: int


@dataclass(frozen=True, slots=True)
class Chart:
    title: str
    bars: list[Bar]
    width: float
    baseline: float
    height: float
    most_completed: int
    most_failed: int
    completed: int
    failed: int
    first: str
    last: str


def _height(n: int, most: int, room: float) -> float:
    if not n:
        return 0.0
    # A single unit still shows: at least one unit of height.
    return max(1.0, round(room * n / most, 2))


def chart(title: str, buckets: list[operations.Bucket], fmt: str, slot: float) -> Chart:
    """One strip: a bar per bucket, completed above the line, failed below."""
    most_completed = max((b.completed for b in buckets), default=0)
    most_failed = max((b.failed for b in buckets), default=0)
    bars = [
        Bar(
            x=i * slot,
            width=slot - GAP,
            up=_height(b.completed, most_completed, UP),
            down=_height(b.failed, most_failed, DOWN),
            label=b.start.strftime(fmt),
            completed=b.completed,
            failed=b.failed,
        )
        for i, b in enumerate(buckets)
    ]
    return Chart(
        title=title,
        bars=bars,
        width=len(buckets) * slot,
        baseline=UP,
        height=UP + DOWN,
        most_completed=most_completed,
        most_failed=most_failed,
        completed=sum(b.completed for b in buckets),
        failed=sum(b.failed for b in buckets),
        first=bars[0].label if bars else "",
        last=bars[-1].label if bars else "",
    )


def current() -> list[Chart]:
    """The strip as it is now, shared by the requests of the next few seconds.

    Every run list view draws it, and its numbers move by the minute: one read per
    ``OVERVIEW_CACHE_SECONDS`` per process is plenty (0: read on every request).
    """
    ttl = current_app.config["OVERVIEW_CACHE_SECONDS"]
    cache = current_app.extensions.setdefault("backoffice.overview", {})
    now = time.monotonic()
    if ttl <= 0 or cache.get("until", 0.0) <= now:
        cache["charts"] = charts(operations.throughput())
        cache["until"] = now + ttl
    return cache["charts"]


def charts(throughput: operations.Throughput) -> list[Chart]:
    return [
        chart("Last hour, per minute", throughput.minutes, "%H:%M", 5.0),
        chart("Last 24 hours, per hour", throughput.hours, "%H:00", 12.5),
    ]
