"""The operator actions on a schedule: run now, pause, resume (recorded as operator actions)."""

from __future__ import annotations

from datetime import datetime

from database import utcnow
from taskrunner.ledger import Actor, ledger
from taskrunner.schedules import known, schedule
from taskrunner.types import Refused
from tasks.queues import queues


def previous_run_running(name: str) -> str | None:
    """The uuid of the schedule's newest slot's run while that run still runs."""
    last = schedule(name, limit=1).last_slot
    if last is not None and last.state in ("running", "late") and last.run_uuid:
        return last.run_uuid
    return None


def run_now(
    name: str, actor: Actor, confirmed: bool = False, now: datetime | None = None
) -> datetime:
    """Enqueue a slot of ``name`` now, the way its scheduler does (initiator ``operator:…``).

    Refused while the schedule's previous run still runs, unless ``confirmed`` again.
    """
    known(name)
    running = previous_run_running(name)
    if running and not confirmed:
        raise Refused(
            f"{name}: its previous run {running} is still running; confirm again to start another"
        )
    slot = (now or utcnow()).replace(microsecond=0)
    ledger.schedules.record_run_now(name, slot, actor)
    queues().enqueue_slot(name, slot, f"operator:{actor.name}")
    return slot


def pause(name: str, actor: Actor, now: datetime | None = None) -> bool:
    """Pause ``name``: every scheduler skips its slots from its next check. False: it was."""
    known(name)
    return ledger.schedules.set_paused(name, True, actor, now)


def resume(name: str, actor: Actor, now: datetime | None = None) -> bool:
    """Resume ``name``; False when it was not paused."""
    known(name)
    return ledger.schedules.set_paused(name, False, actor, now)
