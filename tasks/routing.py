"""The routing table: every job's queue and timeout, and every queue's consumer.

A job is declared with ``@job(...)`` next to its code; the declaration is its
route. Queues are served by consumers whose worker type and limits come from
``QUEUES``: a queue whose jobs have a timeout runs process workers, because
Huey enforces a timeout (SIGALRM) only there.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tasks.schedules import Schedule

QUEUE_NAMES = ("default", "tasks", "builder", "long-job", "io")
PERIODIC_QUEUE = "default"  # periodic tasks are registered, and scheduled, here only
DEFAULT_QUEUE = "tasks"  # a task type's units, unless its definition names another


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
    # "hard": the consumer stops a job at its timeout (process workers: SIGALRM). "soft":
    # thread workers, many per process, for jobs that wait on vendors; a thread cannot be
    # killed, so the wrapper raises the timeout in the job's thread at its next Python
    # instruction, which a waiting job reaches when its client's own timeout fires.
    timeouts: str = "hard"

    @property
    def enforces_timeouts(self) -> bool:
        return self.worker_type in ("process", "greenlet")

    @property
    def soft_timeouts(self) -> bool:
        return self.worker_type == "thread" and self.timeouts == "soft"


# Short jobs share the "short" lane in lean mode; builder steps (up to 30 min) and long
# jobs (up to 5 h) share the "long" lane, so a long job never holds up a short one.
# A builder step is stopped gracefully: handing it back would pay for its model call twice.
QUEUES: dict[str, QueueSpec] = {
    "default": QueueSpec("default", "process", 2, 1800, "short", "hand-back"),
    "tasks": QueueSpec("tasks", "process", 2, 900, "short", "hand-back"),
    "builder": QueueSpec("builder", "process", 2, 1800, "long", "graceful"),
    "long-job": QueueSpec("long-job", "process", 1, 18000, "long", "hand-back"),
    # The I/O lane: units that mostly wait on a vendor (statements, document providers).
    # 32 threads in one process wait side by side where two process workers would queue;
    # a stop hands their units back like the process lanes do.
    "io": QueueSpec("io", "thread", 32, 900, "short", "hand-back", timeouts="soft"),
}

# Task types whose units run on another queue than their definition names: the I/O
# lane for types that wait on vendors. ``TASK_RUNNER_TYPE_ROUTES`` ("type=queue,...")
# adds to it per deployment.
TYPE_ROUTES: dict[str, str] = {
    "diagnostics.vendor_probe": "io",
}


class RouteError(ValueError):
    """A deployment's route that sends no type to a queue; its message quotes the entry."""


def read_type_routes(raw: str) -> dict[str, str]:
    """``TASK_RUNNER_TYPE_ROUTES`` ("type=queue,..."), each entry checked: a queue no
    consumer serves would fail every run of its type at dispatch, and an entry without a
    type or a queue would be ignored unsaid."""
    routed = {}
    for entry in raw.split(","):
        if not entry.strip():
            continue
        name, equals, queue = (part.strip() for part in entry.partition("="))
        if not (name and equals and queue):
            raise RouteError(f"{entry.strip()!r} is not type=queue")
        if queue not in QUEUE_NAMES:
            raise RouteError(
                f"{entry.strip()!r} names no queue ({', '.join(QUEUE_NAMES[:-1])} or "
                f"{QUEUE_NAMES[-1]})"
            )
        routed[name] = queue
    return routed


def type_routes(config: Mapping[str, Any]) -> dict[str, str]:
    """``TYPE_ROUTES`` with the deployment's own (``TASK_RUNNER_TYPE_ROUTES``) over it."""
    return {**TYPE_ROUTES, **read_type_routes(config.get("TASK_RUNNER_TYPE_ROUTES") or "")}


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
    # Called with the job's arguments (and ``task``, for a job that wants it), in an app
    # context of the worker, when the consumer stops in the middle of the job (its work
    # can be handed back) or when Huey drops the job unrun past its ``expires``.
    on_stop: Callable[..., Any] | None = None
    on_expire: Callable[..., Any] | None = None
    # Its first statement claims its work in the ledger and refuses a superseded or
    # cancelled dispatch: Huey's revoke-key cleanup after it is skipped (tasks.gated_jobs).
    gated: bool = False


@dataclass(frozen=True)
class PeriodicSpec:
    name: str
    fn: Callable[..., Any]
    schedule: Schedule
    timeout: int
    starts: str | None = None  # the task type whose run the body starts, if it starts one
    grace: int | None = None  # seconds a slot may wait for its claim (default: the schedule's)


@dataclass
class Routes:
    jobs: dict[str, JobSpec] = field(default_factory=dict)
    periodic: dict[str, PeriodicSpec] = field(default_factory=dict)


routes = Routes()


@dataclass(frozen=True)
class JobHandle:
    """A declared job. ``enqueue`` sends it to the queue its route names; calling the
    handle itself is refused, so no call site runs a job inline and untracked by mistake.
    ``JobHandle(name)`` names a job declared elsewhere, to enqueue it only.
    """

    name: str
    fn: Callable[..., Any] | None = None

    def enqueue(self, *args: Any, queue: str | None = None, **kwargs: Any) -> Any:
        """Enqueue one execution (``queue`` only for a job served by every queue)."""
        from flask import current_app

        return current_app.extensions["queues"].task(self.name, queue)(*args, **kwargs)

    def waiting(self) -> list[tuple[Any, ...]]:
        """The arguments of this job's executions sent to its queue and not started yet:
        waiting their turn, or put back to run later."""
        from flask import current_app

        huey = current_app.extensions["queues"].huey(routes.jobs[self.name].queue or "default")
        return [
            task.args for task in (*huey.pending(), *huey.scheduled()) if task.name == self.name
        ]

    def call_local(self, *args: Any, **kwargs: Any) -> Any:
        """Run the job's body here and now: no queue, no retries (for tests)."""
        return self.fn(*args, **kwargs)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise TypeError(f"{self.name} is a job: use .enqueue(...), or .call_local(...) in tests")


def job(
    name: str, *, queue: str | None, timeout: int, **settings: Any
) -> Callable[[Callable[..., Any]], JobHandle]:
    """Declare a Huey job: its name, queue and timeout (the route), and its other
    ``JobSpec`` settings (retries, ``on_stop``, …); returns its handle."""
    if queue is not None and queue not in QUEUES:
        raise ValueError(f"unknown queue {queue!r}")

    def decorator(fn: Callable[..., Any]) -> JobHandle:
        routes.jobs[name] = JobSpec(name, fn, queue, timeout, **settings)
        return JobHandle(name, fn)

    return decorator


def periodic(
    name: str,
    schedule: Schedule,
    *,
    timeout: int = 300,
    starts: str | None = None,
    grace: int | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Declare a periodic job; it runs on the ``default`` queue, once per schedule slot.

    ``starts`` names the task type whose run the body starts (its body returns the run's
    handle, and takes ``initiator``); ``grace`` overrides how late a slot may be claimed.
    """

    def decorator(fn: Callable[..., Any]) -> Callable[..., Any]:
        routes.periodic[name] = PeriodicSpec(name, fn, schedule, timeout, starts, grace)
        return fn

    return decorator
