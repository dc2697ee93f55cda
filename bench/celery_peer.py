"""The peer the task runner is measured against: Celery, on the same Redis.

A worker entry module (``celery -A bench.celery_peer worker -P prefork -c 2``):
one no-op task whose result is stored in Redis, as a group's members are. Celery
is the ``bench`` extra of pyproject.toml, never a dependency of the app.
"""

from __future__ import annotations

import os

from celery import Celery

REDIS_URL = os.environ.get("BENCH_CELERY_REDIS_URL", "redis://127.0.0.1:6379/10")

app = Celery("bench_peer", broker=REDIS_URL, backend=REDIS_URL)
app.conf.update(
    task_serializer="json",
    result_serializer="json",
    accept_content=["json"],
    task_ignore_result=False,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="bench.peer.noop")
def noop(i: int) -> None:
    return None
