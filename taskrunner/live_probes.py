"""What a live page's stream polls (``blueprints.backoffice.live``): each read releases its
transaction at once, so no stream holds one while it sleeps between polls."""

from __future__ import annotations

from datetime import datetime

from taskrunner.ledger import ledger
from taskrunner.operations import released

run_ids_of = ledger.live.run_ids_of


def runs_marker(run_ids: list[int]) -> str:
    """What moves when one of these runs (or the set of runs) changes."""
    return released(lambda: f"{ledger.live.newest_run_id()}|{ledger.live.live_marker(run_ids)}")


def run_marker(run_id: int) -> str:
    return released(lambda: ledger.live.live_marker([run_id]))


def run_state(run_id: int) -> tuple[str, datetime | None]:
    """A run's status and finish time ("gone" once pruned)."""
    return released(lambda: ledger.live.run_state(run_id))
