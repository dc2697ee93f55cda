"""Publishing a package's own events through the runner's outbox.

A package that keeps tables of its own (the alerts) changes them and writes the events
the change causes in one transaction, as the ledger does for its transitions: both
commit, or neither. After the commit the events are handed to their subscribers here,
or (``deliver=False``) left for the caller to hand over from a job of its own, so that
a slow subscriber never runs inside the process whose transaction wrote them; the relay
delivers whatever neither did.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select

from database import write_transaction
from extensions import db
from taskrunner import delivery
from taskrunner import events as ev
from taskrunner.ledger.records import Actor
from taskrunner.ledger.writes import Writes
from taskrunner.models import OutboxEvent


class Publisher:
    """One transaction's events and operator actions, written in that transaction."""

    def __init__(self, writes: Writes) -> None:
        self._writes = writes
        self.outbox: list[dict[str, Any]] = []

    def emit(self, event: ev.Event) -> str:
        """Write ``event`` to the outbox; return its event id."""
        self._writes.emit(self.outbox, event, None)
        return self.outbox[-1]["id"]

    def record_action(self, action: str, actor: Actor, detail: dict[str, Any]) -> None:
        """The operator audit of an action on no run (who, from where, what)."""
        self._writes.record_action(None, action, actor, detail)


@contextmanager
def publishing(deliver: bool = True) -> Iterator[Publisher]:
    """One write transaction on the app's session, its events delivered after the commit
    (``deliver``) or left for ``deliver_events``."""
    publisher = Publisher(Writes(db.session))
    with write_transaction(db.session):
        yield publisher
    if deliver:
        delivery.deliver(publisher.outbox)


def deliver_events(event_ids: Iterable[str]) -> int:
    """Hand the named events over, those not yet delivered, in the order they were written."""
    wanted = list(event_ids)
    if not wanted:
        return 0
    rows = [
        delivery.event_dict(row)
        for row in db.session.execute(
            select(OutboxEvent)
            .where(OutboxEvent.event_id.in_(wanted), OutboxEvent.delivered_at.is_(None))
            .order_by(OutboxEvent.id)
        ).scalars()
    ]
    db.session.rollback()
    delivery.deliver(rows)
    return len(rows)
