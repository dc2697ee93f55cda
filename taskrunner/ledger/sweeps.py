"""Stale and stuck units: the sweep, expiry past the drain horizon, and runs whose close
was lost. The rule itself is ``stale_rules``.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from flask import current_app
from sqlalchemy import exists, select, update
from sqlalchemy.orm import Session

from database import utcnow
from taskrunner import events as ev
from taskrunner.failures import EXPIRED as EXPIRED_KIND
from taskrunner.ledger.hot import NOT_PAUSED
from taskrunner.ledger.reason_fold import stored_reason
from taskrunner.ledger.records import ACTIVE, EXPIRED, not_deleted
from taskrunner.ledger.stale_rules import (
    joined_cutoffs,
    lost_cutoff,
    stale_filter,
    stale_reason,
)
from taskrunner.ledger.transitions import Transitions
from taskrunner.ledger.writes import Writes
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.types import RunStatus, UnitStatus


class StuckSweep:
    """The stuck sweep and the drain horizon (docs/operations.md: stale units, throttling).

    ``now`` (default: the clock) is the moment the sweep judges by: a test passes one
    instead of waiting for a threshold to pass. It closes runs through ``finalize``.
    """

    def __init__(self, session: Session, writes: Writes, transitions: Transitions) -> None:
        self.session = session
        self.writes = writes
        self.transitions = transitions

    def mark_stuck(self, limit: int = 1000, now: datetime | None = None) -> int:
        """The stuck sweep: emit ``tasks.unit.stuck`` once per stale episode.

        It also fails the pending units past their drain horizon (nothing stays pending
        forever) and closes runs whose units all settled but whose close was lost.
        """
        total = 0
        while True:
            count = self._mark_stuck_batch(limit, now)
            total += count
            if count < limit:
                break
        while expired := self.expire_beyond_horizon(limit, now):
            for run_id in expired:
                self.transitions.finalize(run_id)
        self.close_settled_runs(now=now)
        return total

    def close_settled_runs(self, limit: int = 100, now: datetime | None = None) -> list[str]:
        """Close running runs whose units all settled but whose close never happened.

        The worker that settled the last unit died, or lost the database, between that
        commit and the finalization: no unit is stale, nothing is left to retry, and
        without this the run would stay running forever. Runs younger than a lost
        worker's interval are left to their own finalization.
        """
        active = exists().where(
            TaskRunUnit.task_run_id == TaskRun.id,
            TaskRunUnit.status.in_(ACTIVE),
            not_deleted(TaskRunUnit),
        )
        settled = self.session.execute(
            select(TaskRun.id, TaskRun.uuid)
            .where(
                TaskRun.status == RunStatus.RUNNING,
                not_deleted(TaskRun),
                TaskRun.started_at < lost_cutoff(now or utcnow()),
                ~active,
            )
            .order_by(TaskRun.id)
            .limit(limit)
        ).all()
        self.session.rollback()
        return [row.uuid for row in settled if self.transitions.finalize(row.id) is not None]

    def _mark_stuck_batch(self, limit: int, now: datetime | None = None) -> int:
        now = now or utcnow()
        cut = joined_cutoffs(self.session, now)
        with self.writes.transition() as outbox:
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
                    stale_reason(cut).label("reason"),
                )
                .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
                .where(
                    TaskRunUnit.stuck_notified_at.is_(None),
                    not_deleted(TaskRunUnit),
                    TaskRun.status == RunStatus.RUNNING,
                    stale_filter(cut),
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
                self.writes.emit(
                    outbox,
                    ev.UnitStuck(row.uuid, row.type, row.unit_key, row.tenant_id, row.reason),
                    row.run_id,
                )
        return len(stale)

    def expire(self, unit_id: int, token: str) -> int | None:
        """Fail a pending unit whose job passed its drain horizon; return its run id."""
        run_ids = self._expire_where(TaskRunUnit.id == unit_id, TaskRunUnit.dispatch_token == token)
        return run_ids[0] if run_ids else None

    def expire_beyond_horizon(self, limit: int = 1000, now: datetime | None = None) -> list[int]:
        """Fail pending units dispatched longer ago than the drain horizon; their run ids.

        A job past its horizon expires itself, but only while it is in the queue: one the
        queue lost would leave its unit pending forever without this.
        """
        hours = current_app.config["TASK_RUNNER_RETRY_HORIZON_HOURS"]
        now = now or utcnow()
        cutoff = now - timedelta(hours=hours)
        beyond = (
            select(TaskRunUnit.id)
            .where(
                TaskRunUnit.status == UnitStatus.PENDING,
                not_deleted(TaskRunUnit),
                TaskRunUnit.queued_at < cutoff,
                exists().where(TaskRun.id == TaskRunUnit.task_run_id, NOT_PAUSED),
            )
            .limit(limit)
        )
        return self._expire_where(
            TaskRunUnit.id.in_(beyond), TaskRunUnit.queued_at < cutoff, now=now
        )

    def _expire_where(self, *where: Any, now: datetime | None = None) -> list[int]:
        with self.writes.transition() as outbox:
            now = now or utcnow()
            # A paused type's units wait for the resume, however long it takes.
            unpaused = exists().where(TaskRun.id == TaskRunUnit.task_run_id, NOT_PAUSED)
            rows = self.session.execute(
                update(TaskRunUnit)
                .where(TaskRunUnit.status == UnitStatus.PENDING, unpaused, *where)
                .values(
                    status=UnitStatus.FAILED,
                    **stored_reason(EXPIRED),
                    failure_kind=EXPIRED_KIND,
                    stack=None,
                    finished_at=now,
                    updated_at=now,
                )
                .returning(
                    TaskRunUnit.task_run_id,
                    TaskRunUnit.unit_key,
                    TaskRunUnit.tenant_id,
                    TaskRunUnit.attempts,
                    select(TaskRun.uuid)
                    .where(TaskRun.id == TaskRunUnit.task_run_id)
                    .scalar_subquery(),
                    select(TaskRun.type)
                    .where(TaskRun.id == TaskRunUnit.task_run_id)
                    .scalar_subquery(),
                )
                .execution_options(synchronize_session=False)
            ).all()
            for run_id, key, tenant_id, attempts, run_uuid, type_ in rows:
                self.writes.emit(
                    outbox,
                    ev.UnitFailed(run_uuid, type_, key, tenant_id, attempts, EXPIRED, EXPIRED_KIND),
                    run_id,
                )
        return sorted({row[0] for row in rows})
