"""Task types made for tests: their behaviour is controlled by the test."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any

from taskrunner.contract import TaskOptions, TaskReportableError, TaskUnit, UnitJob


class Broken(TaskReportableError):
    pass


class ControlledTask:
    """Units ``k1..kN``; a unit fails while its key is in ``failing``; executions are counted."""

    def __init__(self, type_: str = "tests.controlled", queue: str = "tasks") -> None:
        self._type = type_
        self.queue = queue
        self.failing: set[str] = set()
        self.executions: Counter[str] = Counter()
        self.during: Any = None  # called inside a unit's job, if set

    def type(self) -> str:
        return self._type

    def units(self, context: Mapping[str, Any]) -> Iterator[TaskUnit]:
        for i in range(1, int(context.get("units", 0)) + 1):
            yield TaskUnit(f"k{i}", tenant_id=i if context.get("tenants") else None)

    def make_job(self, unit: TaskUnit, context: Mapping[str, Any]) -> UnitJob:
        def job() -> None:
            self.executions[unit.key] += 1
            if self.during is not None:
                self.during(unit)
            if unit.key in self.failing:
                raise Broken(f"unit {unit.key} broke")

        return job

    def options(self) -> TaskOptions:
        return TaskOptions(queue=self.queue, stuck_after_minutes=30, timeout=60)
