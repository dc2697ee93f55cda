"""The ledger: the only code that reads and writes the task-runner tables.

One collaborator per responsibility, each a small class that takes the session and
the collaborators it calls (``docs/architecture.md`` has the table); ``ledger``
composes them once. Callers name the part they use (``ledger.transitions.claim``,
``ledger.runs.find_run``): nothing forwards, and no part reaches another except
through what its constructor was given.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from extensions import db
from taskrunner.ledger.actions import OperatorActions
from taskrunner.ledger.attention import Attention, AttentionReads
from taskrunner.ledger.compare import CompareReads, Comparison
from taskrunner.ledger.counts import RunCounts
from taskrunner.ledger.errors import ErrorGroup, ErrorReads
from taskrunner.ledger.fleet import FleetReads
from taskrunner.ledger.hot import forget_cached_runs, release_hot_connection
from taskrunner.ledger.live import LiveProbes
from taskrunner.ledger.metrics import (
    DURATION_BOUNDS,
    ActiveUnits,
    Durations,
    LedgerMetrics,
    stale_counts,
)
from taskrunner.ledger.prune import Pruning
from taskrunner.ledger.records import (
    CLI,
    EXPIRED,
    RUN_STATUSES,
    UNIT_STATUSES,
    Actor,
    Claim,
    Dispatch,
    InvalidCursor,
    Page,
    PruneReport,
    is_uuid,
)
from taskrunner.ledger.runs import RunReads
from taskrunner.ledger.schedules import ScheduleSlots
from taskrunner.ledger.single_jobs import SingleJobs
from taskrunner.ledger.sweeps import StuckSweep
from taskrunner.ledger.throughput import Bucket, Throughput, ThroughputRollup
from taskrunner.ledger.transitions import Transitions
from taskrunner.ledger.writes import Writes


class Ledger:
    """Every read and write of the task-runner tables, one part per responsibility."""

    def __init__(self, session: Session) -> None:
        self.session = session
        writes = Writes(session)
        self.runs = RunReads(session)
        self.counts = RunCounts(session)
        self.live = LiveProbes(session)
        self.errors = ErrorReads(session)
        self.compare = CompareReads(session, self.errors)
        self.fleet = FleetReads(session)
        self.attention = AttentionReads(session)
        self.throughput = ThroughputRollup(session)
        self.transitions = Transitions(session, writes)
        self.actions = OperatorActions(session, writes)
        self.sweeps = StuckSweep(session, writes, self.transitions)
        self.single_jobs = SingleJobs(session, writes)
        self.pruning = Pruning(session, writes)
        self.schedules = ScheduleSlots(session, writes)


ledger = Ledger(db.session)

__all__ = [
    "CLI",
    "DURATION_BOUNDS",
    "EXPIRED",
    "RUN_STATUSES",
    "UNIT_STATUSES",
    "ActiveUnits",
    "Actor",
    "Attention",
    "Bucket",
    "Claim",
    "Comparison",
    "Dispatch",
    "Durations",
    "ErrorGroup",
    "InvalidCursor",
    "Ledger",
    "LedgerMetrics",
    "Page",
    "PruneReport",
    "Throughput",
    "forget_cached_runs",
    "is_uuid",
    "ledger",
    "stale_counts",
    "release_hot_connection",
]
