"""Operator actions: retry (reopen), cancel, pause and resume a type; a schedule's actions.

Each checks its preconditions under the run lock and records who did it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, or_, select, update
from sqlalchemy.orm import Session

from database import is_sqlite, take_turns, utcnow, write_transaction
from taskrunner.ledger.reason_fold import stored_reason
from taskrunner.ledger.records import (
    ACTIVE,
    Actor,
    Dispatch,
    new_token,
    not_deleted,
    redispatched,
)
from taskrunner.ledger.stale_rules import paused_type_names, stale_cutoffs, stale_filter
from taskrunner.ledger.writes import Writes
from taskrunner.models import OperatorAction, TaskRun, TaskRunUnit, TaskTypePause
from taskrunner.redaction import stored_payload
from taskrunner.registry import registry
from taskrunner.types import Refused, RunStatus, UnitStatus
from taskrunner.unit_rules import possible_keys

SCHEDULE_ACTIONS = ("schedule-pause", "schedule-resume", "schedule-run-now")


class OperatorActions:
    """Retry, cancel, pause and resume: what an operator does to runs and types."""

    def __init__(self, session: Session, writes: Writes) -> None:
        self.session = session
        self.writes = writes

    def count_retryable(
        self,
        run: TaskRun,
        failed_only: bool,
        stale_only: bool = False,
        reason: str | None = None,
        unit_keys: Iterable[str] | None = None,
        now: datetime | None = None,
    ) -> int:
        return self.session.execute(
            select(func.count()).where(
                self._retryable(run, failed_only, stale_only, reason, unit_keys, now)
            )
        ).scalar_one()

    def _retryable(
        self,
        run: TaskRun,
        failed_only: bool,
        stale_only: bool = False,
        reason: str | None = None,
        unit_keys: Iterable[str] | None = None,
        now: datetime | None = None,
    ):
        """Which units of a run a retry takes.

        ``reason``: only the failed units of one error group (a reason as the error groups
        show it, numbers folded). ``unit_keys``: only these units, each if it is failed,
        pending or stale (a completed or healthy running unit is never retried). Stale
        as of ``now`` (default: the clock).
        """
        stale = stale_filter(
            stale_cutoffs(run.type, now or utcnow(), paused_type_names(self.session))
        )
        clauses = [TaskRunUnit.task_run_id == run.id, not_deleted(TaskRunUnit)]
        if unit_keys is not None:
            clauses.append(TaskRunUnit.unit_key.in_(possible_keys(unit_keys)))
        if reason is not None:
            clauses.append(TaskRunUnit.status == UnitStatus.FAILED)
            clauses.append(TaskRunUnit.reason_fold == reason)
        elif stale_only:
            clauses.append(stale)
        elif failed_only:
            clauses.append(TaskRunUnit.status == UnitStatus.FAILED)
        else:
            clauses.append(
                or_(
                    TaskRunUnit.status.in_((UnitStatus.FAILED, UnitStatus.PENDING)),
                    and_(TaskRunUnit.status == UnitStatus.RUNNING, stale),
                )
            )
        return and_(*clauses)

    def reopen_for_retry(
        self,
        run_uuid: str,
        failed_only: bool,
        actor: Actor,
        stale_only: bool = False,
        reason: str | None = None,
        unit_keys: Iterable[str] | None = None,
        now: datetime | None = None,
        after_action: int | None = None,
    ) -> Dispatch:
        """Give the retryable units a new dispatch token and put the run back to running.

        The whole run's unfinished units by default; one error group with ``reason``; a
        selection (or one unit) with ``unit_keys``. ``now``: the moment of the retry
        (default: the clock), which staleness is judged at. ``after_action``: the run's
        newest operator action when the retry was confirmed (``last_action_id``); refused
        if another came since: a confirmation sent twice would re-dispatch the units the
        first one just queued.
        """
        token = new_token()
        keys = sorted(set(possible_keys(unit_keys))) if unit_keys is not None else None
        with self.writes.transition():
            run = self.writes.lock_live_run(run_uuid)
            # The column, not the context: a type's context may name its own dispatch_uuid.
            if run.dispatch_uuid is not None:
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
            if after_action is not None and self.last_action_id(run) > after_action:
                raise Refused(
                    f"run {run.uuid} was retried or cancelled since this retry was confirmed"
                )
            now = now or utcnow()
            retryable = select(TaskRunUnit.id).where(
                self._retryable(run, failed_only, stale_only, reason, keys, now)
            )
            if not is_sqlite(self.session):
                # A unit row another transaction holds (a worker cut off in the middle of
                # its commit) is left for a later retry: a retry never waits on a lost host.
                retryable = retryable.with_for_update(skip_locked=True)
            result = self.session.execute(
                update(TaskRunUnit)
                .where(TaskRunUnit.id.in_(retryable))
                .values(**redispatched(token, now))
                .execution_options(synchronize_session=False)
            )
            count = result.rowcount
            if count == 0:
                raise Refused(f"run {run.uuid} has nothing to retry")
            run.status = RunStatus.RUNNING
            run.finished_at = None
            run.updated_by = actor.name
            detail: dict[str, Any] = {
                "failed_only": failed_only,
                "stale_only": stale_only,
                "units": count,
            }
            if reason is not None:
                detail["reason"] = reason
            if keys is not None:
                # The audit names what was asked for (capped: a selection is a page at most).
                detail["unit_keys"] = keys[:200]
            self.writes.record_action(run.id, "retry", actor, detail)
        return Dispatch(run.id, run.uuid, run.type, token, count)

    def last_action_id(self, run: TaskRun) -> int:
        """The id of the run's newest operator action (0: none): what a confirmation saw."""
        newest = self.session.execute(
            select(func.max(OperatorAction.id)).where(OperatorAction.task_run_id == run.id)
        ).scalar_one()
        return newest or 0

    def cancel(self, run_uuid: str, actor: Actor) -> tuple[list[tuple[int, str]], int]:
        """Cancel a running run: its pending and running units are skipped.

        Returns (unit id, dispatch token) of the units whose queued jobs can be revoked,
        and how many units were skipped.
        """
        with self.writes.transition() as outbox:
            run = self.writes.lock_live_run(run_uuid)
            if run.status != RunStatus.RUNNING:
                raise Refused(f"run {run.uuid} is {run.status}, not running")
            queued = [
                (row.id, row.dispatch_token)
                for row in self.session.execute(
                    select(TaskRunUnit.id, TaskRunUnit.dispatch_token).where(
                        TaskRunUnit.task_run_id == run.id,
                        TaskRunUnit.status == UnitStatus.PENDING,
                        not_deleted(TaskRunUnit),
                    )
                )
            ]
            now = utcnow()
            skipped = self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.task_run_id == run.id,
                    TaskRunUnit.status.in_(ACTIVE),
                    not_deleted(TaskRunUnit),
                )
                .values(
                    status=UnitStatus.SKIPPED,
                    finished_at=now,
                    updated_at=now,
                    **stored_reason("cancelled by operator"),
                )
                .execution_options(synchronize_session=False)
            ).rowcount
            run.updated_by = actor.name
            self.writes.record_action(run.id, "cancel", actor, {"units_skipped": skipped})
            self.writes.close(run, self.writes.counts(run.id), RunStatus.CANCELLED, outbox)
        return queued, skipped

    # -- paused task types ---------------------------------------------------------

    def pause_type(self, type_: str, actor: Actor) -> bool:
        """Pause a task type: the gate lets none of its units through until it is resumed.

        Units already running finish their attempt. Returns False if it was paused already.
        """
        with write_transaction(self.session):
            if self.session.get(TaskTypePause, type_) is not None:
                return False
            self.session.add(TaskTypePause(type=type_, paused_by=actor.name))
            self.writes.record_action(None, "pause", actor, {"type": type_})
        return True

    def resume_type(self, type_: str, actor: Actor) -> list[Dispatch] | None:
        """Resume a paused type: its waiting units get a new dispatch, in one transaction.

        Jobs of the paused time found the gate closed and left their units pending;
        those units are given new tokens (a fresh drain horizon) and returned as
        dispatches to enqueue. A job still queued from before carries an old token and
        does nothing. None: the type was not paused.
        """
        dispatches = []
        with write_transaction(self.session):
            pause = self.session.get(TaskTypePause, type_)
            if pause is None:
                return None
            self.session.delete(pause)
            now = utcnow()
            runs = self.session.execute(
                select(TaskRun.id, TaskRun.uuid).where(
                    TaskRun.type == type_,
                    TaskRun.status == RunStatus.RUNNING,
                    not_deleted(TaskRun),
                )
            ).all()
            for run_id, run_uuid in runs:
                token = new_token()
                count = self.session.execute(
                    update(TaskRunUnit)
                    .where(
                        TaskRunUnit.task_run_id == run_id,
                        TaskRunUnit.status == UnitStatus.PENDING,
                        not_deleted(TaskRunUnit),
                    )
                    .values(**redispatched(token, now))
                    .execution_options(synchronize_session=False)
                ).rowcount
                if count:
                    dispatches.append(Dispatch(run_id, run_uuid, type_, token, count))
            units = sum(d.count for d in dispatches)
            self.writes.record_action(None, "resume", actor, {"type": type_, "units": units})
        return dispatches

    def paused_types(self) -> dict[str, TaskTypePause]:
        rows = self.session.execute(select(TaskTypePause).order_by(TaskTypePause.type)).scalars()
        return {row.type: row for row in rows}

    def is_paused(self, type_: str) -> bool:
        return self.session.get(TaskTypePause, type_) is not None

    def record_schedule_run_now(
        self,
        name: str,
        slot: datetime,
        actor: Actor,
        check: Callable[[], None] | None = None,
    ) -> int:
        """Record a run now of ``name`` before its slot is enqueued; the record's id.

        ``check`` (which may refuse) runs in the same transaction, after every earlier run
        now of ``name`` is recorded: two asked at once cannot both find nothing waiting.
        """
        # To the microsecond: two run-now slots within one second are two slots.
        detail = {"schedule": name, "slot": slot.isoformat() + "Z"}
        with write_transaction(self.session):
            take_turns(self.session, f"schedule-run-now:{name}")
            if check is not None:
                check()
            action = self.writes.record_action(None, "schedule-run-now", actor, detail)
            self.session.flush()
            return action.id

    def schedule_run_now_failed(self, action_id: int, reason: str) -> None:
        """Note on a run now's record that its slot was never enqueued, and why."""
        with write_transaction(self.session):
            action = self.session.get(OperatorAction, action_id)
            action.detail = stored_payload({**action.detail, "failed": reason})

    def on_schedule(self, name: str, limit: int = 20) -> list[OperatorAction]:
        """The operator actions on schedule ``name`` (pause, resume, run now), newest first."""
        rows = self.session.execute(
            select(OperatorAction)
            .where(
                OperatorAction.task_run_id.is_(None),
                OperatorAction.action.in_(SCHEDULE_ACTIONS),
                OperatorAction.detail["schedule"].as_string() == name,
            )
            .order_by(OperatorAction.id.desc())
            .limit(limit)
        )
        return list(rows.scalars())
