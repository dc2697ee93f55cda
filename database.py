"""Engine behaviour shared by every module: SQLite pragmas, transactions, the clock.

On SQLite the run lock is the database write lock, taken at the start of the
transaction with ``BEGIN IMMEDIATE``; a deferred transaction that reads first
and writes later could fail with "database is locked" when it upgrades, without
waiting for ``busy_timeout``. pysqlite's own transaction handling is switched
off so that SQLAlchemy's ``begin`` event decides which BEGIN is sent.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flask import Flask, current_app, has_app_context
from sqlalchemy import create_engine, event, func, select, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session
from sqlalchemy.pool import NullPool

from security.files import private_database, refuse_foreign_database

logger = logging.getLogger(__name__)

IMMEDIATE = "taskledger_begin_immediate"
# How long a SQLite statement waits for the write lock; a write transaction first tries
# in short steps (``began_in_short_waits``).
BUSY_TIMEOUT_MS = 30_000
SHORT_WAIT_SECONDS = 0.25
FIRST_PAUSE = 0.00005
LONGEST_PAUSE = 0.002
CLOCK = "taskledger_database_clock"  # the app's ``DatabaseClock`` (None: the host's clock)
SERVER_CLOCK = "SELECT clock_timestamp() AT TIME ZONE 'UTC'"
# How long a client should wait before asking again while the database cannot answer.
OUTAGE_RETRY_SECONDS = 5


def utcnow() -> datetime:
    """Naive UTC, by the database's clock: the same on SQLite and PostgreSQL columns.

    On PostgreSQL every host reads the server's clock (``DatabaseClock``), so a host
    whose own clock is behind or ahead writes and judges the same moments as the others;
    on SQLite the one host's clock is the database's. Outside an app context (a
    consumer's presence thread) the clock of the app this process last built is used.
    """
    clock = _clock_in_use()
    return clock.now() if clock is not None else host_utcnow()


def epoch() -> float:
    """``utcnow`` as seconds since the epoch (a drain horizon travels with its job so)."""
    return utcnow().replace(tzinfo=UTC).timestamp()


def clock_offset() -> timedelta:
    """How far the database's clock is ahead of this host's (what a host time is moved by),
    to the second: less is the noise of a reading, and would move a moment on a minute's
    edge into the minute before. Nothing on SQLite, whose clock is this host's."""
    clock = _clock_in_use()
    if clock is None:
        return timedelta(0)
    return timedelta(seconds=round((clock.now() - host_utcnow()).total_seconds()))


def host_utcnow() -> datetime:
    """This host's own clock: only for what is never compared across hosts."""
    return datetime.now(UTC).replace(tzinfo=None)


class DatabaseClock:
    """The PostgreSQL server's clock, read every ``REREAD_SECONDS`` and carried forward
    between readings by this process's monotonic clock.

    A reading is ``clock_timestamp()``: the moment the server evaluates it, which pairs
    with the midpoint of the round trip here (``statement_timestamp()`` is the moment the
    statement arrived, ``now()`` the start of its transaction: both earlier by up to the
    time the server took to get to it). The error is half a round trip, plus the drift of
    the monotonic clock over one interval (microseconds); a wall-clock step or a host
    clock set wrong changes nothing, and the hot path pays no extra round trip.

    It reads on a connection of its own, made and closed for the reading: a caller in
    the middle of a transaction never waits for a second pooled connection. When the
    server cannot be read, the last reading is carried on (and read again soon); before
    any reading this host's clock stands in, with a warning.
    """

    REREAD_SECONDS = 30.0
    RETRY_SECONDS = 2.0

    def __init__(self, url: Any, options: Mapping[str, Any]) -> None:
        self.engine = create_engine(url, poolclass=NullPool, **options)
        self._lock = threading.Lock()
        # (the server's time, the monotonic moment it was read at): one attribute, so a
        # thread never pairs a new reading with an old moment.
        self._reading: tuple[datetime, float] | None = None
        self._next_read = 0.0
        self._failing = False

    def now(self) -> datetime:
        tick = time.monotonic()
        if tick >= self._next_read:
            with self._lock:
                if tick >= self._next_read:
                    self._read()
        reading = self._reading
        if reading is None:
            return host_utcnow()
        server, read_at = reading
        return server + timedelta(seconds=time.monotonic() - read_at)

    def _read(self) -> None:
        try:
            sent = time.monotonic()
            with self.engine.connect() as conn:
                server = conn.execute(text(SERVER_CLOCK)).scalar_one()
            received = time.monotonic()
        except Exception as exc:
            self._next_read = time.monotonic() + self.RETRY_SECONDS
            if not self._failing:  # one warning per outage, not one per reading
                self._failing = True
                logger.warning("The database clock could not be read: %s", _first_line(exc))
            return
        if self._failing:
            self._failing = False
            logger.info("The database clock is read again")
        self._reading = (server, (sent + received) / 2)
        self._next_read = received + self.REREAD_SECONDS


# One clock per database in a process, however many apps are built on it.
_clocks: dict[str, DatabaseClock] = {}
_last_bound: DatabaseClock | None = None


def bind_clock(app: Flask) -> None:
    """Give ``app`` the clock of its database (PostgreSQL); SQLite keeps the host's.

    Nothing is read here (building an app does no I/O): the first ``utcnow`` reads.
    """
    global _last_bound
    uri = str(app.config["SQLALCHEMY_DATABASE_URI"])
    clock = None
    if uri.startswith("postgresql"):
        options = app.config["SQLALCHEMY_ENGINE_OPTIONS"]
        # The connection settings only: pool sizes mean nothing to a connection of its own.
        only = {k: options[k] for k in ("connect_args", "hide_parameters") if k in options}
        clock = _clocks.get(uri)
        if clock is None:
            clock = _clocks.setdefault(uri, DatabaseClock(uri, only))
            # Its own short connection every 30 s, named apart from the ledger's pool.
            name_connections(clock.engine, app.config["DATABASE_APPLICATION_NAME"], "clock")
    app.extensions[CLOCK] = clock
    _last_bound = clock


def _clock_in_use() -> DatabaseClock | None:
    if has_app_context():
        return current_app.extensions.get(CLOCK)
    return _last_bound


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


def name_connections(engine: Engine, name: str, role: str = "ledger") -> None:
    """Name each PostgreSQL connection of ``engine`` after this process when it is made
    (``application_name``: ``name``, the pid, ``role``), so ``pg_stat_activity`` tells
    which process holds what; the pid is read at connect time, after any fork."""
    if engine.dialect.name != "postgresql":
        return

    @event.listens_for(engine, "do_connect")
    def _named(_dialect, _record, _cargs, cparams):
        cparams["application_name"] = f"{name} {os.getpid()} {role}"[:63]


# The SQL function that lowers every letter, as PostgreSQL's lower() does in a UTF-8 locale
# (``lowered``).
UNICODE_LOWER = "unicode_lower"


def _unicode_lower(value: object) -> object:
    return value.lower() if isinstance(value, str) else value


def lowered(session: Session, column: Any) -> Any:
    """``column`` in lower case, every letter (not only ASCII ones) on either database."""
    return getattr(func, UNICODE_LOWER if is_sqlite(session) else "lower")(column)


def configure_engine(engine: Engine) -> None:
    """Install the SQLite pragmas, BEGIN handling and a private database file on an engine."""
    if engine.dialect.name != "sqlite":
        return
    database = engine.url.database
    if database and database != ":memory:" and not database.startswith("file:"):
        # Another program's file named by mistake is refused before any connection opens
        # it: it would be tightened, then fail every statement (``ForeignFile``).
        refuse_foreign_database(Path(database))

        @event.listens_for(engine, "do_connect")
        def _private(_dialect, _record, _cargs, _cparams):
            # SQLite would create the file (and its -wal and -shm files, which take the
            # file's mode) readable by everyone under the usual umask.
            private_database(Path(database))

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection, _record):
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()
        # SQLite's own lower() leaves letters beyond ASCII as they are ("É" stays "É").
        dbapi_connection.create_function(UNICODE_LOWER, 1, _unicode_lower, deterministic=True)

    @event.listens_for(engine, "begin")
    def _begin(conn):
        if not conn.get_execution_options().get(IMMEDIATE):
            conn.exec_driver_sql("BEGIN")
        elif not began_in_short_waits(conn.connection.dbapi_connection):
            # Held longer (a sweep, a migration): SQLite's own wait, SQLAlchemy's errors.
            conn.exec_driver_sql("BEGIN IMMEDIATE")


