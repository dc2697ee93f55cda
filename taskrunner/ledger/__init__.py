"""The ledger: the only code that reads and writes the task-runner tables.

One object, ``ledger``, composed of one mixin per responsibility; most modules of
this package hold one of them (``docs/architecture.md`` has the table). The mixins
share ``LedgerBase`` (the session, a write transaction with its outbox, the run
lock and close) and may call each other's methods through the composed class (the
sweep finalizes runs, the strip rolls up throughput). The rest of the house imports
the ledger's names from here, never from the modules inside; those import each
other, never this facade (an import cycle otherwise).
"""

from __future__ import annotations

from taskrunner.ledger.attention import Attention, AttentionReads, Bucket, Throughput
from taskrunner.ledger.errors import ErrorGroup, ErrorReads, folded_reason, normalize_reason
from taskrunner.ledger.fleet import FleetReads
from taskrunner.ledger.hot import forget_cached_runs, release_hot_connection
from taskrunner.ledger.metrics import (
    DURATION_BOUNDS,
    ActiveUnits,
    Durations,
    LedgerMetrics,
    stale_counts,
)
from taskrunner.ledger.operations import OperatorActions
from taskrunner.ledger.prune import Pruning
from taskrunner.ledger.records import EXPIRED, Claim, Dispatch, PruneReport, RunInfo, Settled
from taskrunner.ledger.runs import (
    RUN_STATUSES,
    UNIT_STATUSES,
    InvalidCursor,
    Page,
    RunReads,
    is_uuid,
)
from taskrunner.ledger.single_jobs import SingleJobs
from taskrunner.ledger.stale_rules import StaleCutoffs
from taskrunner.ledger.stuck import StuckSweep
from taskrunner.ledger.throughput import ThroughputRollup
from taskrunner.ledger.transitions import Transitions


class TaskRunLedger(
    Transitions,
    OperatorActions,
    StuckSweep,
    SingleJobs,
    Pruning,
    ThroughputRollup,
    RunReads,
    ErrorReads,
    FleetReads,
    AttentionReads,
):
    """Every read and write of the task-runner tables, behind one object."""


ledger = TaskRunLedger()

__all__ = [
    "DURATION_BOUNDS",
    "EXPIRED",
    "RUN_STATUSES",
    "UNIT_STATUSES",
    "ActiveUnits",
    "Attention",
    "Bucket",
    "Claim",
    "Dispatch",
    "Durations",
    "ErrorGroup",
    "InvalidCursor",
    "LedgerMetrics",
    "Page",
    "PruneReport",
    "RunInfo",
    "Settled",
    "StaleCutoffs",
    "TaskRunLedger",
    "Throughput",
    "folded_reason",
    "forget_cached_runs",
    "is_uuid",
    "ledger",
    "normalize_reason",
    "stale_counts",
    "release_hot_connection",
]
