"""The worker's hot path: its statements, built once, and the connection it keeps.

The tracking wrapper spends two transactions per unit (the gate and the completion);
both are single Core statements on a connection the worker keeps, so a unit costs two
round trips and no checkout (``docs/architecture.md``, the hot path).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from flask import current_app
from sqlalchemy import bindparam, exists, func, select, text, update
from sqlalchemy.engine import Connection, Engine

from database import IMMEDIATE
from extensions import db
from taskrunner.ledger.records import ACTIVE, RunInfo, not_deleted
from taskrunner.models import TaskRun, TaskRunUnit, TaskTypePause
from taskrunner.types import RunStatus, UnitStatus

logger = logging.getLogger(__name__)
T = TypeVar("T")

# The tracking wrapper's three statements per unit, built once as Core statements with
# bound values: building ORM statements per unit cost more CPU than the database work
# (bench/RESULTS.md, tracked completion against bare Huey doing the same statements).
_units = TaskRunUnit.__table__
_runs = TaskRun.__table__
_pauses = TaskTypePause.__table__
# The pause check, one clause on the run's type (correlated to ``task_runs``): the gate,
# the throttle's pending check and the expiry carry it as is, whatever shape they take.
NOT_PAUSED = ~exists().where(_pauses.c.type == _runs.c.type)
GATE = (
    update(_units)
    .where(
        _units.c.id == bindparam("unit_id"),
        _units.c.dispatch_token == bindparam("token"),
        _units.c.status == str(UnitStatus.PENDING),
        not_deleted(_units.c),
        exists().where(
            _runs.c.id == _units.c.task_run_id,
            _runs.c.status == str(RunStatus.RUNNING),
            NOT_PAUSED,
        ),
    )
    .values(
        status=str(UnitStatus.RUNNING),
        attempts=_units.c.attempts + 1,
        started_at=bindparam("now"),
        heartbeat_at=bindparam("now"),
        finished_at=None,
        stuck_notified_at=None,
        updated_at=bindparam("now"),
    )
    .returning(
        _units.c.task_run_id,
        _units.c.unit_key,
        _units.c.tenant_id,
        _units.c.attempts,
        # The run's uuid, read in the same statement: what a per-process cache may key on
        # (an id names another run once the row it named is gone).
        select(_runs.c.uuid)
        .where(_runs.c.id == _units.c.task_run_id)
        .scalar_subquery()
        .label("run_uuid"),
    )
)
COMPLETE = (
    update(_units)
    .where(
        _units.c.id == bindparam("unit_id"),
        _units.c.dispatch_token == bindparam("token"),
        _units.c.status == str(UnitStatus.RUNNING),
    )
    .values(
        status=str(UnitStatus.COMPLETED),
        finished_at=bindparam("now"),
        updated_at=bindparam("now"),
        last_error=None,
        reason_fold=None,
        failure_kind=None,
        stack=None,
    )
)
# It walks ``ix_task_run_units_run_status`` backwards from the newest unit: units run
# roughly in id order, so a live running or pending unit is met before the entries its
# finished predecessors left in the index (dead until VACUUM). The ORDER BY on the
# index's columns, with the run as a range rather than an equality, keeps PostgreSQL on
# that index: with LIMIT 1 alone, misled by stale statistics, it walked the primary key
# or the whole table (measured in bench/).
ACTIVE_CHECK = (
    select(_units.c.id)
    .where(
        _units.c.task_run_id >= bindparam("run_id"),
        _units.c.task_run_id <= bindparam("run_id"),
        _units.c.status.in_(ACTIVE),
        not_deleted(_units.c),
    )
    .order_by(_units.c.task_run_id.desc(), _units.c.status.desc(), _units.c.id.desc())
    .limit(1)
)

# SQLite's second transaction, as one statement: the look rides in the completion's
# RETURNING. One writer at a time, so the look inside the write transaction is exact.
_other = _units.alias("other")
COMPLETE_AND_LOOK_SQLITE = COMPLETE.returning(
    select(_other.c.id)
    .where(
        _other.c.task_run_id == bindparam("run_id"),
        _other.c.status.in_(ACTIVE),
        not_deleted(_other.c),
        _other.c.id != bindparam("unit_id"),
    )
    .limit(1)
    .scalar_subquery()
    .label("other_id")
)

# The worker's second (and last) transaction on PostgreSQL, as one statement: complete
# the unit and look for another active unit of the run. The look share-locks the unit it
# finds and skips units another transaction holds. Whoever later settles the unit found
# must update it, so it waits for this commit and its own look sees this unit settled;
# a unit skipped as locked is being written right now by a transaction that will look
# after it (or it is this run's tail): then ``maybe_last`` sends this worker to
# ``finalize``, which looks again after the commit, under the run lock. Two workers
# settling the last two units can each skip the other's unit, but never each find the
# other's unit unlocked and settled in their snapshot: the run always closes, once.
_COMPLETE_AND_LOOK = (
    "WITH done AS ("
    "UPDATE task_run_units SET status = 'completed', finished_at = :now, updated_at = :now, "
    "last_error = NULL, reason_fold = NULL, failure_kind = NULL, stack = NULL "
    "WHERE id = :unit_id AND dispatch_token = :token AND status = 'running' {fast}"
    "RETURNING id), "
    "other AS ("
    "SELECT id FROM task_run_units "
    "WHERE EXISTS (SELECT 1 FROM done) "
    "AND task_run_id >= :run_id AND task_run_id <= :run_id "
    "AND status IN ('pending', 'running') AND deleted_at IS NULL AND id <> :unit_id "
    "ORDER BY task_run_id DESC, status DESC, id DESC LIMIT 1 FOR SHARE SKIP LOCKED) "
    "SELECT (SELECT count(*) FROM done) AS settled, (SELECT id FROM other) AS other_id"
)
# "fast" unit commits (TASK_RUNNER_UNIT_COMMIT, the default): the gate and the
# completion commit without waiting for their WAL flush (``synchronous_commit`` off for
# that one transaction, set inside its statement). A flush costs milliseconds here, more
# than everything else a unit does. What a server crash (not a restart) can lose is the
# last fraction of a second of these two transitions, never a close: the run's close
# commits synchronously and flushes every earlier record with it. A lost gate leaves the
# unit pending with its job gone ("never started"), a lost completion leaves it running
# ("worker lost"): the stuck sweep shows both and a retry settles them, as after a
# worker crash. "durable" waits for every flush.
_ASYNC_COMMIT = "AND set_config('synchronous_commit', 'off', true) = 'off' "
COMPLETE_AND_LOOK = text(_COMPLETE_AND_LOOK.format(fast=""))
COMPLETE_AND_LOOK_FAST = text(_COMPLETE_AND_LOOK.format(fast=_ASYNC_COMMIT))
GATE_FAST = GATE.where(func.set_config("synchronous_commit", "off", True) == "off")


# The worker's hot connection: a process worker's (its main thread's) is checked out
# once (one pre-ping) and kept across units, so the two statements of a unit cost two
# round trips. Thread workers (the I/O lane, many per process) check one out per
# transaction instead: kept, they would hold more than the pool has.
# PostgreSQL: autocommit, each statement is its own transaction. SQLite: every
# transaction on it starts with BEGIN IMMEDIATE (it writes).
_HOT = threading.local()


def fast_commits() -> bool:
    """Whether the hot path's PostgreSQL transactions skip their WAL flush (``_ASYNC_COMMIT``)."""
    return current_app.config.get("TASK_RUNNER_UNIT_COMMIT") != "durable"


