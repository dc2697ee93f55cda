"""Single tracked jobs (docs/operations.md): a run and its one unit, made on the first attempt."""

from __future__ import annotations

from sqlalchemy import and_, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from database import is_sqlite, utcnow, write_transaction
from taskrunner import events as ev
from taskrunner.ledger.reason_fold import stored_reason
from taskrunner.ledger.records import Claim, RunInfo, new_token, not_deleted
from taskrunner.ledger.stale_rules import lost_cutoff
from taskrunner.ledger.transitions import owned
from taskrunner.ledger.writes import Writes, lock_row
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.redaction import bounded
from taskrunner.types import RunStatus, TaskUnit, UnitStatus


class SingleJobs:
    """Attempts of fire-and-forget Huey tasks that opted into the ledger."""

    def __init__(self, session: Session, writes: Writes) -> None:
        self.session = session
        self.writes = writes

    def begin_single_attempt(
        self,
        type_: str,
        unit: TaskUnit,
        dispatch_uuid: str,
        initiator: str,
        open_run: bool = True,
    ) -> Claim | None:
        """One attempt of a single tracked job: its run and unit, made on the first one.

        Retries of one dispatch carry the same Huey task id (``context.dispatch_uuid``)
        and re-find their run; another dispatch of the same key opens its own. Each
        attempt takes the unit (pending, or running if the previous attempt's worker
        died: its heartbeat is older than the stale rule's ``worker lost``) with a fresh
        token and one more attempt. None: the dispatch already settled or was cancelled,
        or its attempt is running on a live worker (a second delivery of the same
        dispatch), so this delivery does nothing. ``open_run=False``: a later delivery of a
        dispatch whose run was made; no run left means it was pruned, and none is opened.
        """
        token = new_token()
        with self.writes.transition() as outbox:
            now = utcnow()
            # Insert-or-select on the unique dispatch key: of two first attempts racing,
            # one inserts and the other waits for its commit, then finds that run.
            insert_run = sqlite_insert if is_sqlite(self.session) else pg_insert
            created = None
            if open_run:
                created = self.session.execute(
                    insert_run(TaskRun)
                    .values(
                        type=type_,
                        status=RunStatus.RUNNING,
                        initiator=initiator,
                        context={"dispatch_uuid": dispatch_uuid},
                        dispatch_uuid=dispatch_uuid,
                        started_at=now,
                        units_total=1,
                        created_by=initiator,
                        updated_by=initiator,
                    )
                    .on_conflict_do_nothing(index_elements=[TaskRun.dispatch_uuid])
                    .returning(TaskRun.id)
                ).scalar_one_or_none()
            # Found by its unique dispatch key (an index hit).
            run = lock_row(self.session, TaskRun, TaskRun.dispatch_uuid == dispatch_uuid)
            if run is None:
                return None  # pruned: the dispatch ended, and no later delivery reopens it
            if created is not None:
                self.writes.insert_units(run.id, [[unit]], token, now)
                self.writes.emit(outbox, ev.RunStarted(run.uuid, type_, initiator, 1), run.id)
            elif run.status != RunStatus.RUNNING:
                return None
            row = self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.task_run_id == run.id,
                    or_(
                        TaskRunUnit.status == UnitStatus.PENDING,
                        and_(
                            TaskRunUnit.status == UnitStatus.RUNNING,
                            or_(
                                TaskRunUnit.heartbeat_at.is_(None),
                                TaskRunUnit.heartbeat_at < lost_cutoff(now),
                            ),
                        ),
                    ),
                    not_deleted(TaskRunUnit),
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
                owned(claim).values(
                    status=UnitStatus.PENDING,
                    **stored_reason(bounded(reason)),
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
                    TaskRun.dispatch_uuid == dispatch_uuid,
                    TaskRun.type == type_,
                    TaskRun.status == RunStatus.RUNNING,
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
                    not_deleted(TaskRun),
                )
                .order_by(TaskRun.id)
            ).scalars()
        )
