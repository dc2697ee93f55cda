"""The ledger: the only code that reads and writes the task-runner tables.

Every transition is one transaction; the events it causes are written to the
outbox inside it and delivered after the commit by the process that made it.
Worker-side writes are conditional updates (on the unit's status and current
dispatch token), so a late, duplicated or superseded job changes nothing.
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import (
    and_,
    bindparam,
    delete,
    exists,
    func,
    insert,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from database import is_sqlite, utcnow, write_transaction
from extensions import db
from taskrunner import events as ev
from taskrunner.contract import ACTIVE_UNIT, TERMINAL_RUN, Refused, RunStatus, TaskUnit, UnitStatus
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.queries import LedgerQueries
from taskrunner.registry import registry

UNIT_COLUMNS = (
    "task_run_id",
    "unit_key",
    "tenant_id",
    "status",
    "attempts",
    "dispatch_token",
    "queued_at",
    "created_at",
    "updated_at",
)
ACTIVE = tuple(str(s) for s in ACTIVE_UNIT)

# The tracking wrapper's three statements per unit, built once as Core statements with
# bound values: building ORM statements per unit cost more CPU than the database work
# (bench/RESULTS.md, tracked completion against bare Huey doing the same statements).
_units = TaskRunUnit.__table__
_runs = TaskRun.__table__
GATE = (
    update(_units)
    .where(
        _units.c.id == bindparam("unit_id"),
        _units.c.dispatch_token == bindparam("token"),
        _units.c.status == str(UnitStatus.PENDING),
        _units.c.deleted_at.is_(None),
        exists().where(
            _runs.c.id == _units.c.task_run_id, _runs.c.status == str(RunStatus.RUNNING)
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
    .returning(_units.c.task_run_id, _units.c.unit_key, _units.c.tenant_id, _units.c.attempts)
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
        _units.c.deleted_at.is_(None),
    )
    .order_by(_units.c.task_run_id.desc(), _units.c.status.desc(), _units.c.id.desc())
    .limit(1)
)


def new_token() -> str:
    return uuid_lib.uuid4().hex


def iso(value: datetime | None) -> str | None:
    return value.isoformat(timespec="seconds") + "Z" if value else None


@dataclass(frozen=True, slots=True)
class RunInfo:
    id: int
    uuid: str
    type: str
    context: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Claim:
    """A unit the gate let through: this job now owns it."""

    unit_id: int
    run: RunInfo
    unit: TaskUnit
    attempts: int
    token: str


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Units of a run that were (re)assigned one dispatch token and must be enqueued."""

    run_id: int
    run_uuid: str
    type: str
    token: str
    count: int


@dataclass(slots=True)
class PruneReport:
    """What one prune deleted; the uuids let the queues' leftovers of those runs go too."""

    runs: int = 0
    units: int = 0
    events: int = 0
    actions: int = 0
    queue_keys: int = 0
    run_uuids: list[str] = field(default_factory=list)
    dispatch_uuids: list[str] = field(default_factory=list)


def _redispatched(token: str, now: datetime) -> dict[str, Any]:
    """A unit back to pending under a new dispatch token: a new episode, nothing stale."""
    return {
        "status": UnitStatus.PENDING,
        "dispatch_token": token,
        "queued_at": now,
        "started_at": None,
        "heartbeat_at": None,
        "finished_at": None,
        "stuck_notified_at": None,
        "updated_at": now,
    }


