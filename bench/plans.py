"""What the benchmarks ask of PostgreSQL's planner: every statement a request sends, explained.

``statements_of(app, request)`` records each SELECT the request sends (SQLAlchemy's
``before_cursor_execute`` on the app's engine), with its parameters; ``seq_scans`` runs
``EXPLAIN`` on each with those same parameters and returns the statements whose plan
reads ``task_run_units`` sequentially. A page that scans that table costs what the
ledger holds, not what it shows: the benchmarks want none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sqlalchemy import event

TABLE = "task_run_units"


def statements_of(app, request: Callable[[], Any]) -> list[tuple[str, Any]]:
    """The SELECT statements (with their parameters) that ``request()`` sends."""
    from extensions import db

    sent: list[tuple[str, Any]] = []

    def record(conn, cursor, statement, parameters, context, executemany) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "WITH")):
            sent.append((statement, parameters))

    with app.app_context():
        engine = db.engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        request()
    finally:
        event.remove(engine, "before_cursor_execute", record)
    return sent


def seq_scans(app, sent: list[tuple[str, Any]], table: str = TABLE) -> list[str]:
    """The statements of ``sent`` whose plan reads ``table`` sequentially (once per scan)."""
    from extensions import db

    with app.app_context():
        engine = db.engine
    offending: list[str] = []
    raw = engine.raw_connection()
    try:
        cursor = raw.cursor()
        for statement, parameters in sent:
            cursor.execute("EXPLAIN " + statement, parameters)
            plan = "\n".join(row[0] for row in cursor.fetchall())
            offending += [statement] * plan.count(f"Seq Scan on {table}")
        raw.rollback()
    finally:
        raw.close()
    return offending


def named(statement: str, width: int = 120) -> str:
    """One line of a statement, short enough for a benchmark's notes."""
    line = " ".join(statement.split())
    return line if len(line) <= width else line[: width - 1] + "…"
