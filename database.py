"""Engine behaviour shared by every module: SQLite pragmas, transactions, time.

On SQLite the run lock is the database write lock, taken at the start of the
transaction with ``BEGIN IMMEDIATE``; a deferred transaction that reads first
and writes later could fail with "database is locked" when it upgrades, without
waiting for ``busy_timeout``. pysqlite's own transaction handling is switched
off so that SQLAlchemy's ``begin`` event decides which BEGIN is sent.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

IMMEDIATE = "taskledger_begin_immediate"


def utcnow() -> datetime:
    """Naive UTC: the same on SQLite and PostgreSQL columns."""
    return datetime.now(UTC).replace(tzinfo=None)


def is_sqlite(bind: Engine | Session) -> bool:
    engine = bind.get_bind() if hasattr(bind, "get_bind") else bind
    return engine.dialect.name == "sqlite"


def configure_engine(engine: Engine) -> None:
    """Install the SQLite pragmas and BEGIN handling on an engine."""
    if engine.dialect.name != "sqlite":
        return

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA busy_timeout=30000")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn):
        immediate = conn.get_execution_options().get(IMMEDIATE)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


@contextmanager
def write_transaction(session: Session) -> Iterator[Session]:
    """One transaction that may read before it writes; commits or rolls back.

    On SQLite it holds the database write lock from its first statement.
    """
    # A transaction already open (autobegun by a read) must not swallow this one.
    session.commit()
    session.connection(execution_options={IMMEDIATE: True})
    try:
        yield session
    except BaseException:
        session.rollback()
        raise
    else:
        session.commit()
