"""A unit's and a run's transitions: create, dispatch, claim, complete, fail, hand
back, heartbeat, finalize.

Worker-side writes are conditional updates (on the unit's status and current
dispatch token), so a late, duplicated or superseded job changes nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select, tuple_, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session

from database import utcnow, write_transaction
from taskrunner import events as ev
from taskrunner.failures import VENDOR, stored_kind
from taskrunner.ledger.driver_sql import first_row, runs_on_driver
from taskrunner.ledger.hot import (
    ACTIVE_CHECK,
    COMPLETE,
    COMPLETE_AND_LOOK,
    COMPLETE_AND_LOOK_FAST,
    COMPLETE_AND_LOOK_SQLITE,
    GATE,
    GATE_FAST,
    NOT_PAUSED,
    end_open_session,
    fast_commits,
    hot_transaction,
    run_info,
)
from taskrunner.ledger.planner_stats import analyze_units_if_never_analyzed
from taskrunner.ledger.reason_fold import stored_reason
from taskrunner.ledger.records import (
    ACTIVE,
    Claim,
    Dispatch,
    Settled,
    chunks,
    new_token,
    not_deleted,
    redispatched,
)
from taskrunner.ledger.slot_body import link_run
from taskrunner.ledger.writes import Writes
from taskrunner.models import TaskRun, TaskRunUnit
from taskrunner.redaction import bounded
from taskrunner.types import RunStatus, TaskUnit, UnitStatus


def owned(claim: Claim):
    """An update of the unit ``claim`` holds: running under the claim's token."""
    return (
        update(TaskRunUnit)
        .where(
            TaskRunUnit.id == claim.unit_id,
            TaskRunUnit.dispatch_token == claim.token,
            TaskRunUnit.status == UnitStatus.RUNNING,
        )
        .execution_options(synchronize_session=False)
    )


