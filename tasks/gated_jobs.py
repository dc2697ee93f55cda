"""Huey's per-job revoke-key cleanup, skipped for jobs whose own gate refuses a revoked job.

After every job Huey deletes the job's revoke key, in case the job was revoked while it
ran: one more round trip to the queue's server per job (a write transaction on SqliteHuey)
for a key that almost never exists, the largest share of a no-op unit's queue work after
its dequeue (bench/RESULTS.md, bench.bench_throughput's notes). A job declared ``gated``
(``tasks.routing.job``) claims its work in the ledger before it works, and that claim
refuses a superseded or cancelled dispatch whatever the queue says; a revoke key such a
job leaves behind is removed at prune with its unit's other leftovers
(``taskrunner.queue_leftovers``). The check at dequeue is kept: a revoked job waiting in
the queue is still skipped there, without a ledger statement.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from huey import Huey

# The revoke key Huey is about to delete after the gated job this thread is executing.
_SKIPPED = threading.local()


def skip_revoke_cleanup(huey: Huey, job_names: Iterable[str]) -> None:
    """Make ``huey`` end the jobs named ``job_names`` without deleting their revoke key.

    Installed on the instance, so each queue keeps its driver's own Huey class.
    """
    gated = frozenset(job_names)
    huey.gated_jobs = gated  # type: ignore[attr-defined]
    execute, delete = huey._execute, huey.delete

    def execute_gated(task: Any, timestamp: Any) -> Any:
        if task.name not in gated:
            return execute(task, timestamp)
        # Saved and restored: an immediate queue runs a job enqueued by a job inside it.
        outer = getattr(_SKIPPED, "key", None)
        _SKIPPED.key = task.revoke_id
        try:
            return execute(task, timestamp)
        finally:
            _SKIPPED.key = outer

    def delete_unless_skipped(key: str) -> Any:
        if key is not None and key == getattr(_SKIPPED, "key", None):
            _SKIPPED.key = None  # once: any later delete of the key is someone's own
            return False
        return delete(key)

    huey._execute = execute_gated  # type: ignore[method-assign]
    huey.delete = delete_unless_skipped  # type: ignore[method-assign]
