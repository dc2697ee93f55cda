"""The database's clock, as every host reads it (issue 23, item 6; ``database.DatabaseClock``).

The end-to-end proof, consumers with a shifted clock, is ``tests/workers/test_one_clock.py``;
these pin the clock's own rules: it is the server's, it carries a reading forward, it
survives an outage, and SQLite keeps the host's.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import partial

import pytest
from huey import MemoryHuey
from sqlalchemy import text

from database import CLOCK, DatabaseClock, clock_offset, host_utcnow, utcnow
from extensions import db
from tasks import huey_internals as internals
from tests.conftest import BACKEND
from tests.outage import refused_url

postgres_only = pytest.mark.skipif(BACKEND != "postgres", reason="SQLite keeps the host's clock")


@postgres_only
def test_utcnow_is_the_servers_clock_carried_between_readings(ctx, monkeypatch):
    clock = ctx.extensions[CLOCK]
    assert clock is not None
    server = db.session.execute(text("SELECT clock_timestamp() AT TIME ZONE 'UTC'")).scalar_one()
    assert abs(utcnow() - server) < timedelta(seconds=1)

    # Between readings the host's wall clock plays no part: set it an hour wrong.
    utcnow()
    monkeypatch.setattr("database.host_utcnow", lambda: server + timedelta(hours=1))
    assert abs(utcnow() - server) < timedelta(seconds=5)
    assert clock_offset() < timedelta(minutes=-59)


@postgres_only
def test_a_clock_whose_server_refuses_carries_its_last_reading_and_warns_once(ctx, caplog):
    clock = DatabaseClock(ctx.config["SQLALCHEMY_DATABASE_URI"], {})
    first = clock.now()
    clock.engine = DatabaseClock(refused_url(), {}).engine  # the server goes away
    clock._next_read = 0.0

    with caplog.at_level(logging.WARNING, logger="database"):
        readings = []
        for _ in range(3):
            clock._next_read = 0.0
            readings.append(clock.now())

    assert readings == sorted(readings) and readings[0] >= first
    assert abs(readings[-1] - host_utcnow()) < timedelta(seconds=5)
    warnings = [r for r in caplog.records if "database clock could not be read" in r.message]
    assert len(warnings) == 1


def test_a_clock_never_read_stands_in_with_the_hosts():
    clock = DatabaseClock(refused_url(), {})

    assert abs(clock.now() - host_utcnow()) < timedelta(seconds=5)


@pytest.mark.skipif(BACKEND != "sqlite", reason="the SQLite backend")
def test_sqlite_keeps_the_hosts_clock(ctx):
    assert ctx.extensions[CLOCK] is None
    assert clock_offset() == timedelta(0)


def record(asked: list[datetime], moment: datetime) -> list[datetime]:
    asked.append(moment)
    return []


@postgres_only
def test_a_scheduler_on_a_host_a_minute_behind_asks_for_the_databases_slots(ctx, monkeypatch):
    asked: list[datetime] = []
    huey = MemoryHuey("taskledger.test-clock")

    @huey.task(
        name="sweep",
        task_base=internals.SlottedPeriodicTask,
        due_slots=partial(record, asked),  # a partial: no method binding
    )
    def sweep(slots=None):
        return slots

    host_moment = utcnow() - timedelta(seconds=60)  # what Huey's clock says on that host
    monkeypatch.setattr("database.host_utcnow", lambda: host_moment)

    huey.read_periodic(host_moment)

    [moment] = asked
    assert abs(moment - utcnow()) < timedelta(seconds=2)
