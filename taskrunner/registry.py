"""The registry of task types: one per app, filled at app start.

Each app holds its own (``app.extensions["taskrunner.registry"]``), so two apps in one
process never see each other's types. ``registry`` is the registry of the app in
context, for the runner's modules that read it while they work.
"""

from __future__ import annotations

from typing import cast

from flask import Flask, current_app
from werkzeug.local import LocalProxy

from taskrunner.types import Refused, TaskDefinition

EXTENSION = "taskrunner.registry"


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


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION] = TaskTypeRegistry()


def registry_of(app: Flask) -> TaskTypeRegistry:
    return app.extensions[EXTENSION]


def current_registry() -> TaskTypeRegistry:
    """The registry of the app in context (outside one: Flask's RuntimeError)."""
    return registry_of(current_app)


registry = cast(TaskTypeRegistry, LocalProxy(current_registry))
