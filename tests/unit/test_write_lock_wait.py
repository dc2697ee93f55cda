"""How a SQLite write transaction waits for the database write lock (``database.py``).

It tries again in short steps rather than in SQLite's own 1, 2, 5, 10… ms sleeps, then
hands a lock held longer to SQLite's busy handler, and a lock never freed still ends in
SQLAlchemy's ``OperationalError`` (what the gate and the sweeps catch). Each test holds
the lock with a second, real connection to the same file.
"""

from __future__ import annotations

import sqlite3
import threading

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError

import database
from database import IMMEDIATE, configure_engine


@pytest.fixture
def files(tmp_path):
    path = tmp_path / "ledger.db"
    engine = create_engine(f"sqlite:///{path}")
    configure_engine(engine)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (v INTEGER)"))
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    yield engine, holder
    holder.close()
    engine.dispose()


def write(engine) -> None:
    with engine.connect() as conn:
        conn.execution_options(**{IMMEDIATE: True})
        with conn.begin():
            conn.execute(text("INSERT INTO t VALUES (1)"))


def busy_timeout(engine) -> int:
    with engine.connect() as conn:
        return conn.execute(text("PRAGMA busy_timeout")).scalar_one()


def test_a_write_transaction_tries_again_in_short_steps_and_begins_once_the_lock_is_free(
    files, monkeypatch
):
    engine, holder = files
    holder.execute("BEGIN IMMEDIATE")
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 4:
            holder.execute("COMMIT")  # the other writer lets go during the fourth pause

    monkeypatch.setattr(database.time, "sleep", sleep)
    write(engine)

    first = database.FIRST_PAUSE
    assert pauses == [first, first * 2, first * 4, first * 8]
    assert first < 0.001  # SQLite's own handler sleeps 1 ms first
    assert holder.execute("SELECT count(*) FROM t").fetchone() == (1,)
    assert busy_timeout(engine) == database.BUSY_TIMEOUT_MS  # the wait is back for the rest


def test_a_lock_held_past_the_short_steps_is_waited_for_by_sqlites_own_handler(files, monkeypatch):
    engine, holder = files
    monkeypatch.setattr(database, "SHORT_WAIT_SECONDS", 0.0)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    try:
        write(engine)
    finally:
        release.join()

    assert holder.execute("SELECT count(*) FROM t").fetchone() == (1,)


def test_a_lock_never_freed_ends_in_sqlalchemys_operational_error_and_writes_nothing(
    files, monkeypatch
):
    engine, holder = files
    monkeypatch.setattr(database, "SHORT_WAIT_SECONDS", 0.0)
    monkeypatch.setattr(database, "BUSY_TIMEOUT_MS", 50)
    holder.execute("BEGIN IMMEDIATE")

    with pytest.raises(OperationalError, match="database is locked"):
        write(engine)

    holder.execute("COMMIT")
    assert holder.execute("SELECT count(*) FROM t").fetchone() == (0,)
