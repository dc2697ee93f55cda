"""The registry of task types: one per app, filled at app start.

Each app holds its own (``app.extensions["taskrunner.registry"]``), so two apps in one
process never see each other's types. ``registry`` is the registry of the app in
context, for the runner's modules that read it while they work.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, cast

from flask import Flask, current_app
from werkzeug.local import LocalProxy

from config import ConfigError
from security.echo import echo, printable
from taskrunner.types import Refused, TaskDefinition
from tasks.routing import QUEUE_NAMES, QUEUES, type_routes

EXTENSION = "taskrunner.registry"
TYPE_LENGTH = 120  # what task_runs.type holds: PostgreSQL refuses a longer one at insert
_SPACE = re.compile(r"\s")
TYPE_ECHO = 100  # longer than any dot-key a module would register


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
            # Quoted in part: a file pasted where a type goes is no 100,000-character line.
            raise Refused(f"task type {echo(type_, TYPE_ECHO)} is not registered") from None

    def find(self, type_: str) -> TaskDefinition | None:
        return self._types.get(type_)

    def types(self) -> list[str]:
        return sorted(self._types)

    def definitions(self) -> list[TaskDefinition]:
        return [self._types[t] for t in self.types()]


class DefinitionError(ConfigError):
    """A task type whose options the runner cannot honour: its module's mistake, found when
    the app starts (one error line, as for a setting), not by its first run."""


def check_definition(definition: TaskDefinition, config: Mapping[str, Any]) -> None:
    """Refuse a type registered already, one whose queue no consumer serves or whose timeout
    its queue does not serve, or one whose units would read stuck while they still run
    (its stuck threshold must be above its job timeout)."""
    type_, options = definition.type(), definition.options()
    if not (0 < len(type_) <= TYPE_LENGTH and printable(type_) and not _SPACE.search(type_)):
        raise DefinitionError(
            f"a task type is a name of 1 to {TYPE_LENGTH} characters without spaces or "
            f"control characters, not {echo(type_)}"
        )
    named = f"task type {type_!r}"  # a name of at most TYPE_LENGTH characters by now
    if registry.find(type_) is not None:
        # Replacing it would run the other module's jobs for every run of this type.
        raise DefinitionError(f"{named} is registered twice (each type once, by one module)")
    if options.queue not in QUEUE_NAMES:
        raise DefinitionError(
            f"{named}: queue {options.queue[:40]!r} is not one of {', '.join(QUEUE_NAMES)}"
        )
    # The queue it runs on (a route may send it to another) must stop it before its
    # consumer gives up on it: a builder consumer's graceful stop waits no longer.
    queue = type_routes(config).get(type_) or options.queue
    longest = QUEUES[queue].max_timeout
    if not 0 < options.timeout <= longest:
        raise DefinitionError(
            f"{named}: timeout ({options.timeout} s) must be 1 to {longest} s, "
            f"the longest its queue ({queue}) serves"
        )
    minutes = options.stuck_after_minutes or config["TASK_RUNNER_STUCK_AFTER_MINUTES"]
    if minutes * 60 <= options.timeout:
        raise DefinitionError(
            f"{named}: stuck_after_minutes ({minutes}) must be above its "
            f"timeout ({options.timeout} s), or its units would read stuck while they run"
        )


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION] = TaskTypeRegistry()


def registry_of(app: Flask) -> TaskTypeRegistry:
    return app.extensions[EXTENSION]


def current_registry() -> TaskTypeRegistry:
    """The registry of the app in context (outside one: Flask's RuntimeError)."""
    return registry_of(current_app)


registry = cast(TaskTypeRegistry, LocalProxy(current_registry))
