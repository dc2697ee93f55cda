"""Enqueueing unit jobs: one Huey task per unit, in chunks, after the commit.

A unit's Huey task id is derived from the unit and its dispatch token, so the
queued job of any pending unit can be revoked without storing Huey ids.
"""

from __future__ import annotations

import time
from datetime import timedelta

from flask import current_app
from huey import Huey
from huey.api import Task
from huey.signals import SIGNAL_ENQUEUED
from huey.storage import RedisStorage

from taskrunner.ledger import Dispatch, ledger
from taskrunner.redaction import register_domain_error
from taskrunner.types import TaskOptions
from tasks.queues import QueueConfigError, queues
from tasks.routing import TYPE_ROUTES

RUN_UNIT = "taskrunner.run_unit"

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


def enqueue_many(huey: Huey, tasks: list[Task]) -> None:
    """Enqueue a chunk of tasks: one round trip on Redis, one enqueue per task elsewhere.

    One LPUSH per task made dispatch a round trip per unit, slower than bare Huey's
    own enqueue (bench/RESULTS.md); a consumer pops them in the same order as before.
    """
    storage = huey.storage
    if huey.immediate or type(storage) is not RedisStorage or not tasks:
        for task in tasks:
            huey.enqueue(task)
        return
    messages = []
    for task in tasks:
        # What Huey.enqueue does per task, minus the write.
        if task.expires:
            task.resolve_expires(huey.utc)
        huey._emit(SIGNAL_ENQUEUED, task)
        messages.append(huey.serialize_task(task))
    storage.conn.lpush(storage.queue_key, *messages)


def revoke(units: list[tuple[int, str]], queue: str) -> None:
    huey = queues().huey(queue)
    for unit_id, token in units:
        huey.revoke_by_id(task_id(unit_id, token))
