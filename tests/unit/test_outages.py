"""A consumer process's outage episode: the back-off schedule on the clock seam, one
warning when it starts and one line when it ends, and only outages are waited out."""

from __future__ import annotations

import logging

import psycopg
import pytest
import redis
from sqlalchemy.exc import OperationalError, ProgrammingError

from database import Outage
from tasks import outages

REFUSED = Outage("the database refused the connection", "connection refused")


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "tasks.outages"]


def test_the_pause_doubles_from_half_a_second_up_to_thirty_seconds():
    episode = outages.Episode(clock=Clock())

    pauses = [episode.failed(REFUSED, "reading queue tasks") for _ in range(10)]

    assert pauses == [0.5, 1, 2, 4, 8, 16, 30, 30, 30, 30]


def test_an_episode_warns_once_and_says_once_how_long_it_lasted(caplog):
    clock = Clock()
    episode = outages.Episode(clock=clock)
    caplog.set_level(logging.WARNING, "tasks.outages")

    for _ in range(50):
        episode.failed(REFUSED, "reading queue tasks")
        clock.now += 2
    episode.succeeded()
    episode.succeeded()

    assert warnings(caplog) == [
        "Database unavailable (reading queue tasks, the database refused the connection:"
        " connection refused); backing off, at most 30 s between attempts",
        "Database reachable again after 100.0 s and 50 failed attempts",
    ]
    assert not any(r.exc_info for r in caplog.records)
    assert episode.pause() == 0


def test_the_next_outage_is_a_new_episode_that_starts_again_at_half_a_second(caplog):
    episode = outages.Episode(clock=Clock())
    caplog.set_level(logging.WARNING, "tasks.outages")
    for _ in range(8):
        episode.failed(REFUSED, "a heartbeat")
    episode.succeeded()

    assert episode.failed(REFUSED, "a heartbeat") == 0.5
    assert len(warnings(caplog)) == 3


@pytest.mark.parametrize(
    "error",
    [
        OperationalError("SELECT 1", {}, Exception("server closed the connection")),
        psycopg.OperationalError("connection refused"),
        redis.ConnectionError("Connection refused"),
    ],
    ids=["ledger", "postgresql-queue", "redis-queue"],
)
def test_the_ledgers_and_the_queues_outages_are_outages(error):
    assert outages.outage_of(error) is not None


def test_a_bug_is_no_outage_and_is_never_waited_out():
    bug = ProgrammingError("SELECT nope", {}, Exception("column nope does not exist"))
    assert outages.outage_of(bug) is None
    assert outages.outage_of(ValueError("nope")) is None

    waited: list[float] = []

    def attempt():
        raise bug

    with pytest.raises(ProgrammingError):
        outages.patiently(attempt, "recording unit 1's outcome", waited.append)
    assert waited == []


def test_an_outcome_waits_for_the_database_and_is_then_written(monkeypatch):
    episode = outages.Episode(clock=Clock())
    monkeypatch.setattr(outages, "episode", episode)
    failures = iter([psycopg.OperationalError("refused")] * 3)
    waited: list[float] = []

    def attempt():
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return "written"

    assert outages.patiently(attempt, "recording unit 1's outcome", waited.append) == "written"
    assert waited == [0.5, 1, 2]
    assert episode.started_at is None  # the success ended the episode
