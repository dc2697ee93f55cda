"""Planner statistics for the units table, gathered once when the server never did.

The worker's look for another active unit of its run (``hot.COMPLETE_AND_LOOK``) is
cheap only while PostgreSQL walks ``ix_task_run_units_run_status`` backwards from the
run's newest unit. With statistics of any age it does, even ones taken when the table
held four rows. On a table never analyzed (a new deployment before autovacuum's first
pass, or a server running without autovacuum) it guesses a run has a handful of units,
reads every active unit of the run through another index and sorts them: at 4,000
active units, 3 to 10 ms per completion instead of 0.1 to 0.2 ms, on every unit
(bench/RESULTS.md, bench.bench_throughput's notes). The run that finds the table
without statistics gathers them once, after its units are in.
"""

from __future__ import annotations

from sqlalchemy import text
from sqlalchemy.orm import Session

from database import write_transaction

NEVER_ANALYZED = text(
    "SELECT NOT EXISTS (SELECT 1 FROM pg_stats WHERE schemaname = current_schema() "
    "AND tablename = 'task_run_units' AND attname = 'task_run_id')"
)


def analyze_units_if_never_analyzed(session: Session) -> bool:
    """ANALYZE the units table (and the runs) when it has no statistics; whether it did."""
    if session.get_bind().dialect.name != "postgresql":
        return False  # SQLite plans the look on the index without statistics
    with write_transaction(session):
        if not session.execute(NEVER_ANALYZED).scalar_one():
            return False
        # A lock ANALYZE shares with writers: units keep being claimed and settled.
        session.execute(text("ANALYZE task_runs, task_run_units"))
    return True
