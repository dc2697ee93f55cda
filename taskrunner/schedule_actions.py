"""The operator actions on a schedule: run now, pause, resume (recorded as operator actions).

A run now's slot is the moment it was asked for, to the microsecond: a schedule's own slots
are whole seconds, so a run now never takes a scheduled slot's claim (one at second 0 is
moved a microsecond on), and two confirmed within one second are two slots, each run.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from database import utcnow
from taskrunner.ledger import Actor, ledger
from taskrunner.redaction import redact
from taskrunner.runner import INITIATOR_LENGTH, recording
from taskrunner.schedules import EPSILON, known, schedule
from taskrunner.types import Refused
from tasks.outages import outage_of
from tasks.queues import queues

logger = logging.getLogger(__name__)


def unfinished(
    name: str, now: datetime | None = None, release: bool = True
) -> tuple[str, str] | None:
    """What another "run now" of ``name`` would start beside, as (what names it, in words):
    the slot an earlier "run now" enqueued while no scheduler has taken it (within the
    schedule's grace: later, its job was lost), else the newest slot's run while it runs
    (named second: once a run now confirmed beside that run is enqueued, it is what the
    next would start beside). ``release=False`` reads inside the caller's transaction."""
    view = schedule(name, now, limit=1, release=release)
    if queued := _queued(name, view.grace_seconds, now):
        return queued
    last = view.last_slot
    if last is not None and last.state in ("running", "late") and last.run_uuid:
        return last.run_uuid, f"its previous run {last.run_uuid} is still running"
    return None


def _queued(name: str, grace_seconds: int, now: datetime | None) -> tuple[str, str] | None:
    asked = next(
        (
            a
            for a in ledger.actions.on_schedule(name)
            if a.action == "schedule-run-now" and "failed" not in a.detail
        ),
        None,
    )
    if asked is None:
        return None
    slot = datetime.fromisoformat(asked.detail["slot"].removesuffix("Z"))
    if slot < (now or utcnow()) - timedelta(seconds=grace_seconds):
        return None
    if ledger.schedules.slots_in(name, slot - EPSILON, slot):
        return None  # a worker took it
    named = slot_text(slot)
    return named, f"the slot {named} an earlier run now enqueued has not started yet"


def slot_text(slot: datetime) -> str:
    """A slot as ISO-8601 UTC, its microseconds kept: each run now's says which it is."""
    return slot.isoformat() + "Z"


class Unconfirmed(Refused):
    """Refused until confirmed: the page confirms with its button, the CLI with ``--yes``."""


class NotEnqueued(Refused):
    """The slot of a run now could not be enqueued (the queue could not be reached)."""


def run_now(
    name: str,
    actor: Actor,
    confirmed: bool = False,
    now: datetime | None = None,
    beside: str | None = None,
) -> datetime:
    """Enqueue a slot of ``name`` now, the way its scheduler does (initiator ``operator:…``).

    Refused while the schedule's previous run still runs, or the slot an earlier "run now"
    enqueued waits for a worker (one click twice is not two runs), unless ``confirmed``
    (``beside``: what the confirmation named; refused again when another waits now, a
    confirmation submitted twice); ``NotEnqueued`` when the queue could not be reached
    (its record says so).
    """
    known(name)

    def check() -> None:
        pending = unfinished(name, now, release=False)
        if pending and (not confirmed or beside not in (None, pending[0])):
            raise Unconfirmed(f"{name}: {pending[1]}; confirm again to start another")

    slot = now or utcnow()
    if slot.microsecond == 0:  # a whole second may be a scheduled slot: never take its claim
        slot += EPSILON
    # Recorded first: every run now a worker may run is in the audit.
    with recording(f"the run now of {name}"):
        action_id = ledger.actions.record_schedule_run_now(name, slot, actor, check)
    try:
        # Within what a run row holds: an address of up to 191 characters is an operator's.
        queues().enqueue_slot(name, slot, f"operator:{actor.name}"[:INITIATOR_LENGTH])
    except Exception as exc:
        logger.exception("Run now of %s: its slot could not be enqueued", name)
        reason = f"the queue could not be reached ({outage_of(exc) or redact(exc)})"
        _note_failed(action_id, reason)
        raise NotEnqueued(f"{name}: its slot could not be enqueued: {reason}") from exc
    return slot


def _note_failed(action_id: int, reason: str) -> None:
    # A record left as it was would block the next run now for the schedule's grace, as
    # one whose job waits; the operator is told of the queue whatever comes of it.
    try:
        ledger.actions.schedule_run_now_failed(action_id, reason)
    except Exception:
        logger.exception("A run now's record could not be marked failed")


def pause(name: str, actor: Actor, now: datetime | None = None) -> bool:
    """Pause ``name``: every scheduler skips its slots from its next check. False: it was."""
    known(name)
    with recording(f"the pause of schedule {name}"):
        return ledger.schedules.set_paused(name, True, actor, now)


def resume(name: str, actor: Actor, now: datetime | None = None) -> bool:
    """Resume ``name``; False when it was not paused."""
    known(name)
    with recording(f"the resume of schedule {name}"):
        return ledger.schedules.set_paused(name, False, actor, now)
