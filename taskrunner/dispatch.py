"""Enqueueing unit jobs: one Huey task per unit, in chunks, after the commit.

A unit's Huey task id is derived from the unit and its dispatch token, so the
queued job of any pending unit can be revoked without storing Huey ids.
"""

from __future__ import annotations

import time
from datetime import timedelta

from flask import current_app

from taskrunner.ledger import Dispatch, ledger
from taskrunner.redaction import register_domain_error
from taskrunner.types import TaskOptions
from tasks.huey_internals import enqueue_many
from tasks.queues import QueueConfigError, queues
from tasks.routing import TYPE_ROUTES

RUN_UNIT = "taskrunner.run_unit"
# A throttled type's units share the Huey rate limit of this name and the type's.
RATE_LIMIT_PREFIX = "task-runner."

# A definition naming a queue that does not exist: its message is for the operator.
register_domain_error(QueueConfigError)


def queue_for(type_: str, options: TaskOptions) -> str:
    """The queue a type's units run on: the routing table's, else the definition's."""
    extra = current_app.config.get("TASK_RUNNER_TYPE_ROUTES") or ""
    for entry in filter(None, (item.strip() for item in extra.split(","))):
        name, _, queue = entry.partition("=")
        if name.strip() == type_ and queue.strip():
            return queue.strip()
    return TYPE_ROUTES.get(type_, options.queue)


def task_id(unit_id: int, token: str) -> str:
    return f"u{unit_id}.{token}"


def horizon_seconds() -> int:
    return current_app.config["TASK_RUNNER_RETRY_HORIZON_HOURS"] * 3600


def enqueue_unit(
    run_id: int,
    unit_id: int,
    token: str,
    type_: str,
    options: TaskOptions,
    horizon: float | None = None,
) -> None:
    wrapper = queues().task(RUN_UNIT, queue=queue_for(type_, options))
    if horizon is None:
        horizon = time.time() + horizon_seconds()
    wrapper.huey.enqueue(
        wrapper.s(
            run_id,
            unit_id,
            token,
            horizon,
            type_=type_,
            id=task_id(unit_id, token),
            timeout=options.timeout,
            expires=timedelta(seconds=max(1.0, horizon - time.time())),
        )
    )


def enqueue_dispatch(dispatch: Dispatch, options: TaskOptions) -> int:
    """Enqueue every pending unit holding the dispatch's token; return how many."""
    chunk = current_app.config["TASK_RUNNER_DISPATCH_CHUNK"]
    horizon = time.time() + horizon_seconds()
    wrapper = queues().task(RUN_UNIT, queue=queue_for(dispatch.type, options))
    huey = wrapper.huey
    expires = timedelta(seconds=horizon_seconds())
    sent, after = 0, 0
    while True:
        ids = ledger.transitions.dispatch_batch(dispatch, after, chunk)
        if not ids:
            return sent
        enqueue_many(
            huey,
            [
                wrapper.s(
                    dispatch.run_id,
                    unit_id,
                    dispatch.token,
                    horizon,
                    type_=dispatch.type,
                    id=task_id(unit_id, dispatch.token),
                    timeout=options.timeout,
                    expires=expires,
                )
                for unit_id in ids
            ],
        )
        sent += len(ids)
        after = ids[-1]


def revoke(units: list[tuple[int, str]], queue: str) -> None:
    huey = queues().huey(queue)
    for unit_id, token in units:
        huey.revoke_by_id(task_id(unit_id, token))
