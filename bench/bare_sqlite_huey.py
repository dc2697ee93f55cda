"""Bare Huey on SqliteHuey: the embedded backend's floor (``bench.bare_sqlite_huey.huey``).

The consumer's file comes from ``BENCH_BARE_SQLITE_PATH``; the benchmark makes its own
instance on the same file with ``make`` (each of its runs uses a new file). ``noop``
does nothing. ``transactions`` does, on a copy of a migrated ledger file
(``BENCH_BARE_SQLITE_LEDGER``, every table and index of the ledger), the two write
transactions the tracking wrapper pays per unit on SQLite, with the sqlite3 module and
no wrapper: the gate's conditional UPDATE with its EXISTS on the run, and the completion
with its look for another active unit in its RETURNING (``taskrunner/ledger/hot.py``).
"""

from __future__ import annotations

import os
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from huey import SqliteHuey
from huey.storage import SqliteStorage

from database import began_in_short_waits

NAME = "taskledger.bench-bare"

GATE = (
    "UPDATE task_run_units SET status = 'running', attempts = attempts + 1, "
    "started_at = :now, heartbeat_at = :now, finished_at = NULL, stuck_notified_at = NULL, "
    "updated_at = :now "
    "WHERE id = :unit_id AND dispatch_token = :token AND status = 'pending' "
    "AND deleted_at IS NULL AND EXISTS (SELECT 1 FROM task_runs "
    "WHERE task_runs.id = task_run_units.task_run_id AND task_runs.status = 'running' "
    "AND NOT EXISTS (SELECT 1 FROM task_type_pauses WHERE task_type_pauses.type = task_runs.type)) "
    "RETURNING task_run_id, unit_key, tenant_id, attempts, "
    "(SELECT uuid FROM task_runs WHERE task_runs.id = task_run_units.task_run_id)"
)
COMPLETE_AND_LOOK = (
    "UPDATE task_run_units SET status = 'completed', finished_at = :now, updated_at = :now, "
    "last_error = NULL, reason_fold = NULL, failure_kind = NULL, stack = NULL "
    "WHERE id = :unit_id AND dispatch_token = :token AND status = 'running' "
    "RETURNING (SELECT other.id FROM task_run_units AS other WHERE other.task_run_id = :run_id "
    "AND other.status IN ('pending', 'running') AND other.deleted_at IS NULL "
    "AND other.id <> :unit_id LIMIT 1)"
)

_conn: sqlite3.Connection | None = None


def ledger_connection(path: str) -> sqlite3.Connection:
    """The ledger's pragmas (``database.py``); explicit transactions, as the wrapper's."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


def _write(conn: sqlite3.Connection, statement: str, params: dict[str, Any]) -> list[Any]:
    if not began_in_short_waits(conn):  # the wrapper's wait for the write lock
        conn.execute("BEGIN IMMEDIATE")
    rows = conn.execute(statement, params).fetchall()
    conn.execute("COMMIT")
    return rows


def seed(ledger: Path, n: int) -> tuple[int, str, list[int]]:
    """A running run of ``n`` pending units in ``ledger``: its id, token and units' ids."""
    token = uuid.uuid4().hex
    now = datetime.now(UTC).replace(tzinfo=None).isoformat(" ")
    conn = ledger_connection(str(ledger))
    conn.execute("BEGIN IMMEDIATE")
    run_id = conn.execute(
        "INSERT INTO task_runs (uuid, type, status, initiator, context, units_total, "
        "units_completed, units_failed, units_skipped, started_at, created_at, updated_at) "
        "VALUES (?, 'bench.bare', 'running', 'bench', '{}', ?, 0, 0, 0, ?, ?, ?)",
        (str(uuid.uuid4()), n, now, now, now),
    ).lastrowid
    conn.executemany(
        "INSERT INTO task_run_units (task_run_id, unit_key, status, attempts, dispatch_token, "
        "queued_at, created_at, updated_at) VALUES (?, ?, 'pending', 0, ?, ?, ?, ?)",
        ((run_id, f"bare-{i}", token, now, now, now) for i in range(n)),
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    found = conn.execute("SELECT id FROM task_run_units WHERE task_run_id = ?", (run_id,))
    ids = [row[0] for row in found]
    conn.close()
    return run_id, token, ids


def completed(ledger: Path, run_id: int) -> int:
    conn = ledger_connection(str(ledger))
    try:
        return conn.execute(
            "SELECT count(*) FROM task_run_units WHERE task_run_id = ? AND status = 'completed'",
            (run_id,),
        ).fetchone()[0]
    finally:
        conn.close()


class NormalSqliteStorage(SqliteStorage):
    """Huey's SQLite storage committing at ``synchronous=NORMAL``, as the runner's queue
    does (``tasks.huey_internals.WatchedSqliteStorage``): Huey's default waits for a
    flush on every enqueue and dequeue."""

    def _create_connection(self) -> sqlite3.Connection:
        conn = super()._create_connection()
        conn.execute("PRAGMA synchronous=NORMAL")
        return conn


def make(path: str, ledger: str | None = None, normal: bool = False) -> tuple[SqliteHuey, Any, Any]:
    """A SqliteHuey on ``path`` (Huey's default storage, or ``NormalSqliteStorage``), its
    no-op task and its two-transaction task on ``ledger``."""
    storage = {"storage_class": NormalSqliteStorage} if normal else {}
    instance = SqliteHuey(NAME, filename=path, timeout=30, results=False, utc=True, **storage)

    @instance.task(name="bench.noop")
    def noop(i: int) -> None:
        return None

    @instance.task(name="bench.transactions")
    def transactions(run_id: int, unit_id: int, token: str) -> None:
        global _conn
        if _conn is None:
            _conn = ledger_connection(ledger or "")
        now = datetime.now(UTC).replace(tzinfo=None).isoformat(" ")
        params = {"unit_id": unit_id, "token": token, "run_id": run_id, "now": now}
        if _write(_conn, GATE, params):
            _write(_conn, COMPLETE_AND_LOOK, params)

    return instance, noop, transactions


huey, noop, transactions = make(
    os.environ.get("BENCH_BARE_SQLITE_PATH", "/tmp/taskledger-bench-bare.sqlite3"),
    os.environ.get("BENCH_BARE_SQLITE_LEDGER"),
    normal=os.environ.get("BENCH_BARE_SQLITE_NORMAL") == "1",
)
