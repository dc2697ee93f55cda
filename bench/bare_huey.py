"""Bare Huey on the benchmark's backend: the floor the task runner is measured against.

A consumer entry module (``huey_consumer bench.bare_huey.huey``), configured from
``REDIS_URL`` and ``DATABASE_URL`` like ours. ``noop`` does nothing. ``transactions``
does, on look-alike tables (``bench_runs`` and ``bench_units``, created ``LIKE`` the
ledger's with all their indexes), the same three statements the tracking wrapper
pays per unit: the gate's conditional UPDATE with its EXISTS on the run, the
completing UPDATE, and the finalization's existence check. What remains between
these figures and ours is the wrapper's own overhead.
"""

from __future__ import annotations

import os

from huey import RedisHuey
from sqlalchemy import Engine, create_engine, text

QUEUE = "taskledger.bench-bare"

# The benchmark names its Redis explicitly; a consumer gets it as REDIS_URL like ours.
REDIS_URL = os.environ.get("BENCH_BARE_REDIS_URL") or os.environ.get("REDIS_URL")
huey = RedisHuey(QUEUE, url=REDIS_URL or "redis://127.0.0.1:6379/6", results=False, utc=True)

CREATE_TABLES = (
    "CREATE TABLE IF NOT EXISTS bench_runs (LIKE task_runs INCLUDING ALL)",
    "CREATE TABLE IF NOT EXISTS bench_units (LIKE task_run_units INCLUDING ALL)",
)

GATE = text(
    "UPDATE bench_units SET status = 'running', attempts = bench_units.attempts + 1, "
    "started_at = now(), heartbeat_at = now(), finished_at = NULL, stuck_notified_at = NULL, "
    "updated_at = now() "
    "WHERE bench_units.id = :unit_id AND bench_units.dispatch_token = :token "
    "AND bench_units.status = 'pending' AND bench_units.deleted_at IS NULL "
    "AND EXISTS (SELECT * FROM bench_runs WHERE bench_runs.id = bench_units.task_run_id "
    "AND bench_runs.status = 'running') "
    "RETURNING bench_units.task_run_id, bench_units.unit_key, bench_units.tenant_id, "
    "bench_units.attempts"
)
COMPLETE = text(
    "UPDATE bench_units SET status = 'completed', finished_at = now(), updated_at = now(), "
    "last_error = NULL WHERE bench_units.id = :unit_id AND bench_units.dispatch_token = :token "
    "AND bench_units.status = 'running'"
)
ACTIVE_CHECK = text(
    "SELECT 1 FROM bench_units WHERE bench_units.task_run_id = :run_id "
    "AND bench_units.status IN ('pending', 'running') AND bench_units.deleted_at IS NULL LIMIT 1"
)

_engine: Engine | None = None
_engine_pid: int | None = None


def engine() -> Engine:
    """One engine per worker process, made after the fork."""
    global _engine, _engine_pid
    if _engine is None or _engine_pid != os.getpid():
        _engine = create_engine(os.environ["DATABASE_URL"], pool_pre_ping=True)
        _engine_pid = os.getpid()
    return _engine


@huey.task(name="bench.noop")
def noop(run_id: int, unit_id: int, token: str, horizon: float) -> None:
    return None


@huey.task(name="bench.transactions")
def transactions(run_id: int, unit_id: int, token: str, horizon: float) -> None:
    db = engine()
    with db.begin() as conn:
        claimed = conn.execute(GATE, {"unit_id": unit_id, "token": token}).first()
    if claimed is None:
        return
    with db.begin() as conn:
        conn.execute(COMPLETE, {"unit_id": unit_id, "token": token})
    with db.connect() as conn:
        conn.execute(ACTIVE_CHECK, {"run_id": run_id}).first()
        conn.rollback()
