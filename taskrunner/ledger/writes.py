"""What every writer of the ledger shares: one write transaction with its outbox, the run
lock, the close of a run and the operator audit.

Every transition is one transaction; the events it causes are written to the outbox
inside it and delivered after the commit by the process that made it.

The run lock: on PostgreSQL the run's row is read ``FOR NO KEY UPDATE``: run locks exclude
each other, but not the key-share lock a transaction takes when it writes a row that
references the run (a unit's event, a builder step), so a transition that holds such a
row and then writes its event never deadlocks with one that holds the run and waits for
that row. On SQLite the transaction starts with ``BEGIN IMMEDIATE``, the database write
lock. A domain package locks its own runs with it (``run_lock``, through the contract).
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from database import is_sqlite, iso, utcnow, write_transaction
from extensions import db
from taskrunner import delivery
from taskrunner import events as ev
from taskrunner.ledger.records import UNIT_COLUMNS, Actor, is_uuid, not_deleted
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.redaction import stored_payload
from taskrunner.types import Refused, RunStatus, TaskUnit, UnitStatus

# COPY's text format: a backslash escapes, and tab and newline end a value or a row.
_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
NULL = "\\N"


def copy_text(value: str) -> str:
    """``value`` as a field of COPY's text format."""
    return value.translate(_COPY_ESCAPES)


def lock_row(session: Session, model: Any, *where: Any) -> Any | None:
    """Inside a write transaction: the one row of ``model`` matching ``where``, locked and
    read under the lock (a row read before may be stale by the time the lock is granted);
    None when there is none."""
    stmt = select(model).where(*where)
    if not is_sqlite(session):
        stmt = stmt.with_for_update(key_share=True)
    return session.execute(stmt.execution_options(populate_existing=True)).scalar_one_or_none()


@contextmanager
def run_lock(model: Any, row_id: int) -> Iterator[Any | None]:
    """One write transaction holding the lock of ``model``'s row ``row_id`` (None: gone);
    it commits when the block ends, or rolls back if it raises."""
    with write_transaction(db.session):
        yield lock_row(db.session, model, model.id == row_id)


class Writes:
    """Transactions with their outbox, the run lock and close, the audit: for the writers."""

    def __init__(self, session: Session) -> None:
        self.session = session

    @contextmanager
    def transition(self) -> Iterator[list[dict[str, Any]]]:
        """One write transaction; events appended to the yielded list are delivered after commit."""
        outbox: list[dict[str, Any]] = []
        with write_transaction(self.session):
            yield outbox
        delivery.deliver(outbox)

    def emit(self, outbox: list[dict[str, Any]], event: ev.Event, run_id: int | None) -> None:
        row = {
            "event_id": str(uuid_lib.uuid4()),
            "name": event.name,
            "task_run_id": run_id,
            "payload": stored_payload(event.payload()),
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

    def insert_units(
        self, run_id: int, batches: Iterable[list[TaskUnit]], token: str, now: datetime
    ) -> int:
        """Insert the units of each batch as pending rows; return how many."""
        total = 0
        if is_sqlite(self.session):
            for batch in batches:
                rows = [
                    dict(zip(UNIT_COLUMNS, row, strict=True))
                    for row in (
                        (run_id, u.key, u.tenant_id, "pending", 0, token, now, now, now)
                        for u in batch
                    )
                ]
                self.session.execute(insert(TaskRunUnit), rows)
                total += len(rows)
            return total
        # One COPY for the whole run, in its text format, written a batch at a time (the
        # columns every unit shares formatted once): PostgreSQL stores one batch while the
        # next is made, and no Python call is spent per row and per value.
        stamp = now.isoformat(" ")
        shared = f"\tpending\t0\t{token}\t{stamp}\t{stamp}\t{stamp}\n"
        raw = self.session.connection().connection.dbapi_connection
        with raw.cursor() as cursor:
            with cursor.copy(f"COPY task_run_units ({', '.join(UNIT_COLUMNS)}) FROM STDIN") as copy:
                for batch in batches:
                    lines = "".join(
                        f"{run_id}\t{copy_text(u.key)}\t"
                        f"{NULL if u.tenant_id is None else int(u.tenant_id)}{shared}"
                        for u in batch
                    )
                    copy.write(lines.encode())
                    total += len(batch)
        return total

    # -- the run lock and its close ----------------------------------------------------

    def lock_run(self, run_id: int) -> TaskRun | None:
        """Lock the run row; None: the run was pruned."""
        return lock_row(self.session, TaskRun, TaskRun.id == run_id)

    def lock_live_run(self, run_uuid: str) -> TaskRun:
        """Lock a run that is not deleted, by uuid; ``Refused`` when there is none.

        Every precondition of an operator action is checked on what this returns: a
        check made before the lock may be stale by the time the lock is granted.
        """
        run = None
        lowered = str(run_uuid).lower()  # any case, as ``find_run`` reads it
        if is_uuid(lowered):
            run = lock_row(self.session, TaskRun, TaskRun.uuid == lowered, not_deleted(TaskRun))
        if run is None:
            raise Refused(f"no run {run_uuid}")
        return run

    def counts(self, run_id: int) -> dict[str, int]:
        rows = self.session.execute(
            select(TaskRunUnit.status, func.count())
            .where(TaskRunUnit.task_run_id == run_id, not_deleted(TaskRunUnit))
            .group_by(TaskRunUnit.status)
        ).all()
        counts = {str(s): 0 for s in UnitStatus}
        counts.update({status: n for status, n in rows})
        return counts

    def close_if_done(self, run_id: int, outbox: list[dict[str, Any]]) -> str | None:
        """Inside a transaction holding the run lock."""
        run = self.session.get(TaskRun, run_id)
        if run.status != RunStatus.RUNNING:
            return None
        counts = self.counts(run_id)
        if counts["pending"] or counts["running"]:
            return None
        return self.close(run, counts, None, outbox)

    def close(
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
        self.emit(outbox, event, run.id)
        return str(status)

    def record_action(
        self, run_id: int | None, action: str, actor: Actor, detail: dict[str, Any]
    ) -> OperatorAction:
        """The operator audit: who did what to which run (or type), from where."""
        row = OperatorAction(
            task_run_id=run_id,
            action=action,
            actor=actor.name,
            source=actor.source,
            address=actor.address,
            detail=stored_payload(detail),
        )
        self.session.add(row)
        return row