class Transitions:
    """Starting a run, executing its units, and closing it when none is left."""

    def __init__(self, session: Session, writes: Writes) -> None:
        self.session = session
        self.writes = writes

    # -- starting a run ------------------------------------------------------------

    def create_run(
        self,
        type_: str,
        context: dict[str, Any],
        initiator: str,
        units: Iterable[TaskUnit],
        chunk_size: int,
    ) -> Dispatch:
        """Insert the run and all its units in one transaction (bulk, in chunks).

        ``units`` is read once, as it streams: a million units are never a list here.
        """
        token = new_token()
        with self.writes.transition() as outbox:
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
            link_run(self.session, run.uuid)
            total = self.writes.insert_units(run.id, chunks(units, chunk_size), token, now)
            run.units_total = total
            self.writes.emit(outbox, ev.RunStarted(run.uuid, type_, initiator, total), run.id)
            dispatch = Dispatch(run.id, run.uuid, type_, token, total)
        analyze_units_if_never_analyzed(self.session)
        return dispatch

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

    def fail_undispatched(self, run_id: int, reason: str, token: str | None = None) -> None:
        """The wedge guard: nothing pending under the broken dispatch's ``token`` may stay."""
        mine = () if token is None else (TaskRunUnit.dispatch_token == token,)  # None: any
        with self.writes.transition() as outbox:
            self.writes.lock_run(run_id)
            now = utcnow()
            self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.task_run_id == run_id,
                    TaskRunUnit.status == UnitStatus.PENDING,
                    not_deleted(TaskRunUnit),
                    *mine,
                )
                .values(
                    status=UnitStatus.FAILED,
                    **stored_reason(bounded(reason)),
                    failure_kind=VENDOR,
                    stack=None,
                    finished_at=now,
                    updated_at=now,
                )
            )
            self.writes.close_if_done(run_id, outbox)

    # -- executing a unit ----------------------------------------------------------

    def pending_with(self, unit_id: int, token: str) -> bool:
        """Whether the unit is still pending under ``token`` (one primary-key read).

        What a throttled job asks before it spends a rate-limit slot: a duplicated,
        superseded or settled job must not use up a window the live ones need.
        """
        found = self.session.execute(
            select(TaskRunUnit.id)
            .join(TaskRun, TaskRun.id == TaskRunUnit.task_run_id)
            .where(
                TaskRunUnit.id == unit_id,
                TaskRunUnit.dispatch_token == token,
                TaskRunUnit.status == UnitStatus.PENDING,
                NOT_PAUSED,
            )
        ).first()
        self.session.rollback()
        return found is not None

    def claim(self, unit_id: int, token: str) -> Claim | None:
        """The gate: pending → running (+1 attempt) for the job holding the current token.

        The worker's first transaction: one statement on the thread's hot connection.
        """
        end_open_session()
        params = {"unit_id": unit_id, "token": token, "now": utcnow()}

        def gate(conn: Connection) -> tuple[Any, ...] | None:
            if runs_on_driver(conn):
                fast = conn.dialect.name != "sqlite" and fast_commits()
                return first_row(conn, GATE_FAST if fast else GATE, params)
            return conn.execute(GATE, params).first()

        row = hot_transaction(gate)
        if row is None:
            return None
        run_id, unit_key, tenant_id, attempts, run_uuid = row
        unit = TaskUnit(unit_key, tenant_id)
        return Claim(unit_id, run_info(run_id, run_uuid), unit, attempts, token)

    def complete_and_look(self, claim: Claim) -> Settled:
        """The worker's second transaction: complete the unit, and look for another active one.

        ``maybe_last`` is the tail of the run (or a look that met only units other
        transactions were writing): the caller then runs ``finalize``. Elsewhere nothing
        more is paid for finalization (see ``COMPLETE_AND_LOOK``).
        """
        end_open_session()  # the job's own writes are kept, as before any transition
        params = {
            "unit_id": claim.unit_id,
            "token": claim.token,
            "now": utcnow(),
            "run_id": claim.run.id,
        }

        def settle(conn: Connection) -> Settled:
            if conn.dialect.name == "sqlite":
                if runs_on_driver(conn):
                    row = first_row(conn, COMPLETE_AND_LOOK_SQLITE, params)
                else:
                    row = conn.execute(COMPLETE_AND_LOOK_SQLITE, params).first()
                return Settled(row is not None, row is not None and row[0] is None)
            statement = COMPLETE_AND_LOOK_FAST if fast_commits() else COMPLETE_AND_LOOK
            settled, other_id = first_row(conn, statement, params)
            return Settled(settled == 1, settled == 1 and other_id is None)

        return hot_transaction(settle)

    def complete(self, claim: Claim) -> bool:
        with write_transaction(self.session):
            result = self.session.connection().execute(
                COMPLETE, {"unit_id": claim.unit_id, "token": claim.token, "now": utcnow()}
            )
        return result.rowcount == 1

    def fail(
        self,
        claim: Claim,
        reason: str,
        kind: str | None = None,
        stack: list[dict[str, Any]] | None = None,
    ) -> bool:
        """The unit failed: its reason, kind (told by the reason when not given) and frames."""
        with self.writes.transition() as outbox:
            now = utcnow()
            reason = bounded(reason)
            kind = stored_kind(kind, reason)
            result = self.session.execute(
                owned(claim).values(
                    status=UnitStatus.FAILED,
                    finished_at=now,
                    updated_at=now,
                    **stored_reason(reason),
                    failure_kind=kind,
                    stack=stack or None,
                )
            )
            if result.rowcount != 1:
                return False
            self.writes.emit(
                outbox,
                ev.UnitFailed(
                    claim.run.uuid,
                    claim.run.type,
                    claim.unit.key,
                    claim.unit.tenant_id,
                    claim.attempts,
                    reason,
                    kind,
                ),
                claim.run.id,
            )
        return True

    def hand_back(self, unit_id: int, token: str) -> tuple[str, str] | None:
        """A unit whose worker is stopping goes back to pending with a new token.

        Running (its job was interrupted) or still pending with this job's token (the
        interrupt came before the gate): either way the job is gone and a new one is due.
        A new episode starts, so a later stale state is notified again. Returns the new
        token and the run's type, or None when this job no longer held the unit.
        """
        new = new_token()
        now = utcnow()
        with write_transaction(self.session):
            type_ = self.session.execute(
                update(TaskRunUnit)
                .where(
                    TaskRunUnit.id == unit_id,
                    TaskRunUnit.dispatch_token == token,
                    TaskRunUnit.status.in_(ACTIVE),
                )
                .values(**redispatched(new, now))
                .returning(
                    select(TaskRun.type)
                    .where(TaskRun.id == TaskRunUnit.task_run_id)
                    .scalar_subquery()
                )
                .execution_options(synchronize_session=False)
            ).scalar_one_or_none()
        return (new, type_) if type_ is not None else None

    def heartbeat(self, owned: Iterable[tuple[int, str]]) -> None:
        """Refresh running units still held by these (unit id, dispatch token) jobs.

        The token keeps a job superseded by a retry from making the new attempt look alive.
        """
        pairs = list(owned)
        if not pairs:
            return
        with write_transaction(self.session):
            self.session.execute(
                update(TaskRunUnit)
                .where(
                    tuple_(TaskRunUnit.id, TaskRunUnit.dispatch_token).in_(pairs),
                    TaskRunUnit.status == UnitStatus.RUNNING,
                )
                .values(heartbeat_at=utcnow())
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
        with self.writes.transition() as outbox:
            if self.writes.lock_run(run_id) is None:
                return None  # pruned: a late job of a deleted run has nothing to close
            return self.writes.close_if_done(run_id, outbox)

    def live_unit_tokens(self, pairs: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
        """Which (unit id, dispatch token) pairs still name an active unit's current job."""
        wanted = list(pairs)
        live: set[tuple[int, str]] = set()
        # 5,000 ids per read: the leftovers of a cancelled million-unit run are read in 200.
        for start in range(0, len(wanted), 5000):
            chunk = wanted[start : start + 5000]
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
