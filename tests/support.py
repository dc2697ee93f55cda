"""Helpers shared by the tests; processes, waiting and databases come from ``harness``."""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

from harness import ROOT, ProcessPool, process_env, wait_for
from tasks.queues import queues

__all__ = [
    "ROOT",
    "Consumers",
    "drain",
    "huey_stop_interrupt",
    "process_env",
    "queued_jobs",
    "see_logs",
    "wait_for",
]

# The pinned JSON shapes of SPEC §9, shared by the CLI and the API tests.
RUN_KEYS = {"uuid", "type", "status", "initiator", "started_at", "finished_at", "units"}
COUNT_KEYS = {"total", "pending", "running", "completed", "failed", "skipped", "stale"}
UNIT_KEYS = {
    "unit_key",
    "tenant_id",
    "status",
    "attempts",
    "last_error",
    "kind",
    "started_at",
    "finished_at",
    "stale",
    "stale_reason",
}


def see_logs(class_pattern: str, prefix: str = "") -> re.Pattern[str]:
    """A stored reason of a non-domain error: its class and its error reference."""
    return re.compile(rf"{prefix}unhandled {class_pattern} — see logs, ref [0-9a-f]{{8}}")


def queued_jobs(name: str = "tasks") -> list:
    """Take every job waiting in queue ``name``, without running them.

    Counted first, never dequeued until one comes back empty: on Redis an empty dequeue
    waits a second for a job (Huey's blocking read), and the tests take hundreds.
    """
    huey = queues().huey(name)
    return [huey.dequeue() for _ in range(huey.pending_count())]


def drain(name: str = "tasks", limit: int | None = None) -> int:
    """Run the jobs waiting in queue ``name`` in this process, as a consumer's worker
    would, until none is left (or ``limit`` ran); return how many ran."""
    huey = queues().huey(name)
    done = 0
    while (limit is None or done < limit) and huey.pending_count():
        huey.execute(huey.dequeue())
        done += 1
    return done


def huey_stop_interrupt() -> KeyboardInterrupt:
    """The ``KeyboardInterrupt`` Huey's stop handler raises in a process worker it stops.

    Raised by Huey's own handler function (installed here only for the call), so its
    innermost frame is Huey's, as in a real worker that receives SIGTERM.
    """
    from types import SimpleNamespace

    from huey.consumer import ProcessEnvironment

    stops = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    saved = {signum: signal.getsignal(signum) for signum in stops}
    try:
        busy_worker = SimpleNamespace(huey=SimpleNamespace(_tasks_in_flight={"a task"}))
        ProcessEnvironment().init_child(busy_worker)
        handler = signal.getsignal(signal.SIGTERM)
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)
    try:
        handler(signal.SIGTERM, None)
    except KeyboardInterrupt as stop:
        return stop
    raise AssertionError("Huey's stop handler did not interrupt a busy worker")


class Consumers(ProcessPool):
    """Real consumers of the test's app, started as ``flask workers`` starts them."""

    def __init__(self, app, log_dir: Path) -> None:
        super().__init__(process_env(app), log_dir)

    def start(
        self,
        queue: str = "tasks",
        workers: int = 2,
        worker_type: str | None = None,
        periodic: bool = False,
        **env: str,
    ) -> subprocess.Popen:
        return self.start_consumer(queue, workers, worker_type, periodic, **env)
