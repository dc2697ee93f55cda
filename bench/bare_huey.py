"""Bare Huey on the benchmark's backend: the floor the task runner is measured against.

A consumer entry module (``huey_consumer bench.bare_huey.huey``), configured from
``REDIS_URL`` and ``DATABASE_URL`` like ours. ``noop`` does nothing. ``transactions``
does, on look-alike tables (``bench_runs`` and ``bench_units``, created ``LIKE`` the
ledger's with all their indexes), the same two statements the tracking wrapper pays
per unit on one kept autocommit connection, committed the same way: the gate's
conditional UPDATE with its EXISTS on the run, and the completion with its look for
another active unit. What remains between these figures and ours is the wrapper's own
overhead.
"""

from __future__ import annotations

import os

from huey import RedisHuey
from sqlalchemy import Connection, create_engine, text

QUEUE = "taskledger.bench-bare"

# The benchmark names its Redis explicitly; a consumer gets it as REDIS_URL like ours.
REDIS_URL = os.environ.get("BENCH_BARE_REDIS_URL") or os.environ.get("REDIS_URL")
huey = RedisHuey(QUEUE, url=REDIS_URL or "redis://127.0.0.1:6379/6", results=False, utc=True)

CREATE_TABLES = (
    "CREATE TABLE IF NOT EXISTS bench_runs (LIKE task_runs INCLUDING ALL)",
    "CREATE TABLE IF NOT EXISTS bench_units (LIKE task_run_units INCLUDING ALL)",
)

# Both commit as the wrapper's do by default (TASK_RUNNER_UNIT_COMMIT "fast"): without
# waiting for their WAL flush, set inside the statement (taskrunner/ledger/hot.py).
ASYNC_COMMIT = "AND set_config('synchronous_commit', 'off', true) = 'off' "
GATE = text(
    "UPDATE bench_units SET status = 'running', attempts = bench_units.attempts + 1, "
    "started_at = now(), heartbeat_at = now(), finished_at = NULL, stuck_notified_at = NULL, "
    "updated_at = now() "
    "WHERE bench_units.id = :unit_id AND bench_units.dispatch_token = :token "
    "AND bench_units.status = 'pending' AND bench_units.deleted_at IS NULL "
    f"{ASYNC_COMMIT}"
    "AND EXISTS (SELECT * FROM bench_runs WHERE bench_runs.id = bench_units.task_run_id "
    "AND bench_runs.status = 'running') "
    "RETURNING bench_units.task_run_id, bench_units.unit_key, bench_units.tenant_id, "
    "bench_units.attempts"
)
# The completion and its look for another active unit, in one statement (the ledger's
# COMPLETE_AND_LOOK on the look-alike table).
COMPLETE_AND_LOOK = text(
    "WITH done AS ("
    "UPDATE bench_units SET status = 'completed', finished_at = now(), updated_at = now(), "
    "last_error = NULL "
    "WHERE id = :unit_id AND dispatch_token = :token AND status = 'running' "
    f"{ASYNC_COMMIT}RETURNING id), "
    "other AS ("
    "SELECT id FROM bench_units WHERE EXISTS (SELECT 1 FROM done) "
    "AND task_run_id >= :run_id AND task_run_id <= :run_id "
    "AND status IN ('pending', 'running') AND deleted_at IS NULL AND id <> :unit_id "
    "ORDER BY task_run_id DESC, status DESC, id DESC LIMIT 1 FOR SHARE SKIP LOCKED) "
    "SELECT (SELECT count(*) FROM done) AS settled, (SELECT id FROM other) AS other_id"
)

_conn: Connection | None = None
_conn_pid: int | None = None


def connection() -> Connection:
    """One autocommit connection per worker process, made after the fork and kept."""
    global _conn, _conn_pid
    if _conn is None or _conn_pid != os.getpid():
        engine = create_engine(os.environ["DATABASE_URL"], hide_parameters=True)
        _conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
        _conn_pid = os.getpid()
    return _conn


@huey.task(name="bench.noop")
def noop(run_id: int, unit_id: int, token: str, horizon: float) -> None:
    return None


@huey.task(name="bench.transactions")
def transactions(run_id: int, unit_id: int, token: str, horizon: float) -> None:
    conn = connection()
    params = {"unit_id": unit_id, "token": token, "run_id": run_id}
    with conn.begin():
        claimed = conn.execute(GATE, params).first()
    if claimed is None:
        return
    with conn.begin():
        conn.execute(COMPLETE_AND_LOOK, params).one()
