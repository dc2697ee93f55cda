"""The routing table: every job's queue and timeout, and every queue's consumer.

A job is declared with ``@job(...)`` next to its code; the declaration is its
route. Queues are served by consumers whose worker type and limits come from
``QUEUES``: a queue whose jobs have a timeout runs process workers, because
Huey enforces a timeout (SIGALRM) only there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

QUEUE_NAMES = ("default", "tasks", "builder", "long-job")
PERIODIC_QUEUE = "default"  # periodic tasks are registered, and scheduled, here only


@dataclass(frozen=True)
class QueueSpec:
    name: str
    worker_type: str  # "process" enforces timeouts; "thread" only checks cooperatively
    workers: int  # per-queue mode: worker processes of this queue's consumer
    max_timeout: int  # the longest job timeout this queue's consumer is sized for
    lane: str  # lean mode: the one worker process that serves this queue with others
    # How a deploy stops this queue's consumer: "graceful" (SIGINT, running jobs finish,
    # waiting up to max_timeout) or "hand-back" (SIGTERM, running jobs are put back).
    stop: str

    @property
    def enforces_timeouts(self) -> bool:
        return self.worker_type in ("process", "greenlet")


# Short jobs share the "short" lane in lean mode; builder steps (up to 30 min) and long
# jobs (up to 5 h) share the "long" lane, so a long job never holds up a short one.
# A builder step is stopped gracefully: handing it back would pay for its model call twice.
QUEUES: dict[str, QueueSpec] = {
    "default": QueueSpec("default", "process", 2, 1800, "short", "hand-back"),
    "tasks": QueueSpec("tasks", "process", 2, 900, "short", "hand-back"),
    "builder": QueueSpec("builder", "process", 2, 1800, "long", "graceful"),
    "long-job": QueueSpec("long-job", "process", 1, 18000, "long", "hand-back"),
}


@dataclass(frozen=True)
class JobSpec:
    name: str
    fn: Callable[..., Any]
    queue: str | None  # None: registered on every queue (the unit wrapper)
    timeout: int
    retries: int = 0
    retry_delay: int = 0
    stuck_after_minutes: int | None = None
    wants_task: bool = False
    retry_backoff: float = 0  # each retry's delay is the previous one times this


@dataclass(frozen=True)
class PeriodicSpec:
    name: str
    fn: Callable[..., Any]
    schedule: Callable[..., bool]
    timeout: int


@dataclass
class Routes:
    jobs: dict[str, JobSpec] = field(default_factory=dict)
    periodic: dict[str, PeriodicSpec] = field(default_factory=dict)
    signals: list[tuple[tuple[str, ...], Callable[..., Any]]] = field(default_factory=list)


routes = Routes()


def job(
    name: str,
    *,
    queue: str | None,
    timeout: int,
    retries: int = 0,
    retry_delay: int = 0,
    stuck_after_minutes: int | None = None,
    wants_task: bool = False,
    retry_backoff: float = 0,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a Huey job: its name, queue and timeout (the route)."""
    if queue is not None and queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}")

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        routes.jobs[name] = JobSpec(
            name,
            fn,
            queue,
            timeout,
            retries,
            retry_delay,
            stuck_after_minutes,
            wants_task,
            retry_backoff,
        )
        return fn

    return decorator


def periodic(
    name: str, schedule: Callable[..., bool], *, timeout: int = 300
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a periodic job; periodic jobs run on the ``default`` queue's consumer."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        routes.periodic[name] = PeriodicSpec(name, fn, schedule, timeout)
        return fn

    return decorator


def on_signal(*signals: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Connect a handler to Huey signals of every queue, run inside an app context."""

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        routes.signals.append((signals, fn))
        return fn

    return decorator
