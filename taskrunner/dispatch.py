"""Enqueueing unit jobs: one Huey task per unit, in chunks, after the commit.

A unit's Huey task id is derived from the unit and its dispatch token, so the
queued job of any pending unit can be revoked without storing Huey ids. Which queue
a type's jobs go to is decided once, here (``queue_of``): dispatch, revoke and the
console's queues page all ask it.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

from flask import current_app

from database import epoch
from taskrunner.ledger import Dispatch, ledger
from taskrunner.redaction import register_domain_error
from taskrunner.registry import registry
from tasks.huey_internals import enqueue_many, revoke_many
from tasks.queues import QueueConfigError, queues
from tasks.routing import DEFAULT_QUEUE, routes, type_routes

RUN_UNIT = "taskrunner.run_unit"
# A throttled type's units share the Huey rate limit of this name and the type's.
RATE_LIMIT_PREFIX = "task-runner."

# A definition naming a queue that does not exist: its message is for the operator.
register_domain_error(QueueConfigError)


def queue_of(type_: str) -> str:
    """The queue a run type's jobs run on.

    The deployment's route (``TASK_RUNNER_TYPE_ROUTES``), else the routing table's
    (``TYPE_ROUTES``), else its definition's queue. A single tracked job's runs are of
    its job's name: they run on that job's queue. Anything else: the default queue.
    """
    routed = type_routes(current_app.config).get(type_)
    if routed:
        return routed
    definition = registry.find(type_)
    if definition is not None:
        return definition.options().queue
    spec = routes.jobs.get(type_)
    return spec.queue if spec is not None and spec.queue else DEFAULT_QUEUE


def task_id(unit_id: int, token: str) -> str:
    return f"u{unit_id}.{token}"


def horizon_seconds() -> int:
    return current_app.config["TASK_RUNNER_RETRY_HORIZON_HOURS"] * 3600


def _unit_jobs(
    run_id: int, type_: str, token: str, unit_ids: list[int], horizon: float
) -> tuple[Any, list[Any]]:
    """The Huey instance and the unit jobs of these units, on their type's queue."""
    wrapper = queues().task(RUN_UNIT, queue=queue_of(type_))
    timeout = registry.get(type_).options().timeout
    expires = timedelta(seconds=max(1.0, horizon - epoch()))
    jobs = [
        wrapper.s(
            run_id,
            unit_id,
            token,
            horizon,
            type_=type_,
            id=task_id(unit_id, token),
            timeout=timeout,
            expires=expires,
        )
        for unit_id in unit_ids
    ]
    return wrapper.huey, jobs


def enqueue_unit(run_id: int, unit_id: int, token: str, type_: str, horizon: float) -> None:
    """Enqueue one unit's job again (a hand-back), within its original drain horizon."""
    huey, [job] = _unit_jobs(run_id, type_, token, [unit_id], horizon)
    huey.enqueue(job)


def enqueue_dispatch(dispatch: Dispatch) -> int:
    """Enqueue every pending unit holding the dispatch's token; return how many."""
    chunk = current_app.config["TASK_RUNNER_DISPATCH_CHUNK"]
    horizon = epoch() + horizon_seconds()
    sent, after = 0, 0
    while True:
        ids = ledger.transitions.dispatch_batch(dispatch, after, chunk)
        if not ids:
            return sent
        enqueue_many(*_unit_jobs(dispatch.run_id, dispatch.type, dispatch.token, ids, horizon))
        sent += len(ids)
        after = ids[-1]


def revoke(units: list[tuple[int, str]], type_: str) -> None:
    """Revoke the queued jobs of these (unit id, dispatch token) pairs of one run type."""
    huey = queues().huey(queue_of(type_))
    revoke_many(huey, (task_id(unit_id, token) for unit_id, token in units))


def unread_queue_file(type_: str) -> Path | None:
    """The SQLite queue file a type's jobs were just sent to, when no consumer reads it
    (``Queues.unread_file``): the CLI says so rather than report work nobody will see."""
    return queues().unread_file(queue_of(type_))