def _chunks(items: Iterable[TaskUnit], size: int) -> Iterator[list[TaskUnit]]:
    chunk: list[TaskUnit] = []
    for item in items:
        chunk.append(item)
        if len(chunk) >= size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class TaskRunLedger(LedgerQueries):
    @property
    def session(self) -> Session:
        return db.session

    # -- transactions and events -------------------------------------------------

    @contextmanager
    def _transition(self) -> Iterator[list[dict[str, Any]]]:
        """One write transaction; events appended to the yielded list are delivered after commit."""
        outbox: list[dict[str, Any]] = []
        with write_transaction(self.session):
            yield outbox
        self._deliver(outbox)

    def _emit(self, outbox: list[dict[str, Any]], event: ev.Event, run_id: int | None) -> None:
        row = {
            "event_id": str(uuid_lib.uuid4()),
            "name": event.name,
            "task_run_id": run_id,
            "payload": event.payload(),
            "created_at": utcnow(),
        }
        self.session.execute(insert(OutboxEvent), [row])
        outbox.append(
            {
                "id": row["event_id"],
                "name": row["name"],
                "at": iso(row["created_at"]),
                "payload": row["payload"],
            }
        )

    def _deliver(self, outbox: list[dict[str, Any]]) -> None:
        if not outbox:
            return
        delivered = ev.deliver(outbox)
        if delivered:
            with write_transaction(self.session):
                self.session.execute(
                    update(OutboxEvent)
                    .where(OutboxEvent.event_id.in_(delivered))
                    .values(delivered_at=utcnow())
                )

    def relay_events(self, older_than_seconds: int = 60, limit: int = 500) -> int:
        """Deliver events a crashed process committed but never delivered."""
        cutoff = utcnow() - timedelta(seconds=older_than_seconds)
        rows = self.session.execute(
            select(OutboxEvent)
            .where(OutboxEvent.delivered_at.is_(None), OutboxEvent.created_at <= cutoff)
            .order_by(OutboxEvent.id)
            .limit(limit)
        ).scalars()
        pending = [self._event_dict(row) for row in rows]
        self.session.rollback()
        self._deliver(pending)
        return len(pending)

    @staticmethod
    def _event_dict(row: OutboxEvent) -> dict[str, Any]:
        return {
            "id": row.event_id,
            "name": row.name,
            "at": iso(row.created_at),
            "payload": row.payload,
        }

    # -- starting a run ------------------------------------------------------------

    def create_run(
        self,
        type_: str,
        context: dict[str, Any],
        initiator: str,
        units: Iterable[TaskUnit],
        chunk_size: int,
    ) -> Dispatch:
        """Insert the run and all its units in one transaction (bulk, in chunks)."""
        token = new_token()
        with self._transition() as outbox:
            now = utcnow()
            run = TaskRun(
                type=type_,
                status=RunStatus.RUNNING,
                initiator=initiator,
                context=context,
                started_at=now,
                created_by=initiator,
                updated_by=initiator,
            )
            self.session.add(run)
            self.session.flush()
            total = 0
            for chunk in _chunks(units, chunk_size):
                self._insert_units(run.id, chunk, token, now)
                total += len(chunk)
            run.units_total = total
            self._emit(outbox, ev.RunStarted(run.uuid, type_, initiator, total), run.id)
            dispatch = Dispatch(run.id, run.uuid, type_, token, total)
        return dispatch

    def _insert_units(self, run_id: int, chunk: list[TaskUnit], token: str, now: datetime) -> None:
        rows = [(run_id, u.key, u.tenant_id, "pending", 0, token, now, now, now) for u in chunk]
        if is_sqlite(self.session):
            self.session.execute(
                insert(TaskRunUnit), [dict(zip(UNIT_COLUMNS, row, strict=True)) for row in rows]
            )
            return
        # COPY is five times faster than executemany for 100,000 rows.
        raw = self.session.connection().connection.dbapi_connection
        with raw.cursor() as cursor:
            with cursor.copy(f"COPY task_run_units ({', '.join(UNIT_COLUMNS)}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)

    def dispatch_batch(self, dispatch: Dispatch, after_id: int, limit: int) -> list[int]:
        """Ids of the next pending units carrying ``dispatch.token``, in id order."""
        ids = list(
            self.session.execute(
                select(TaskRunUnit.id)
                .where(
                    TaskRunUnit.task_run_id == dispatch.run_id,
                    TaskRunUnit.dispatch_token == dispatch.token,
                    TaskRunUnit.status == UnitStatus.PENDING,
                    TaskRunUnit.id > after_id,
                )
                .order_by(TaskRunUnit.id)
                .limit(limit)
            ).scalars()
        )
        self.session.rollback()
        return ids

    def fail_undispatched(self, run_id: int, reason: str) -> None:
        """The wedge guard: dispatch broke after commit, so nothing pending may stay."""
        with self._transition() as outbox:
            self._lock_run(run_id)
            now = utcnow()
            self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.task_run_id == run_id,
                    TaskRunUnit.status == UnitStatus.PENDING,
                    TaskRunUnit.deleted_at.is_(None),
                )
                .values(
                    status=UnitStatus.FAILED, last_error=reason, finished_at=now, updated_at=now
                )
            )
            self._close_if_done(run_id, outbox)

    # -- executing a unit ----------------------------------------------------------

    def run_info(self, run_id: int) -> RunInfo:
        return _run_info(run_id)

    def claim(self, unit_id: int, token: str) -> Claim | None:
        """The gate: pending → running (+1 attempt) for the job holding the current token."""
        with write_transaction(self.session):
            row = (
                self.session.connection()
                .execute(GATE, {"unit_id": unit_id, "token": token, "now": utcnow()})
                .first()
            )
        if row is None:
            return None
        run = self.run_info(row.task_run_id)
        return Claim(unit_id, run, TaskUnit(row.unit_key, row.tenant_id), row.attempts, token)

    def complete(self, claim: Claim) -> bool:
        with write_transaction(self.session):
            result = self.session.connection().execute(
                COMPLETE, {"unit_id": claim.unit_id, "token": claim.token, "now": utcnow()}
            )
        return result.rowcount == 1

    def fail(self, claim: Claim, reason: str) -> bool:
        with self._transition() as outbox:
            now = utcnow()
            result = self.session.execute(
                self._owned(claim).values(
                    status=UnitStatus.FAILED, finished_at=now, updated_at=now, last_error=reason
                )
            )
            if result.rowcount != 1:
                return False
            self._emit(
                outbox,
                ev.UnitFailed(
                    claim.run.uuid,
                    claim.run.type,
                    claim.unit.key,
                    claim.unit.tenant_id,
                    claim.attempts,
                    reason,
                ),
                claim.run.id,
            )
        return True

    def record_attempt_error(self, claim: Claim, reason: str) -> None:
        """A single tracked job failed an attempt that Huey will retry: keep the reason."""
        with write_transaction(self.session):
            self.session.execute(self._owned(claim).values(last_error=reason, updated_at=utcnow()))

    def hand_back(self, unit_id: int, token: str) -> str | None:
        """A unit whose worker is stopping goes back to pending with a new token.

        Running (its job was interrupted) or still pending with this job's token (the
        interrupt came before the gate): either way the job is gone and a new one is due.
        A new episode starts, so a later stale state is notified again.
        """
        new = new_token()
        now = utcnow()
        with write_transaction(self.session):
            result = self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.id == unit_id,
                    TaskRunUnit.dispatch_token == token,
                    TaskRunUnit.status.in_(ACTIVE),
                )
                .values(**_redispatched(new, now))
            )
        return new if result.rowcount == 1 else None

    def heartbeat(self, unit_ids: Iterable[int]) -> None:
        ids = list(unit_ids)
        if not ids:
            return
        with write_transaction(self.session):
            self.session.execute(
                update(TaskRunUnit)
                .where(TaskRunUnit.id.in_(ids), TaskRunUnit.status == UnitStatus.RUNNING)
                .values(heartbeat_at=utcnow())
            )

    @staticmethod
    def _owned(claim: Claim):
        return (
            update(TaskRunUnit)
            .where(
                TaskRunUnit.id == claim.unit_id,
                TaskRunUnit.dispatch_token == claim.token,
                TaskRunUnit.status == UnitStatus.RUNNING,
            )
            .execution_options(synchronize_session=False)
        )

    # -- finalization --------------------------------------------------------------

    def has_active_units(self, run_id: int) -> bool:
        """An indexed existence check (``ACTIVE_CHECK``): its cost does not grow with the run."""
        found = self.session.connection().execute(ACTIVE_CHECK, {"run_id": run_id}).first()
        self.session.rollback()
        return found is not None

    def finalize(self, run_id: int) -> str | None:
        """Close the run if no unit is pending or running; return the status it closed with."""
        if self.has_active_units(run_id):
            return None
        with self._transition() as outbox:
            self._lock_run(run_id)
            return self._close_if_done(run_id, outbox)

    def _lock_run(self, run_id: int) -> TaskRun:
        """Lock the run row (SQLite: the write transaction already holds the database lock)."""
        stmt = select(TaskRun).where(TaskRun.id == run_id)
        if not is_sqlite(self.session):
            stmt = stmt.with_for_update()
        run = self.session.execute(stmt.execution_options(populate_existing=True)).scalar_one()
        return run

    def _counts(self, run_id: int) -> dict[str, int]:
        rows = self.session.execute(
            select(TaskRunUnit.status, func.count())
            .where(TaskRunUnit.task_run_id == run_id, TaskRunUnit.deleted_at.is_(None))
            .group_by(TaskRunUnit.status)
        ).all()
        counts = {str(s): 0 for s in UnitStatus}
        counts.update({status: n for status, n in rows})
        return counts

    def _close_if_done(self, run_id: int, outbox: list[dict[str, Any]]) -> str | None:
        """Inside a transaction holding the run lock."""
        run = self.session.get(TaskRun, run_id)
        if run.status != RunStatus.RUNNING:
            return None
        counts = self._counts(run_id)
        if counts["pending"] or counts["running"]:
            return None
        return self._close(run, counts, None, outbox)

    def _close(
        self,
        run: TaskRun,
        counts: dict[str, int],
        status: str | None,
        outbox: list[dict[str, Any]],
    ) -> str:
        if status is None:
            if not counts["failed"]:
                status = RunStatus.COMPLETED
            elif counts["completed"]:
                status = RunStatus.COMPLETED_WITH_FAILURES
            else:
                status = RunStatus.FAILED
        run.status = status
        run.units_total = sum(counts.values())
        run.units_completed = counts["completed"]
        run.units_failed = counts["failed"]
        run.units_skipped = counts["skipped"]
        run.finished_at = utcnow()
        if status == RunStatus.COMPLETED:
            event: ev.Event = ev.RunCompleted(
                run.uuid, run.type, run.units_total, run.units_completed, run.units_skipped
            )
        else:
            event = ev.RunFailed(
                run.uuid,
                run.type,
                str(status),
                run.units_total,
                run.units_completed,
                run.units_failed,
                run.units_skipped,
            )
        self._emit(outbox, event, run.id)
        return str(status)

    # -- operator actions ----------------------------------------------------------

    def get_run(self, run_uuid: str) -> TaskRun:
        run = self.find_run(run_uuid)
        if run is None:
            raise Refused(f"no run {run_uuid}")
        return run

    def find_run(self, run_uuid: str) -> TaskRun | None:
        try:
            uuid_lib.UUID(run_uuid)
        except (ValueError, AttributeError, TypeError):
            return None
        return self.session.execute(
            select(TaskRun).where(TaskRun.uuid == run_uuid, TaskRun.deleted_at.is_(None))
        ).scalar_one_or_none()

    def count_retryable(self, run: TaskRun, failed_only: bool, stale_only: bool = False) -> int:
        return self.session.execute(
            select(func.count()).where(self._retryable(run.id, failed_only, stale_only))
        ).scalar_one()

    def _retryable(self, run_id: int, failed_only: bool, stale_only: bool = False):
        clauses = [TaskRunUnit.task_run_id == run_id, TaskRunUnit.deleted_at.is_(None)]
        if stale_only:
            clauses.append(self.stale_reason_expr(utcnow()).is_not(None))
        elif failed_only:
            clauses.append(TaskRunUnit.status == UnitStatus.FAILED)
        else:
            clauses.append(
                or_(
                    TaskRunUnit.status.in_((UnitStatus.FAILED, UnitStatus.PENDING)),
                    and_(
                        TaskRunUnit.status == UnitStatus.RUNNING,
                        self.stale_reason_expr(utcnow()).is_not(None),
                    ),
                )
            )
        return and_(*clauses)

    def reopen_for_retry(
        self,
        run_uuid: str,
        failed_only: bool,
        actor: str,
        source: str,
        address: str | None,
        stale_only: bool = False,
    ) -> Dispatch:
        """Give the retryable units a new dispatch token and put the run back to running."""
        token = new_token()
        with self._transition():
            run = self.get_run(run_uuid)
            if (run.context or {}).get("dispatch_uuid"):
                raise Refused(
                    f"run {run.uuid} is a single tracked job ({run.type}); its retries "
                    "belong to its own queue, not to tasks retry"
                )
            if registry.find(run.type) is None:
                raise Refused(
                    f"run {run.uuid} is of type {run.type!r}, which is not a registered task "
                    "type; its retries belong to its own queue"
                )
            if run.status == RunStatus.CANCELLED:
                raise Refused(f"run {run.uuid} is cancelled")
            run = self._lock_run(run.id)
            now = utcnow()
            result = self.session.execute(
                update(TaskRunUnit)
                .where(self._retryable(run.id, failed_only, stale_only))
                .values(**_redispatched(token, now))
                .execution_options(synchronize_session=False)
            )
            count = result.rowcount
            if count == 0:
                raise Refused(f"run {run.uuid} has nothing to retry")
            run.status = RunStatus.RUNNING
            run.finished_at = None
            run.updated_by = actor
            self._record_action(
                run.id,
                "retry",
                actor,
                source,
                address,
                {"failed_only": failed_only, "stale_only": stale_only, "units": count},
            )
        return Dispatch(run.id, run.uuid, run.type, token, count)

    def cancel(
        self, run_uuid: str, actor: str, source: str, address: str | None
    ) -> tuple[list[tuple[int, str]], int]:
        """Cancel a running run: its pending and running units are skipped.

        Returns (unit id, dispatch token) of the units whose queued jobs can be revoked,
        and how many units were skipped.
        """
        with self._transition() as outbox:
            run = self._lock_run(self.get_run(run_uuid).id)
            if run.status != RunStatus.RUNNING:
                raise Refused(f"run {run.uuid} is {run.status}, not running")
            queued = [
                (row.id, row.dispatch_token)
                for row in self.session.execute(
                    select(TaskRunUnit.id, TaskRunUnit.dispatch_token).where(
                        TaskRunUnit.task_run_id == run.id,
                        TaskRunUnit.status == UnitStatus.PENDING,
                        TaskRunUnit.deleted_at.is_(None),
                    )
                )
            ]
            now = utcnow()
            skipped = self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.task_run_id == run.id,
                    TaskRunUnit.status.in_(ACTIVE),
                    TaskRunUnit.deleted_at.is_(None),
                )
                .values(
                    status=UnitStatus.SKIPPED,
                    finished_at=now,
                    updated_at=now,
                    last_error="cancelled by operator",
                )
                .execution_options(synchronize_session=False)
            ).rowcount
            run.updated_by = actor
            self._record_action(
                run.id, "cancel", actor, source, address, {"units_skipped": skipped}
            )
            self._close(run, self._counts(run.id), RunStatus.CANCELLED, outbox)
        return queued, skipped

    def _record_action(
        self,
        run_id: int | None,
        action: str,
        actor: str,
        source: str,
        address: str | None,
        detail: dict[str, Any],
    ) -> None:
        self.session.add(
            OperatorAction(
                task_run_id=run_id,
                action=action,
                actor=actor,
                source=source,
                address=address,
                detail=detail,
            )
        )

    def prune(
        self,
        older_than: datetime,
        run_batch: int = 100,
        row_batch: int = 5000,
    ) -> PruneReport:
        """Delete terminal runs finished before ``older_than`` with their rows, in batches.

        Each batch of runs is first hidden (soft-deleted, only if still terminal and old),
        so an operator cannot reopen a run half-deleted; its units, events and actions
        then go in short transactions of at most ``row_batch`` rows, the runs last. A
        prune that dies midway is finished by the next one (hidden runs still match).
        """
        report = PruneReport()
        old_enough = and_(
            TaskRun.status.in_([str(s) for s in TERMINAL_RUN]), TaskRun.finished_at < older_than
        )
        while True:
            with write_transaction(self.session):
                rows = self.session.execute(
                    select(TaskRun.id, TaskRun.uuid, TaskRun.context)
                    .where(old_enough)
                    .order_by(TaskRun.id)
                    .limit(run_batch)
                ).all()
                ids = [row.id for row in rows]
                if ids:
                    self.session.execute(
                        update(TaskRun)
                        .where(TaskRun.id.in_(ids), TaskRun.deleted_at.is_(None))
                        .values(deleted_at=utcnow())
                        .execution_options(synchronize_session=False)
                    )
            if not ids:
                return report
            report.units += self._delete_rows_of(TaskRunUnit, ids, row_batch)
            report.events += self._delete_rows_of(OutboxEvent, ids, row_batch)
            report.actions += self._delete_rows_of(OperatorAction, ids, row_batch)
            with write_transaction(self.session):
                self.session.execute(
                    delete(TaskRun)
                    .where(TaskRun.id.in_(ids))
                    .execution_options(synchronize_session=False)
                )
            report.runs += len(ids)
            report.run_uuids.extend(row.uuid for row in rows)
            report.dispatch_uuids.extend(
                str(row.context["dispatch_uuid"])
                for row in rows
                if isinstance(row.context, dict) and row.context.get("dispatch_uuid")
            )

    def _delete_rows_of(self, model: Any, run_ids: list[int], row_batch: int) -> int:
        deleted = 0
        while True:
            with write_transaction(self.session):
                chunk = list(
                    self.session.execute(
                        select(model.id).where(model.task_run_id.in_(run_ids)).limit(row_batch)
                    ).scalars()
                )
                if chunk:
                    self.session.execute(
                        delete(model)
                        .where(model.id.in_(chunk))
                        .execution_options(synchronize_session=False)
                    )
            if not chunk:
                return deleted
            deleted += len(chunk)

    def record_prune(
        self,
        report: PruneReport,
        older_than: datetime,
        actor: str,
        source: str,
        address: str | None,
    ) -> None:
        """What a prune deleted, as an operator action (it outlives the runs it names)."""
        with write_transaction(self.session):
            self._record_action(
                None,
                "prune",
                actor,
                source,
                address,
                {
                    "runs": report.runs,
                    "units": report.units,
                    "events": report.events,
                    "actions": report.actions,
                    "queue_keys": report.queue_keys,
                    "older_than": iso(older_than),
                },
            )

    def live_unit_tokens(self, pairs: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
        """Which (unit id, dispatch token) pairs still name an active unit's current job."""
        wanted = list(pairs)
        live: set[tuple[int, str]] = set()
        for start in range(0, len(wanted), 1000):
            chunk = wanted[start : start + 1000]
            rows = self.session.execute(
                select(TaskRunUnit.id, TaskRunUnit.dispatch_token).where(
                    TaskRunUnit.id.in_([unit_id for unit_id, _ in chunk]),
                    TaskRunUnit.status.in_(ACTIVE),
                )
            ).all()
            current = {(row.id, row.dispatch_token) for row in rows}
            live.update(pair for pair in chunk if pair in current)
        self.session.rollback()
        return live

    # -- stale units -----------------------------------------------------------------

    def stale_reason_expr(self, now: datetime):
        """SQL for a unit's stale reason (or NULL), with each type's own threshold."""
        # Correlated to the unit only: a caller joining task_runs must not empty its FROM.
        run_type = (
            select(TaskRun.type)
            .where(TaskRun.id == TaskRunUnit.task_run_id)
            .correlate(TaskRunUnit)
            .scalar_subquery()
        )
        return self._stale_reason_by_type(run_type, now)

    def mark_stuck(self, limit: int = 1000) -> int:
        """The stuck sweep: emit ``tasks.unit.stuck`` once per stale episode."""
        total = 0
        while True:
            count = self._mark_stuck_batch(limit)
            total += count
            if count < limit:
                self.close_settled_runs()
                return total

    def close_settled_runs(self, limit: int = 100) -> list[str]:
        """Close running runs whose units all settled but whose close never happened.

        The worker that settled the last unit died, or lost the database, between that
        commit and the finalization: no unit is stale, nothing is left to retry, and
        without this the run would stay running forever. Runs younger than a lost
        worker's interval are left to their own finalization.
        """
        now = utcnow()
        grace = timedelta(seconds=3 * current_app.config["TASK_RUNNER_HEARTBEAT_SECONDS"])
        active = exists().where(
            TaskRunUnit.task_run_id == TaskRun.id,
            TaskRunUnit.status.in_(ACTIVE),
            TaskRunUnit.deleted_at.is_(None),
        )
        settled = self.session.execute(
            select(TaskRun.id, TaskRun.uuid)
            .where(
                TaskRun.status == RunStatus.RUNNING,
                TaskRun.deleted_at.is_(None),
                TaskRun.started_at < now - grace,
                ~active,
            )
            .order_by(TaskRun.id)
            .limit(limit)
        ).all()
        self.session.rollback()
        return [row.uuid for row in settled if self.finalize(row.id) is not None]

    def _mark_stuck_batch(self, limit: int) -> int:
        now = utcnow()
        reason_expr = self.stale_reason_expr(now)
        with self._transition() as outbox:
            # The reason is filtered in SQL: a huge run's healthy pending units must not
            # fill the batch and hide the stale ones behind them.
            stale = self.session.execute(
                select(
                    TaskRunUnit.id,
                    TaskRunUnit.unit_key,
                    TaskRunUnit.tenant_id,
                    TaskRun.id.label("run_id"),
                    TaskRun.uuid,
                    TaskRun.type,
                    reason_expr.label("reason"),
                )
                .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
                .where(
                    TaskRunUnit.status.in_(ACTIVE),
                    TaskRunUnit.stuck_notified_at.is_(None),
                    TaskRunUnit.deleted_at.is_(None),
                    TaskRun.status == RunStatus.RUNNING,
                    reason_expr.is_not(None),
                )
                .order_by(TaskRunUnit.id)
                .limit(limit)
            ).all()
            if stale:
                # A concurrent sweep may have marked some first: only what this one marked
                # is notified, so an episode gets exactly one event.
                marked = set(
                    self.session.execute(
                        update(TaskRunUnit)
                        .where(
                            TaskRunUnit.id.in_([row.id for row in stale]),
                            TaskRunUnit.stuck_notified_at.is_(None),
                        )
                        .values(stuck_notified_at=now)
                        .returning(TaskRunUnit.id)
                        .execution_options(synchronize_session=False)
                    ).scalars()
                )
                stale = [row for row in stale if row.id in marked]
            for row in stale:
                self._emit(
                    outbox,
                    ev.UnitStuck(row.uuid, row.type, row.unit_key, row.tenant_id, row.reason),
                    row.run_id,
                )
        return len(stale)

    def expire(self, unit_id: int, token: str, reason: str) -> int | None:
        """Fail a pending unit whose job passed its drain horizon; return its run id."""
        run_id = self.session.execute(
            select(TaskRunUnit.task_run_id).where(TaskRunUnit.id == unit_id)
        ).scalar_one_or_none()
        self.session.rollback()
        if run_id is None:
            return None
        info = self.run_info(run_id)
        with self._transition() as outbox:
            now = utcnow()
            row = self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.id == unit_id,
                    TaskRunUnit.dispatch_token == token,
                    TaskRunUnit.status == UnitStatus.PENDING,
                )
                .values(
                    status=UnitStatus.FAILED, last_error=reason, finished_at=now, updated_at=now
                )
                .returning(TaskRunUnit.unit_key, TaskRunUnit.tenant_id, TaskRunUnit.attempts)
            ).first()
            if row is None:
                return None
            self._emit(
                outbox,
                ev.UnitFailed(
                    info.uuid, info.type, row.unit_key, row.tenant_id, row.attempts, reason
                ),
                run_id,
            )
        return run_id

    # -- single tracked jobs (SPEC §8) -------------------------------------------------

    def begin_single_attempt(
        self, type_: str, unit: TaskUnit, dispatch_uuid: str, initiator: str
    ) -> Claim | None:
        """One attempt of a single tracked job: its run and unit, made on the first one.

        Retries of one dispatch carry the same Huey task id (``context.dispatch_uuid``)
        and re-find their run; another dispatch of the same key opens its own. Each
        attempt takes the unit (pending, or running if the previous attempt's worker
        died) with a fresh token and one more attempt. None: the dispatch already
        settled or was cancelled, so this delivery does nothing.
        """
        token = new_token()
        with self._transition() as outbox:
            now = utcnow()
            run = self.session.execute(
                select(TaskRun).where(
                    TaskRun.type == type_,
                    TaskRun.context["dispatch_uuid"].as_string() == dispatch_uuid,
                )
            ).scalar_one_or_none()
            if run is None:
                run = TaskRun(
                    type=type_,
                    status=RunStatus.RUNNING,
                    initiator=initiator,
                    context={"dispatch_uuid": dispatch_uuid},
                    started_at=now,
                    units_total=1,
                    created_by=initiator,
                    updated_by=initiator,
                )
                self.session.add(run)
                self.session.flush()
                self._insert_units(run.id, [unit], token, now)
                self._emit(outbox, ev.RunStarted(run.uuid, type_, initiator, 1), run.id)
            elif run.status != RunStatus.RUNNING:
                return None
            row = self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.task_run_id == run.id,
                    TaskRunUnit.status.in_(ACTIVE),
                    TaskRunUnit.deleted_at.is_(None),
                )
                .values(
                    status=UnitStatus.RUNNING,
                    dispatch_token=token,
                    attempts=TaskRunUnit.attempts + 1,
                    started_at=now,
                    heartbeat_at=now,
                    finished_at=None,
                    stuck_notified_at=None,
                    updated_at=now,
                )
                .returning(TaskRunUnit.id, TaskRunUnit.attempts)
                .execution_options(synchronize_session=False)
            ).first()
            if row is None:
                return None
            info = RunInfo(run.id, run.uuid, run.type, dict(run.context or {}))
        return Claim(row.id, info, unit, row.attempts, token)

    def release_attempt(self, claim: Claim, reason: str) -> bool:
        """An attempt failed and Huey will retry it: pending again, its reason kept."""
        now = utcnow()
        with write_transaction(self.session):
            result = self.session.execute(
                self._owned(claim).values(
                    status=UnitStatus.PENDING,
                    last_error=reason,
                    queued_at=now,
                    heartbeat_at=None,
                    updated_at=now,
                )
            )
        return result.rowcount == 1

    def release_interrupted_single(self, type_: str, dispatch_uuid: str) -> bool:
        """A consumer stopped mid-attempt and the job is enqueued again: pending, not lost."""
        now = utcnow()
        with write_transaction(self.session):
            run_id = self.session.execute(
                select(TaskRun.id).where(
                    TaskRun.type == type_,
                    TaskRun.status == RunStatus.RUNNING,
                    TaskRun.context["dispatch_uuid"].as_string() == dispatch_uuid,
                )
            ).scalar_one_or_none()
            if run_id is None:
                return False
            result = self.session.execute(
                update(TaskRunUnit)
                .where(TaskRunUnit.task_run_id == run_id, TaskRunUnit.status == UnitStatus.RUNNING)
                .values(
                    status=UnitStatus.PENDING,
                    queued_at=now,
                    heartbeat_at=None,
                    stuck_notified_at=None,
                    updated_at=now,
                )
                .execution_options(synchronize_session=False)
            )
        return result.rowcount == 1

    def single_runs(self, type_: str, unit_key: str) -> list[TaskRun]:
        """Runs of one single tracked job's key, oldest first (one per dispatch)."""
        return list(
            self.session.execute(
                select(TaskRun)
                .join(TaskRunUnit, TaskRunUnit.task_run_id == TaskRun.id)
                .where(
                    TaskRun.type == type_,
                    TaskRunUnit.unit_key == unit_key,
                    TaskRun.deleted_at.is_(None),
                )
                .order_by(TaskRun.id)
            ).scalars()
        )

    # -- reads -----------------------------------------------------------------------

    def recent_runs(
        self,
        limit: int = 20,
        type_: str | None = None,
        status: str | None = None,
        before_id: int | None = None,
    ) -> list[TaskRun]:
        stmt = select(TaskRun).where(TaskRun.deleted_at.is_(None))
        if type_:
            stmt = stmt.where(TaskRun.type == type_)
        if status:
            stmt = stmt.where(TaskRun.status == status)
        if before_id is not None:
            stmt = stmt.where(TaskRun.id < before_id)
        return list(self.session.execute(stmt.order_by(TaskRun.id.desc()).limit(limit)).scalars())

    def unit_counts(self, run: TaskRun) -> dict[str, int]:
        """Live counts for a running run; the closing snapshot for a terminal one."""
        stale = (
            self.session.execute(
                select(func.count()).where(
                    TaskRunUnit.task_run_id == run.id,
                    TaskRunUnit.status.in_(ACTIVE),
                    TaskRunUnit.deleted_at.is_(None),
                    self.stale_reason_expr(utcnow()).is_not(None),
                )
            ).scalar_one()
            if run.status == RunStatus.RUNNING
            else 0
        )
        if run.status == RunStatus.RUNNING:
            counts = self._counts(run.id)
        else:
            counts = {
                "pending": 0,
                "running": 0,
                "completed": run.units_completed,
                "failed": run.units_failed,
                "skipped": run.units_skipped,
            }
        return {"total": run.units_total, **counts, "stale": stale}

    def units_of(
        self,
        run: TaskRun,
        statuses: Iterable[str] | None = None,
        stale_only: bool = False,
        limit: int = 50,
        after_id: int = 0,
    ) -> list[dict]:
        reason = self.stale_reason_expr(utcnow()).label("stale_reason")
        stmt = (
            select(TaskRunUnit, reason)
            .where(
                TaskRunUnit.task_run_id == run.id,
                TaskRunUnit.deleted_at.is_(None),
                TaskRunUnit.id > after_id,
            )
            .order_by(TaskRunUnit.id)
            .limit(limit)
        )
        if statuses is not None:
            stmt = stmt.where(TaskRunUnit.status.in_(list(statuses)))
        if stale_only:
            stmt = stmt.where(TaskRunUnit.status.in_(ACTIVE), reason.is_not(None))
        return [
            self.unit_dict(unit, stale_reason) for unit, stale_reason in self.session.execute(stmt)
        ]

    @staticmethod
    def unit_dict(unit: TaskRunUnit, stale_reason: str | None) -> dict[str, Any]:
        return {
            "unit_key": unit.unit_key,
            "tenant_id": unit.tenant_id,
            "status": unit.status,
            "attempts": unit.attempts,
            "last_error": unit.last_error,
            "started_at": iso(unit.started_at),
            "finished_at": iso(unit.finished_at),
            "stale": stale_reason is not None,
            "stale_reason": stale_reason,
        }

    def events_of(self, run: TaskRun, limit: int = 200) -> list[dict[str, Any]]:
        rows = self.session.execute(
            select(OutboxEvent)
            .where(OutboxEvent.task_run_id == run.id)
            .order_by(OutboxEvent.id)
            .limit(limit)
        ).scalars()
        return [self._event_dict(row) for row in rows]

    def actions_of(self, run: TaskRun) -> list[OperatorAction]:
        return list(
            self.session.execute(
                select(OperatorAction)
                .where(OperatorAction.task_run_id == run.id)
                .order_by(OperatorAction.id.desc())
            ).scalars()
        )

    def count_events(self, name: str, run: TaskRun | None = None) -> int:
        stmt = select(func.count()).where(OutboxEvent.name == name)
        if run is not None:
            stmt = stmt.where(OutboxEvent.task_run_id == run.id)
        return self.session.execute(stmt).scalar_one()

    # -- consumers' questions (through the contract) ------------------------------------

    def unit_in_flight(self, type_: str, unit_key: str) -> bool:
        """Whether a unit with this key is pending or running in a running run of this type."""
        found = self.session.execute(
            select(literal(1))
            .select_from(TaskRunUnit)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.unit_key == unit_key,
                TaskRunUnit.status.in_(ACTIVE),
                TaskRunUnit.deleted_at.is_(None),
                TaskRun.type == type_,
                TaskRun.status == RunStatus.RUNNING,
            )
            .limit(1)
        ).first()
        return found is not None


_RUN_INFO: dict[int, RunInfo] = {}


def _run_info(run_id: int) -> RunInfo:
    # Type, uuid and context never change after creation: one read per run per process.
    cached = _RUN_INFO.get(run_id)
    if cached is not None:
        return cached
    row = db.session.execute(
        select(TaskRun.uuid, TaskRun.type, TaskRun.context).where(TaskRun.id == run_id)
    ).one()
    info = RunInfo(run_id, row.uuid, row.type, dict(row.context or {}))
    if len(_RUN_INFO) > 4096:
        _RUN_INFO.clear()
    _RUN_INFO[run_id] = info
    return info


def forget_cached_runs() -> None:
    """Drop the per-process run cache (tests reuse ids after emptying tables)."""
    _RUN_INFO.clear()


ledger = TaskRunLedger()
