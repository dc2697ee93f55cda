"""The slot keeper the Huey wiring claims periodic slots through (``tasks.slots``).

The wiring claims a slot, runs its body, and says how the body ended: the keeper records
it in the ledger. A body stopped by its consumer's shutdown is handed back: its slot is
claimable again by the job the wiring enqueues anew, unless the run the body started is
already recorded (``ledger.slot_body``), so a slot never starts two runs.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from taskrunner import schedules
from taskrunner.ledger import ledger
from taskrunner.ledger.slot_body import SLOT_BODY
from taskrunner.redaction import redact
from tasks import slots as slot_wiring
from tasks.routing import routes


class LedgerSlotKeeper:
    """The slot keeper the Huey wiring claims through (``tasks.slots.SlotKeeper``)."""

    def paused(self, name: str, slot: datetime, host: str) -> bool:
        return ledger.schedules.skip_paused(name, slot, host)

    def claim(
        self, name: str, slot: datetime, host: str, enqueued_at: datetime | None, initiator: str
    ) -> bool:
        claimed = ledger.schedules.claim(name, slot, host, enqueued_at, initiator)
        # Only a body declared to start a run links one (a sweep's event subscribers may
        # start runs of their own).
        starts = getattr(routes.periodic.get(name), "starts", None)
        SLOT_BODY.set((name, slot) if claimed and starts else None)
        return claimed

    def finished(
        self, name: str, slot: datetime, error: BaseException | None, run_uuid: str | None
    ) -> None:
        SLOT_BODY.set(None)
        _afresh()  # whatever the body, or a first record a stop cut short, left open
        reason = redact(error) if error is not None else None
        schedules.settle_gap(name, slot)
        ledger.schedules.finish(name, slot, reason, run_uuid)

    def handed_back(self, name: str, slot: datetime, host: str) -> bool:
        SLOT_BODY.set(None)
        _afresh()
        run_uuid = ledger.schedules.hand_back(name, slot, host)
        if run_uuid is not None:  # its run is recorded: the slot is the run's, not run again
            self.finished(name, slot, None, run_uuid)
        return run_uuid is None


def _afresh() -> None:
    """Leave the transaction a body left (a statement that failed, a COMMIT a stop signal
    cut short): what the slot keeper records next goes on a transaction of its own."""
    try:
        ledger.session.rollback()
    except Exception:
        ledger.session.close()  # a connection beyond a rollback: the pool drops it


def init_app(app: Any) -> None:
    slot_wiring.bind(app, LedgerSlotKeeper())
