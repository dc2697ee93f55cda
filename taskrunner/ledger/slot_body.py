"""The run a periodic slot's body starts, linked to the slot in the run's own transaction.

A consumer stopping mid-body gives the slot back to run again (``ScheduleSlots.hand_back``)
only while no run of it is recorded: a body stopped after its run's commit must not start
a second run when the slot runs again.
"""

from __future__ import annotations

from contextvars import ContextVar
from datetime import datetime

from sqlalchemy import update
from sqlalchemy.orm import Session

from taskrunner.models import ScheduleSlot

# The claimed slot whose body runs in this context, when the body is declared to start a
# run (``@periodic(starts=...)``): (schedule name, slot).
SLOT_BODY: ContextVar[tuple[str, datetime] | None] = ContextVar("slot_body", default=None)


def link_run(session: Session, run_uuid: str) -> None:
    """Note ``run_uuid`` on the slot whose body runs in this context, if any."""
    if (body := SLOT_BODY.get()) is not None:
        session.execute(
            update(ScheduleSlot)
            .where(ScheduleSlot.name == body[0], ScheduleSlot.slot == body[1])
            .values(run_uuid=run_uuid)
            .execution_options(synchronize_session=False)
        )
