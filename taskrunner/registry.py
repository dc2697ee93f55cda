"""The registry of task types, filled at app start."""

from __future__ import annotations

from taskrunner.contract import Refused, TaskDefinition


class TaskTypeRegistry:
    def __init__(self) -> None:
        self._types: dict[str, TaskDefinition] = {}

    def register(self, definition: TaskDefinition) -> None:
        self._types[definition.type()] = definition

    def unregister(self, type_: str) -> None:
        self._types.pop(type_, None)

    def get(self, type_: str) -> TaskDefinition:
        try:
            return self._types[type_]
        except KeyError:
            raise Refused(f"task type {type_!r} is not registered") from None

    def find(self, type_: str) -> TaskDefinition | None:
        return self._types.get(type_)

    def types(self) -> list[str]:
        return sorted(self._types)

    def definitions(self) -> list[TaskDefinition]:
        return [self._types[t] for t in self.types()]


registry = TaskTypeRegistry()
