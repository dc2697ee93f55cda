"""Schedule slots and schedule states: claims, how slots ended, pauses, missed episodes.

A slot row is written once by the claim (primary key (name, slot): one claim through)
and finished by the body's end. A slot nobody claimed within its grace is written
``missed`` by the watch, which opens the schedule's missed episode with its one
``tasks.schedule.missed`` event; the next slot a scheduler runs closes it with
``tasks.schedule.recovered`` (an operator's run now is no scheduler back). Both happen in
the transaction that writes the rows, so a second watcher or a second host sees the
episode already open (or closed).

A body stopped by its consumer's shutdown gives its claim back (``handed_back``) for the
slot's job enqueued anew, unless the run it started is already recorded: the run a body
declared to start one starts is linked to the slot in the run's own transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime

from sqlalchemy import Row, Table, and_, delete, func, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from database import is_sqlite, iso, utcnow, write_transaction
from taskrunner import events as ev
from taskrunner.ledger.records import Actor
from taskrunner.ledger.schedule_reads import (
    BY_SCHEDULER,
    HANDED_BACK,
    MISSED,
    PAUSED,
    SCHEDULER,
    ScheduleReads,
    by_scheduler,
)
from taskrunner.ledger.writes import Writes, lock_row
from taskrunner.models import ScheduleSlot, ScheduleState

NOT_TAKEN_AGAIN = "; not taken again within its grace"
LOST = "worker lost: "  # how the stuck sweep's end of a slot reads


class ScheduleSlots(ScheduleReads):
    """Every write of ``periodic_slots`` and ``schedule_states``, and their reads."""

    def __init__(self, session: Session, writes: Writes) -> None:
        self.session = session
        self.writes = writes

    def _insert(self, target: type | Table) -> postgresql.Insert | sqlite.Insert:
        dialect = sqlite if is_sqlite(self.session) else postgresql
        return dialect.insert(target)

    def _know(self, names: Iterable[str], now: datetime) -> None:
        rows = [{"name": name, "first_known_at": now, "missed_slots": 0} for name in names]
        if rows:
            self.session.execute(
                self._insert(ScheduleState).on_conflict_do_nothing(index_elements=["name"]),
                rows,
            )

    # -- writes -------------------------------------------------------------------

    def register(self, names: Iterable[str], now: datetime | None = None) -> None:
        """Note schedules the app knows from now on (a schedule already known keeps its date)."""
        with write_transaction(self.session):
            self._know(list(names), now or utcnow())

    def claim(
        self,
        name: str,
        slot: datetime,
        host: str,
        enqueued_at: datetime | None = None,
        initiator: str = SCHEDULER,
        now: datetime | None = None,
    ) -> bool:
        """True for the one caller that may run ``name`` for ``slot``; False for every other.

        A slot the watch wrote missed is still claimed by its late job (one claim through,
        as for any slot): a queue running behind its graces must not stop a schedule; so
        is a slot handed back, by its job enqueued anew.
        """
        now = now or utcnow()
        table = ScheduleSlot.__table__
        claimed = {
            "claimed_at": now,
            "claimed_by": host,
            "enqueued_at": enqueued_at,
            "initiator": initiator,
        }
        stmt = (
            self._insert(ScheduleSlot)
            .values(name=name, slot=slot, **claimed)
            .on_conflict_do_update(
                index_elements=["name", "slot"],
                set_={**claimed, "outcome": None, "finished_at": None, "reason": None},
                where=table.c.outcome.in_((MISSED, HANDED_BACK)),
            )
            .returning(table.c.name)
        )
        with write_transaction(self.session):
            self._know([name], now)
            return self.session.execute(stmt).first() is not None

    def skip_paused(
        self, name: str, slot: datetime, host: str, now: datetime | None = None
    ) -> bool:
        """True when ``name`` is paused; its slot is then recorded ``paused`` (once), a
        slot handed back too (paused before its job came again)."""
        now = now or utcnow()
        paused = {"claimed_at": now, "claimed_by": host, "finished_at": now, "outcome": PAUSED}
        with write_transaction(self.session):
            state = self.session.get(ScheduleState, name)
            if state is None or state.paused_at is None:
                return False
            self.session.execute(
                self._insert(ScheduleSlot)
                .values(name=name, slot=slot, **paused)
                .on_conflict_do_update(
                    index_elements=["name", "slot"],
                    set_={**paused, "reason": None},
                    where=ScheduleSlot.__table__.c.outcome == HANDED_BACK,
                )
            )
        return True

    def finish(
        self,
        name: str,
        slot: datetime,
        reason: str | None,
        run_uuid: str | None,
        now: datetime | None = None,
    ) -> None:
        """Record how a claimed slot's body ended; a scheduled slot's ends the schedule's
        missed episode (an operator's run now is no scheduler back: it stays open)."""
        now = now or utcnow()
        with self.writes.transition() as outbox:
            initiator = self.session.execute(
                update(ScheduleSlot)
                .where(ScheduleSlot.name == name, ScheduleSlot.slot == slot)
                .values(
                    finished_at=now,
                    outcome="raised" if reason is not None else "ok",
                    reason=reason,
                    run_uuid=run_uuid,
                )
                .returning(ScheduleSlot.initiator)
                .execution_options(synchronize_session=False)
            ).scalar()
            state = lock_row(self.session, ScheduleState, ScheduleState.name == name)
            if state is not None and state.missed_from is not None and by_scheduler(initiator):
                event = ev.ScheduleRecovered(name, state.missed_slots, iso(now) or "")
                self.writes.emit(outbox, event, None)
                state.missed_from, state.missed_slots = None, 0

    def hand_back(
        self, name: str, slot: datetime, claimer: str, now: datetime | None = None
    ) -> str | None:
        """A consumer stopping mid-body gives the slot ``claimer`` holds back to its job
        enqueued anew (also one the stuck sweep misjudged lost: this body was alive), unless
        the body's run is recorded (``slot_body``): that run's uuid then, nothing written."""
        table, now = ScheduleSlot.__table__, now or utcnow()
        mine = (table.c.name == name, table.c.slot == slot, table.c.claimed_by == claimer)
        unended = or_(table.c.outcome.is_(None), table.c.reason.startswith(LOST))
        with write_transaction(self.session):
            run_uuid = self.session.execute(select(table.c.run_uuid).where(*mine)).scalar()
            if run_uuid is None:
                reason = f"handed back on shutdown at {iso(now)}; queued again"
                self.session.execute(
                    update(table)
                    .where(*mine, unended)
                    .values(outcome=HANDED_BACK, reason=reason, enqueued_at=now)
                )
        return run_uuid

    def end_lost(
        self, claimed_before: datetime, lost: Callable[[str], bool], now: datetime | None = None
    ) -> list[Row]:
        """End as raised the slots claimed before ``claimed_before``, not ended, whose
        claimer (``host:pid``) is ``lost``: its body's worker is gone. A body that ended
        meanwhile keeps its own end. Returns the slots it ended (name, slot)."""
        table, ended = ScheduleSlot.__table__, []
        with write_transaction(self.session):
            unended = select(table.c.name, table.c.slot, table.c.claimed_by).where(
                table.c.outcome.is_(None), table.c.claimed_at < claimed_before
            )
            for name, slot, claimer in self.session.execute(unended).all():
                if not lost(claimer):
                    continue
                reason = f"{LOST}{claimer} stopped running it; the next slot catches up"
                ended += self.session.execute(
                    update(table)
                    .where(table.c.name == name, table.c.slot == slot, table.c.outcome.is_(None))
                    .where(table.c.claimed_by == claimer)
                    .values(finished_at=now or utcnow(), outcome="raised", reason=reason)
                    .returning(table.c.name, table.c.slot)
                ).all()
        return ended

    def mark_missed(
        self,
        name: str,
        slots: list[datetime],
        watched_until: datetime | None = None,
        now: datetime | None = None,
    ) -> int:
        """Write ``slots`` as missed; the first of an episode raises its one event. The
        watch notes how far it looked (``watched_until``): its next turn starts there.
        Returns how many were new (a slot claimed or marked meanwhile is left as it is; one
        still handed back, its job never taken again, is missed now)."""
        if not slots and watched_until is None:
            return 0
        now = now or utcnow()
        rows = [
            {"name": name, "slot": slot, "claimed_at": now, "claimed_by": "", "outcome": MISSED}
            for slot in slots
        ]
        with self.writes.transition() as outbox:
            self._know([name], now)
            state = lock_row(self.session, ScheduleState, ScheduleState.name == name)
            new = self._insert_new(rows)
            if watched_until is not None and state is not None:
                state.watched_until = max(watched_until, state.watched_until or watched_until)
            if new and state is not None:
                if state.missed_from is None:
                    state.missed_from = min(new)
                    state.missed_slots = len(new)
                    event = ev.ScheduleMissed(name, iso(min(new)) or "", len(new))
                    self.writes.emit(outbox, event, None)
                else:
                    state.missed_slots += len(new)
        return len(new)

    def _insert_new(self, rows: list[dict]) -> list[datetime]:
        """The slots of ``rows`` this insert wrote, or turned from handed back to missed (one
        statement for them all: a scheduler back after a year settles 105,000)."""
        if not rows:
            return []
        # On the table, not the model: a list of rows is then one executemany RETURNING.
        table = ScheduleSlot.__table__
        stmt = (
            self._insert(table)
            .on_conflict_do_update(
                index_elements=["name", "slot"],
                set_={"outcome": MISSED, "reason": table.c.reason + NOT_TAKEN_AGAIN},
                where=table.c.outcome == HANDED_BACK,
            )
            .returning(table.c.slot)
        )
        return list(self.session.execute(stmt, rows).scalars())

    def set_paused(
        self, name: str, paused: bool, actor: Actor, now: datetime | None = None
    ) -> bool:
        """Pause or resume ``name``; False when it already was. Recorded as an operator action."""
        now = now or utcnow()
        with write_transaction(self.session):
            self._know([name], now)
            state = lock_row(self.session, ScheduleState, ScheduleState.name == name)
            if (state.paused_at is not None) == paused:
                return False
            state.paused_at, state.paused_by = (now, actor.name) if paused else (None, None)
            action = "schedule-pause" if paused else "schedule-resume"
            self.writes.record_action(None, action, actor, {"schedule": name})
        return True

    def prune(self, older_than: datetime) -> int:
        """Forget slots older than the retention (the schedules keep their states).

        Kept whatever their age: a slot still running, which a copy of its job must find
        taken, and each schedule's newest slot a scheduler owed, which missed slots are
        counted from (without it, every slot since the schedule was first known read
        missed). The watch's next look starts past the slots forgotten: their gaps were
        settled when they ran, and a row gone is no slot missed.
        """
        table = ScheduleSlot.__table__
        with write_transaction(self.session):
            anchors = self.session.execute(
                select(table.c.name, func.max(table.c.slot))
                .where(BY_SCHEDULER)
                .group_by(table.c.name)
            ).all()
            doomed = and_(table.c.slot < older_than, table.c.outcome.is_not(None))
            for name, slot in anchors:
                doomed = and_(doomed, or_(table.c.name != name, table.c.slot != slot))
            forgotten = self.session.execute(
                select(table.c.name, func.max(table.c.slot)).where(doomed).group_by(table.c.name)
            ).all()
            for name, newest in forgotten:
                state = lock_row(self.session, ScheduleState, ScheduleState.name == name)
                if state is not None and (state.watched_until or newest) <= newest:
                    state.watched_until = newest
            return self.session.execute(delete(table).where(doomed)).rowcount
