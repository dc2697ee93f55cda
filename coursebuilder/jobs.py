"""The course builder's jobs: a step on the ``builder`` queue, and the recovery schedule.

A step may run for up to 30 minutes (a slow real model call), so it has its own queue
with process workers that enforce the timeout, and one try: a second try would pay for
the same call twice. A consumer stopping in the middle of a step hands it back.
"""

from __future__ import annotations

from typing import Any

from coursebuilder import steps
from coursebuilder.stages import STEP_JOB
from taskrunner.contract import Cron, crontab, job, periodic


def step_stopped(step_id: int, task: Any = None) -> None:
    """A consumer stopped mid-step (SIGTERM): queue the step again instead of losing it."""
    steps.hand_back(step_id)


@job(
    STEP_JOB,
    queue="builder",
    timeout=steps.STEP_TIMEOUT,
    retries=0,
    stuck_after_minutes=steps.STEP_STUCK_AFTER_MINUTES,
    wants_task=True,
    on_stop=step_stopped,
)
def run_step(step_id: int, task: Any = None) -> None:
    steps.execute_step(step_id, timeout=getattr(task, "timeout", None) or steps.STEP_TIMEOUT)


@periodic("coursebuilder.recover", Cron(crontab(minute="*/5")), timeout=300)
def recover_builder_runs() -> None:
    """Queue again the course-builder steps whose job or worker was lost."""
    steps.recover()
