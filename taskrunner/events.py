"""Typed task-runner events and their delivery from the outbox.

An event is written to the outbox in the transaction that made its transition
(see ``ledger``), and delivered after that commit by the process that made it
(``delivery``); the relay delivers what a crashed process left behind and what a
subscriber refused. Delivery is at least once: subscribers deduplicate on the
event ``id``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from flask import Flask, current_app

from taskrunner.redaction import redact
from tasks.interrupts import raise_if_stopping

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Event:
    name: ClassVar[str]

    def payload(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class RunStarted(Event):
    """A run was persisted and its units are being dispatched."""

    name: ClassVar[str] = "tasks.run.started"
    run_uuid: str
    type: str
    initiator: str
    units_total: int


@dataclass(frozen=True, slots=True)
class RunCompleted(Event):
    """A run closed with no failed unit. Recorded exactly once per close."""

    name: ClassVar[str] = "tasks.run.completed"
    run_uuid: str
    type: str
    units_total: int
    units_completed: int
    units_skipped: int


@dataclass(frozen=True, slots=True)
class RunFailed(Event):
    """A run closed with failures (completed_with_failures or failed) or was cancelled."""

    name: ClassVar[str] = "tasks.run.failed"
    run_uuid: str
    type: str
    status: str
    units_total: int
    units_completed: int
    units_failed: int
    units_skipped: int


@dataclass(frozen=True, slots=True)
class UnitFailed(Event):
    """A unit failed; ``reason`` is the same redacted text as the ledger's ``last_error``,
    ``kind`` the failure's kind: ``domain``, ``vendor``, ``crash`` or ``expired``."""

    name: ClassVar[str] = "tasks.unit.failed"
    run_uuid: str
    type: str
    unit_key: str
    tenant_id: int | None
    attempts: int
    reason: str
    kind: str = "domain"


@dataclass(frozen=True, slots=True)
class UnitStuck(Event):
    """A unit became stale (once per episode); ``reason`` says how."""

    name: ClassVar[str] = "tasks.unit.stuck"
    run_uuid: str
    type: str
    unit_key: str
    tenant_id: int | None
    reason: str


@dataclass(frozen=True, slots=True)
class ScheduleMissed(Event):
    """A schedule's slots passed unclaimed (once per episode): the first missed slot."""

    name: ClassVar[str] = "tasks.schedule.missed"
    schedule: str
    slot_at: str
    missed_slots: int


@dataclass(frozen=True, slots=True)
class ScheduleRecovered(Event):
    """A missed episode ended: a scheduler claimed and ran a slot of the schedule again (an
    operator's run now ends none)."""

    name: ClassVar[str] = "tasks.schedule.recovered"
    schedule: str
    missed_slots: int
    recovered_at: str


CATALOG: tuple[type[Event], ...] = (
    RunStarted,
    RunCompleted,
    RunFailed,
    UnitFailed,
    UnitStuck,
    ScheduleMissed,
    ScheduleRecovered,
)
# Events another package declares for itself (``declare``, at import): published through
# the same outbox and delivered the same way, named after that package, never ``tasks.``.
_DECLARED: list[type[Event]] = []


def declare(cls: type[Event]) -> type[Event]:
    """Add a package's own event class to the catalog (a class decorator, used at import)."""
    if cls.name in {e.name for e in catalog()}:
        raise ValueError(f"event {cls.name!r} is declared twice")
    _DECLARED.append(cls)
    return cls


def catalog() -> tuple[type[Event], ...]:
    """The runner's events, then those other packages declared."""
    return CATALOG + tuple(_DECLARED)


def known_events() -> frozenset[str]:
    """The names of every event one may subscribe to."""
    return frozenset(e.name for e in catalog())


Handler = Callable[[Mapping[str, Any]], None]
# Each app's subscribers: event name -> subscriber name -> handler. A subscriber's name
# keys its delivery state, so it is stable across processes: the handler's qualified
# name (``#2`` on a repeat).
SUBSCRIBERS = "taskrunner.subscribers"


def init_app(app: Flask) -> None:
    app.extensions[SUBSCRIBERS] = {}


def _subscribers() -> dict[str, dict[str, Handler]]:
    return current_app.extensions[SUBSCRIBERS]


def subscriber_name(handler: Handler) -> str:
    module = getattr(handler, "__module__", None)
    qualname = getattr(handler, "__qualname__", None) or type(handler).__qualname__
    return f"{module}.{qualname}" if module else qualname


def subscribe(name: str, handler: Handler) -> None:
    """Deliver the app's events of one name to ``handler`` (at least once; dedupe on ``id``)."""
    if name not in known_events():
        raise ValueError(f"unknown event {name!r}")
    handlers = _subscribers().setdefault(name, {})
    if handler in handlers.values():
        return
    base = key = subscriber_name(handler)
    repeat = 1
    while key in handlers:
        repeat += 1
        key = f"{base}#{repeat}"
    handlers[key] = handler


def subscribers(name: str) -> dict[str, Handler]:
    return dict(_subscribers().get(name, {}))


def hand_over(event: Mapping[str, Any], subscriber: str) -> str | None:
    """Give one event to one subscriber; None if it took it, else the redacted reason."""
    handler = _subscribers().get(event["name"], {}).get(subscriber)
    if handler is None:
        return f"no subscriber {subscriber} of {event['name']} in this process"
    try:
        handler(event)
    except BaseException as exc:
        # A subscriber's sys.exit() is its refusal: escaping, it would abort the delivery
        # before its commit, and the whole batch would come back to everyone every pass.
        raise_if_stopping(exc)
        logger.exception(
            "Subscriber %s refused event %s (%s)", subscriber, event["id"], event["name"]
        )
        return redact(exc)
    return None


def catalog_markdown() -> str:
    """The text of docs/EVENTS.md, generated from the event classes."""
    lines = [
        "# Events",
        "",
        "Generated by `flask events catalog` from `taskrunner/events.py`; do not edit.",
        "",
        "Every event carries `id` (unique, for deduplication), `name`, `at` and the payload",
        "below. Delivery is at least once, from a transactional outbox.",
        "",
    ]
    for cls in catalog():
        lines += [f"## `{cls.name}`", "", (cls.__doc__ or "").strip(), "", "| field | type |"]
        lines.append("|---|---|")
        for field in dataclasses.fields(cls):
            lines.append(f"| `{field.name}` | `{field.type}` |")
        lines.append("")
    return "\n".join(lines)
