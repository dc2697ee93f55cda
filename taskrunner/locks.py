"""The run lock: one write transaction holding the lock of a run's row.

On PostgreSQL the row is read ``FOR NO KEY UPDATE``: run locks exclude each other, but
not the key-share lock a transaction takes when it writes a row that references the
run (a unit's event, a builder step), so a transition that holds such a row and then
writes its event never deadlocks with one that holds the run and waits for that row.
On SQLite the transaction starts with ``BEGIN IMMEDIATE``, the database write lock.
The ledger locks its runs with it, and a domain package its own (through the contract).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database import is_sqlite, write_transaction
from extensions import db


def lock_row(session: Session, model: Any, *where: Any) -> Any | None:
    """Inside a write transaction: the one row of ``model`` matching ``where``, locked and
    read under the lock (a row read before the lock may be stale by the time it is
    granted); None when there is none."""
    stmt = select(model).where(*where)
    if not is_sqlite(session):
        stmt = stmt.with_for_update(key_share=True)
    return session.execute(stmt.execution_options(populate_existing=True)).scalar_one_or_none()


@contextmanager
def run_lock(model: Any, row_id: int) -> Iterator[Any | None]:
    """One write transaction holding the lock of ``model``'s row ``row_id`` (None: gone);
    it commits when the block ends, or rolls back if it raises."""
    with write_transaction(db.session):
        yield lock_row(db.session, model, model.id == row_id)
