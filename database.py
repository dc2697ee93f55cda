"""Engine behaviour shared by every module: SQLite pragmas, transactions, time.

On SQLite the run lock is the database write lock, taken at the start of the
transaction with ``BEGIN IMMEDIATE``; a deferred transaction that reads first
and writes later could fail with "database is locked" when it upgrades, without
waiting for ``busy_timeout``. pysqlite's own transaction handling is switched
off so that SQLAlchemy's ``begin`` event decides which BEGIN is sent.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from security.files import private_file

IMMEDIATE = "taskledger_begin_immediate"
# How long a client should wait before asking again while the database cannot answer.
OUTAGE_RETRY_SECONDS = 5


def utcnow() -> datetime:
    """Naive UTC: the same on SQLite and PostgreSQL columns."""
    return datetime.now(UTC).replace(tzinfo=None)


def iso(value: datetime | None) -> str | None:
    """A naive UTC time as ISO-8601 with a ``Z``, to the second (what JSON shows)."""
    return value.isoformat(timespec="seconds") + "Z" if value else None


def is_sqlite(bind: Engine | Session) -> bool:
    engine = bind.get_bind() if hasattr(bind, "get_bind") else bind
    return engine.dialect.name == "sqlite"


def postgres_connect_args(config: Mapping[str, Any]) -> dict[str, Any]:
    """libpq settings with which no PostgreSQL connection waits forever on a dead network.

    ``connect_timeout`` bounds a connection attempt; TCP keepalives find a silent peer
    while a statement waits for its answer, and ``tcp_user_timeout`` breaks a connection
    whose sent data stays unacknowledged (a partition mid-statement) after
    ``NETWORK_DEAD_PEER_SECONDS``. A partition shorter than that is ridden out: the
    statement completes when the link comes back.

    The server's end gets the same settings (``options``): a host that vanished in the
    middle of a transaction would otherwise keep its row locks for the operating
    system's two hours of keepalive silence; after about the dead-peer time the server
    drops the session, rolls it back and the locks go.
    """
    dead_peer = max(2, int(config["NETWORK_DEAD_PEER_SECONDS"]))
    idle, interval = max(1, dead_peer // 4), max(1, dead_peer // 8)
    return {
        "connect_timeout": max(1, int(config["NETWORK_CONNECT_TIMEOUT_SECONDS"])),
        "keepalives": 1,
        "keepalives_idle": idle,
        "keepalives_interval": interval,
        "keepalives_count": 3,
        "tcp_user_timeout": dead_peer * 1000,
        "options": (
            f"-c tcp_keepalives_idle={idle} -c tcp_keepalives_interval={interval} "
            f"-c tcp_keepalives_count=3 -c tcp_user_timeout={dead_peer * 1000}"
        ),
    }


def engine_options(config: Mapping[str, Any]) -> dict[str, Any]:
    """SQLAlchemy engine options: a pooled connection is checked before use, and on
    PostgreSQL every connection carries ``postgres_connect_args``."""
    options = dict(config.get("SQLALCHEMY_ENGINE_OPTIONS") or {})
    options.setdefault("pool_pre_ping", True)
    # Whatever a deployment passes, statement parameters stay out of exception messages.
    options["hide_parameters"] = True
    if str(config.get("SQLALCHEMY_DATABASE_URI", "")).startswith("postgresql"):
        options["connect_args"] = {
            **postgres_connect_args(config),
            **options.get("connect_args", {}),
        }
    return options


def name_connections(engine: Engine, name: str) -> None:
    """Name each PostgreSQL connection of ``engine`` after this process when it is made
    (``application_name``: ``name``, the pid, ``ledger``), so ``pg_stat_activity`` tells
    which process holds what; the pid is read at connect time, after any fork."""
    if engine.dialect.name != "postgresql":
        return

    @event.listens_for(engine, "do_connect")
    def _named(_dialect, _record, _cargs, cparams):
        cparams["application_name"] = f"{name} {os.getpid()} ledger"[:63]


def configure_engine(engine: Engine) -> None:
    """Install the SQLite pragmas, BEGIN handling and a private database file on an engine."""
    if engine.dialect.name != "sqlite":
        return
    database = engine.url.database
    if database and database != ":memory:" and not database.startswith("file:"):

        @event.listens_for(engine, "do_connect")
        def _private(_dialect, _record, _cargs, _cparams):
            # SQLite would create the file (and its -wal and -shm files, which take the
            # file's mode) readable by everyone under the usual umask.
            private_file(Path(database))

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


@dataclass(frozen=True)
class Outage:
    """Why the database could not answer: a summary anyone may read, and the driver's cause."""

    summary: str
    cause: str

    def __str__(self) -> str:
        return f"{self.summary}: {self.cause}"


def database_outage(exc: BaseException) -> Outage | None:
    """The outage ``exc`` reports, when it says the database could not answer: a refused or
    dropped connection, a server shutting down, no pooled connection free, a lock not
    granted in time. ``None`` for any other error: a bug stays a bug.

    The cause is the driver's first line, never SQLAlchemy's message (it carries the
    statement).
    """
    if isinstance(exc, sa_exc.TimeoutError):
        return Outage("no database connection came free", _first_line(exc))
    if not isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return None
    cause = _first_line(exc.orig)
    if exc.statement is None:
        # Raised while connecting (a new connection, or the pre-ping's replacement).
        return Outage("the database refused the connection", cause)
    if exc.connection_invalidated or isinstance(exc, sa_exc.InterfaceError):
        return Outage("the database closed the connection", cause)
    return Outage("the database could not answer", cause)


def _first_line(error: BaseException | None) -> str:
    lines = str(error or "").strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__
