"""A consumer process riding out a database outage: it backs off, and says so once.

While the ledger's PostgreSQL (or the queue's server) refuses connections or drops them,
every loop of a consumer would fail again at once: Huey's worker logged a traceback per
attempt, about seventy a second. Here each failed attempt of a process's loops (reading
the queue, the scheduler, the heartbeats, a unit's gate and its outcome) is one failure
of the process's current episode: the first logs one warning, each returns how long to
wait before trying again (doubling from ``FIRST_PAUSE`` up to ``LONGEST_PAUSE``), and the
first success after it logs one line, "reachable again". What was in flight is not lost:
a unit job whose gate failed goes back to the queue, a unit's outcome is written once the
database answers, and the ledger's rules retry what a stop interrupted.

Only an outage is handled so (``outage_of``); any other error is still a bug, logged with
its traceback.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

import psycopg
import redis

from database import Outage, database_outage

logger = logging.getLogger(__name__)

FIRST_PAUSE = 0.5
LONGEST_PAUSE = 30.0


def outage_of(exc: BaseException) -> Outage | None:
    """The outage ``exc`` reports: the ledger's (SQLAlchemy), the PostgreSQL queue's
    (psycopg, below Huey) or Redis's; None for any other error."""
    found = database_outage(exc)
    if found is not None:
        return found
    if isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError):
        return Outage("the queue's database refused or dropped the connection", _first(exc))
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        return Outage("Redis refused or dropped the connection", _first(exc))
    return None


def _first(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0][:300] if lines else type(exc).__name__


class Episode:
    """One process's outage, from its first failed attempt to its first success after.

    ``clock`` is the seam the tests drive the schedule with (monotonic seconds).
    """

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        first: float = FIRST_PAUSE,
        longest: float = LONGEST_PAUSE,
    ) -> None:
        self.clock = clock
        self.first = first
        self.longest = longest
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self.started_at: float | None = None
        self.failures = 0

    def failed(self, outage: Outage, where: str) -> float:
        """Count a failed attempt; the pause before the next. Warns once per episode."""
        with self._lock:
            self._forget_parents()
            self.failures += 1
            if self.started_at is None:
                self.started_at = self.clock()
                logger.warning(
                    "Database unavailable (%s, %s: %s); backing off, at most %g s between attempts",
                    where,
                    outage.summary,
                    outage.cause,
                    self.longest,
                )
            return self.pause()

    def pause(self) -> float:
        """The pause after the failures so far: doubling, at most ``longest``."""
        if not self.failures:
            return 0.0
        return min(self.longest, self.first * 2 ** min(self.failures - 1, 32))

    def succeeded(self) -> None:
        """An attempt went through: an episode under way ends, with one line."""
        if self.started_at is None:
            return  # the usual case, without taking the lock
        with self._lock:
            if self.started_at is None or self._forget_parents():
                return
            logger.warning(
                "Database reachable again after %.1f s and %d failed attempts",
                self.clock() - self.started_at,
                self.failures,
            )
            self.started_at = None
            self.failures = 0

    def _forget_parents(self) -> bool:
        """A forked worker starts with no episode of its own (its parent's was copied)."""
        if self._pid == os.getpid():
            return False
        self._pid, self.started_at, self.failures = os.getpid(), None, 0
        return True


episode = Episode()


def patiently(attempt: Callable[[], object], where: str, wait: Callable[[float], object]) -> object:
    """``attempt()`` until it goes through, pausing with ``wait`` after each outage; any
    other error is raised. What a unit's outcome is written with: the work is done, and
    only the database can keep it."""
    while True:
        try:
            value = attempt()
        except Exception as exc:
            outage = outage_of(exc)
            if outage is None:
                raise
            wait(episode.failed(outage, where))
            continue
        episode.succeeded()
        return value
