"""What every part of the ledger stands on: the session, one write transaction with
its outbox, the run lock, the close of a run and the operator audit.

Every transition is one transaction; the events it causes are written to the
outbox inside it and delivered after the commit by the process that made it.
"""

from __future__ import annotations

import uuid as uuid_lib
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.orm import Session

from database import is_sqlite, iso, utcnow, write_transaction
from extensions import db
from taskrunner import delivery
from taskrunner import events as ev
from taskrunner.ledger.records import UNIT_COLUMNS
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.redaction import stored_payload
from taskrunner.types import Refused, RunStatus, TaskUnit, UnitStatus


class LedgerBase:
    """The session, transactions and events, the run lock and close, shared by every part."""

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

    def _deliver(self, outbox: list[dict[str, Any]]) -> None:
        delivery.deliver(outbox)

    def relay_events(self, older_than_seconds: int = 60, limit: int = 500) -> int:
        """Deliver what a crashed process left undelivered, and retry refused deliveries."""
        return delivery.relay(older_than_seconds, limit)

    @staticmethod
    def _event_dict(row: OutboxEvent) -> dict[str, Any]:
        return delivery.event_dict(row)

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

    # -- the run lock and its close ----------------------------------------------------

    def _lock_run(self, run_id: int) -> TaskRun | None:
        """Lock the run row (SQLite: the write transaction already holds the database lock).

        ``FOR NO KEY UPDATE``: run locks exclude each other, but not the key-share lock
        that writing an event of the run takes (its foreign key). A transition that holds
        a unit row and then writes its event (a failure, the stuck sweep) would otherwise
        deadlock with a cancel that holds the run and waits for that unit. None: the run
        was pruned.
        """
        stmt = select(TaskRun).where(TaskRun.id == run_id)
        if not is_sqlite(self.session):
            stmt = stmt.with_for_update(key_share=True)
        return self.session.execute(
            stmt.execution_options(populate_existing=True)
        ).scalar_one_or_none()

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

    # -- finding runs ------------------------------------------------------------------

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

    # -- the operator audit ------------------------------------------------------------

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
                detail=stored_payload(detail),
            )
        )
