"""Task types of the operations tests, registered by a fixture in the test process and by
``init_app`` in consumer processes (``TASKLEDGER_EXTRA_MODULES=tests.ops_types``).

Their thresholds are fractions of a minute so that staleness shows within seconds.
``ops.slow`` and ``ops.held`` break the rule "stuck_after_minutes above the timeout" on
purpose: they must be able to hold a unit past its threshold on a live worker (as a job
whose timeout failed to stop it would). ``register_unchecked`` lets them in, past the
check that refuses such a type at registration.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

from taskrunner.contract import TaskDefinition, TaskOptions, TaskUnit, UnitJob, register
from taskrunner.registry import registry

SLOW = "ops.slow"
THROTTLED = "ops.throttled"
HELD = "ops.held"
RATE = 30


def _units(context: Mapping[str, Any]) -> Iterator[TaskUnit]:
    for i in range(1, int(context.get("units", 1)) + 1):
        yield TaskUnit(f"u{i}", tenant_id=None)


class SlowTask:
    """Each unit sleeps ``context["sleep"]`` seconds (unit ``context["long_key"]`` sleeps
    ``context["long_sleep"]``; unit ``context["sigterm_key"]`` sends SIGTERM to its own
    process first)."""

    def type(self) -> str:
        return SLOW

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        return _units(context)

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        seconds = float(context.get("sleep", 0))
        if unit.key == context.get("long_key"):
            seconds = float(context["long_sleep"])
        if unit.key == context.get("sigterm_key"):
            return lambda: (os.kill(os.getpid(), signal.SIGTERM), time.sleep(seconds))
        return lambda: time.sleep(seconds)

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=0.1, timeout=60)  # 6 s


class ThrottledTask:
    """Quick units limited to ``RATE`` per rate window."""

    def type(self) -> str:
        return THROTTLED

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        return _units(context)

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        return lambda: None

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", rate_per_minute=RATE, stuck_after_minutes=30, timeout=60)


class HeldTask:
    """Units run until the test releases them; ``hold`` says which executions block."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.hold = True
        self.started = threading.Semaphore(0)
        self.finished: list[str] = []

    def type(self) -> str:
        return HELD

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        return _units(context)

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        blocking = self.hold

        def job() -> None:
            self.started.release()
            if blocking:
                assert self.release.wait(30), "the test never released the unit"
            self.finished.append(unit.key)

        return job

    def options(self) -> TaskOptions:
        return TaskOptions(queue="tasks", stuck_after_minutes=0.02, timeout=60)  # 1.2 s


def register_unchecked(definition: TaskDefinition) -> None:
    """Register a type on the app in context without the registration's rule check."""
    registry.register(definition)


def init_app(app: Any) -> None:
    with app.app_context():
        register_unchecked(SlowTask())
        register(ThrottledTask())


EXTRA_MODULES = {"TASKLEDGER_EXTRA_MODULES": "tests.ops_types"}