def began_in_short_waits(raw: sqlite3.Connection) -> bool:
    """Whether BEGIN IMMEDIATE took the write lock within ``SHORT_WAIT_SECONDS``.

    SQLite's busy handler sleeps 1, 2, 5, 10… ms between tries, for a lock that a unit's
    transition holds for tens of microseconds: two workers writing the ledger spent most
    of their time asleep (bench/RESULTS.md, the SQLite drain). Here the next try comes
    after ``FIRST_PAUSE``, doubling up to ``LONGEST_PAUSE``.
    """
    pause, deadline = FIRST_PAUSE, time.monotonic() + SHORT_WAIT_SECONDS
    try:
        raw.execute("PRAGMA busy_timeout=0")
        try:
            while True:
                try:
                    raw.execute("BEGIN IMMEDIATE")
                    return True
                except sqlite3.OperationalError as exc:
                    busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY
                    if not busy or time.monotonic() >= deadline:
                        return False
                time.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE)
        finally:
            raw.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    except sqlite3.Error:
        return False  # the BEGIN that follows meets it again, reported by SQLAlchemy


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


def take_turns(session: Session, name: str) -> None:
    """Make the write transactions that name ``name`` wait for one another until this one
    ends: a transaction advisory lock on PostgreSQL. On SQLite a write transaction already
    holds the one write lock."""
    if not is_sqlite(session):
        key = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
        session.execute(select(func.pg_advisory_xact_lock(key)))


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