def end_open_session() -> None:
    """Commit what the request's session holds open before a hot transaction.

    As before any write transaction here (on SQLite an older snapshot could no longer
    write). A job that never touched the session has none: nothing is made for the check.
    """
    if db.session.registry.has() and db.session().in_transaction():
        db.session.commit()


def _hot_connection() -> Connection:
    engine = db.engine
    slot = getattr(_HOT, "slot", None)
    if slot is not None:
        owner, pid, conn = slot
        if owner is engine and pid == os.getpid() and not conn.invalidated and not conn.closed:
            return conn
        _drop_hot_connection()
    conn = _checkout(engine)
    _HOT.slot = (engine, os.getpid(), conn)
    return conn


def _checkout(engine: Engine) -> Connection:
    conn = engine.connect()
    if engine.dialect.name == "sqlite":
        conn.execution_options(**{IMMEDIATE: True})
    else:
        conn.execution_options(isolation_level="AUTOCOMMIT")
    return conn


def _drop_hot_connection() -> None:
    slot = getattr(_HOT, "slot", None)
    _HOT.slot = None
    if slot is None:
        return
    _owner, pid, conn = slot
    if pid != os.getpid():
        return  # inherited over a fork: the parent's socket, never to be touched here
    try:
        conn.close()
    except Exception:  # a connection already broken is simply let go
        logger.debug("closing the hot connection failed", exc_info=True)


def hot_transaction(work: Callable[[Connection], T]) -> T:
    """Run ``work`` in one transaction on the hot connection; a failed one is dropped."""
    if threading.current_thread() is not threading.main_thread():
        with _checkout(db.engine) as conn, conn.begin():
            return work(conn)
    conn = _hot_connection()
    try:
        with conn.begin():
            return work(conn)
    except BaseException:
        # Lost, interrupted or mid-statement: the next unit starts on a fresh checkout.
        _drop_hot_connection()
        raise


def release_hot_connection() -> None:
    """Give the thread's hot connection back (a worker stopping, a test ending)."""
    _drop_hot_connection()


_RUN_INFO: dict[str, RunInfo] = {}


def run_info(run_id: int, run_uuid: str) -> RunInfo:
    """A run's type and context, read once per run per process.

    Keyed by the uuid the gate returned with the claim, never by the id: an id can name
    another run later (a SQLite rowid came back after a prune), a uuid never does.
    """
    cached = _RUN_INFO.get(run_uuid)
    if cached is not None:
        return cached
    row = db.session.execute(
        select(TaskRun.type, TaskRun.context).where(TaskRun.id == run_id)
    ).one()
    # A read left open would pin this session's SQLite snapshot to before the unit's
    # completion (written on the hot connection), and its finalize would not see it.
    db.session.rollback()
    info = RunInfo(run_id, run_uuid, row.type, dict(row.context or {}))
    if len(_RUN_INFO) > 4096:
        _RUN_INFO.clear()
    _RUN_INFO[run_uuid] = info
    return info


def forget_cached_runs() -> None:
    """Drop the per-process run cache."""
    _RUN_INFO.clear()
