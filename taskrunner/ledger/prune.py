"""Pruning old runs, in batches, and the audit of what a prune deleted."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import and_, delete, select, update
from sqlalchemy.orm import Session

from database import iso, utcnow, write_transaction
from taskrunner.ledger.records import Actor, PruneReport
from taskrunner.ledger.writes import Writes
from taskrunner.models import OperatorAction, OutboxEvent, TaskRun, TaskRunUnit
from taskrunner.types import TERMINAL_RUN


class Pruning:
    """Deleting terminal runs past their retention with their rows."""

    def __init__(self, session: Session, writes: Writes) -> None:
        self.session = session
        self.writes = writes

    def prune(
        self,
        older_than: datetime,
        run_batch: int = 100,
        row_batch: int = 10_000,
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
                candidates = [row.id for row in rows]
                ids = []
                if candidates:
                    # Re-checked in the UPDATE itself: a retry may have reopened a run
                    # between the SELECT and here (it waits for this row lock, and then
                    # finds the run hidden). Only what this UPDATE hid is deleted.
                    ids = list(
                        self.session.execute(
                            update(TaskRun)
                            .where(TaskRun.id.in_(candidates), old_enough)
                            .values(deleted_at=utcnow())
                            .returning(TaskRun.id)
                            .execution_options(synchronize_session=False)
                        ).scalars()
                    )
            if not candidates:
                return report
            hidden = set(ids)
            rows = [row for row in rows if row.id in hidden]
            if not rows:
                continue
            report.units += self._delete_rows_of(TaskRunUnit, ids, row_batch)
            report.events += self._delete_rows_of(OutboxEvent, ids, row_batch)
            report.actions += self._delete_rows_of(OperatorAction, ids, row_batch)
            with write_transaction(self.session):
                # A prune running at once may have finished these runs first (hidden runs
                # still match): the report counts what this one deleted, not what it hid.
                deleted = set(
                    self.session.execute(
                        delete(TaskRun)
                        .where(TaskRun.id.in_(ids))
                        .returning(TaskRun.id)
                        .execution_options(synchronize_session=False)
                    ).scalars()
                )
            rows = [row for row in rows if row.id in deleted]
            report.runs += len(rows)
            report.run_uuids.extend(row.uuid for row in rows)
            report.dispatch_uuids.extend(
                str(row.context["dispatch_uuid"])
                for row in rows
                if isinstance(row.context, dict) and row.context.get("dispatch_uuid")
            )

    def _delete_rows_of(self, model: Any, run_ids: list[int], row_batch: int) -> int:
        """Delete the rows of these runs, ``row_batch`` at a time, each batch one statement:
        the ids never travel to Python and back (a million-unit run is pruned in seconds)."""
        deleted = 0
        while True:
            doomed = select(model.id).where(model.task_run_id.in_(run_ids)).limit(row_batch)
            with write_transaction(self.session):
                count = self.session.execute(
                    delete(model)
                    .where(model.id.in_(doomed))
                    .execution_options(synchronize_session=False)
                ).rowcount
            deleted += count
            if count < row_batch:
                return deleted

    def record_prune(self, report: PruneReport, older_than: datetime, actor: Actor) -> None:
        """What a prune deleted, as an operator action (it outlives the runs it names)."""
        with write_transaction(self.session):
            self.writes.record_action(
                None,
                "prune",
                actor,
                {
                    "runs": report.runs,
                    "units": report.units,
                    "events": report.events,
                    "actions": report.actions,
                    "queue_keys": report.queue_keys,
                    "slots": report.slots,
                    "older_than": iso(older_than),
                },
            )
