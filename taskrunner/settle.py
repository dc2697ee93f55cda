"""Settle a run in this process, without a queue: the demo seed's finished sweeps.

The units go through the ledger's own transitions (claim, then complete, or fail with
the redacted reason of what the work raised), so the run looks exactly like one the
consumers settled, failures and events included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from taskrunner.failures import Failure
from taskrunner.ledger import ledger
from taskrunner.types import TaskUnit
from taskrunner.unit_rules import checked_units

INSERT_CHUNK = 1000


def settle_here(
    type_: str,
    context: dict[str, Any],
    initiator: str,
    units: Iterable[TaskUnit],
    work: Callable[[TaskUnit], None],
) -> str:
    """Record a run whose units ``work`` settles here, through the ledger's own transitions.

    Each unit is claimed, then completed, or failed with the redacted reason of what
    ``work`` raised; no queue is involved. Returns the run's uuid.
    """
    units = list(checked_units(units))
    dispatch = ledger.transitions.create_run(type_, context, initiator, units, INSERT_CHUNK)
    for unit_id in ledger.transitions.dispatch_batch(dispatch, 0, len(units) + 1):
        claim = ledger.transitions.claim(unit_id, dispatch.token)
        if claim is None:
            continue
        try:
            work(claim.unit)
        except Exception as exc:
            ledger.session.rollback()
            failure = Failure.of(exc)
            ledger.transitions.fail(claim, failure.reason, failure.kind, failure.stack)
        else:
            ledger.transitions.complete(claim)
    ledger.transitions.finalize(dispatch.run_id)
    return dispatch.run_uuid
