"""Enqueueing unit jobs: one Huey task per unit, in chunks, after the commit.

A unit's Huey task id is derived from the unit and its dispatch token, so the
queued job of any pending unit can be revoked without storing Huey ids.
"""

from __future__ import annotations

import time
from datetime import timedelta

from flask import current_app

from tasks.queues import queues
from taskrunner.contract import TaskOptions
from taskrunner.ledger import Dispatch, ledger

RUN_UNIT = "taskrunner.run_unit"


def task_id(unit_id: int, token: str) -> str:
    return f"u{unit_id}.{token}"


def horizon_seconds() -> int:
    return current_app.config["TASK_RUNNER_RETRY_HORIZON_HOURS"] * 3600


def enqueue_unit(run_id: int, unit_id: int, token: str, options: TaskOptions,
                 horizon: float | None = None) -> None:
    wrapper = queues().task(RUN_UNIT, queue=options.queue)
    if horizon is None:
        horizon = time.time() + horizon_seconds()
    wrapper.huey.enqueue(
        wrapper.s(run_id, unit_id, token, horizon, id=task_id(unit_id, token),
                  timeout=options.timeout,
                  expires=timedelta(seconds=max(1.0, horizon - time.time())))
    )


def enqueue_dispatch(dispatch: Dispatch, options: TaskOptions) -> int:
    """Enqueue every pending unit holding the dispatch's token; return how many."""
    chunk = current_app.config["TASK_RUNNER_DISPATCH_CHUNK"]
    horizon = time.time() + horizon_seconds()
    wrapper = queues().task(RUN_UNIT, queue=options.queue)
    huey = wrapper.huey
    expires = timedelta(seconds=horizon_seconds())
    sent, after = 0, 0
    while True:
        ids = ledger.dispatch_batch(dispatch, after, chunk)
        if not ids:
            return sent
        for unit_id in ids:
            huey.enqueue(
                wrapper.s(dispatch.run_id, unit_id, dispatch.token, horizon,
                          id=task_id(unit_id, dispatch.token), timeout=options.timeout,
                          expires=expires)
            )
        sent += len(ids)
        after = ids[-1]


def revoke(units: list[tuple[int, str]], queue: str) -> None:
    huey = queues().huey(queue)
    for unit_id, token in units:
        huey.revoke_by_id(task_id(unit_id, token))
