"""The step job: one language-model step on the ``builder`` queue.

A step may run for up to 30 minutes (a slow real model call), so it has its own
queue with process workers that enforce the timeout, and one try: a second try
would pay for the same call twice.
"""

from __future__ import annotations

from typing import Any

from huey import signals

from coursebuilder import service
from tasks.routing import job, on_signal


@job(
    service.STEP_JOB,
    queue="builder",
    timeout=service.STEP_TIMEOUT,
    retries=0,
    stuck_after_minutes=40,
    wants_task=True,
)
def run_step(step_id: int, task: Any = None) -> None:
    timeout = getattr(task, "timeout", None) or service.STEP_TIMEOUT
    service.execute_step(step_id, timeout=timeout)


@on_signal(signals.SIGNAL_INTERRUPTED)
def step_handed_back(signal: str, task: Any, queue: str) -> None:
    """A consumer stopped mid-step (SIGTERM): queue the step again instead of losing it."""
    if task.name == service.STEP_JOB:
        service.hand_back(task.args[0])
