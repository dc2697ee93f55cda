"""Live streams that never starve the pages (SPEC §17, web tier settings).

An open stream holds one request thread of its process (gunicorn's threaded worker,
``gunicorn.conf.py``) for as long as it lasts, so two caps keep threads for the pages:

- per process: at most ``LIVE_STREAMS_PER_PROCESS`` streams at once; gunicorn.conf.py
  refuses to start a worker with no thread left over, so every process keeps
  ``threads - LIVE_STREAMS_PER_PROCESS`` threads for pages whatever the streams do;
- per session: at most ``LIVE_STREAMS_PER_SESSION`` streams of one operator session on
  every process and host together, counted in the database (a lease row per open
  stream, ``live_streams``), so one operator's tabs cannot take every stream slot.

A process killed outright never deletes its leases: they lapse after ``LEASE_SECONDS``,
and sooner when a process of the same host finds the one that held them gone.

A stream over either cap is refused (429 with ``Retry-After``) before it takes anything.
An admitted stream polls: at every poll it asks whether its session still lives (a
sign-out, an expiry, a password change or the page's permission taken away ends it with
``ended``), probes what its page
shows, and writes an event when the answer moved or a keep-alive comment when it did not.
A client that left is found at the next write or the one after, so its thread, slot and
lease are back within a poll or two. At its time limit, or as soon as its process is
asked to stop, a stream says ``rest`` and ends: the page opens a new one at once (on
another process, during a deploy). A database outage ends it with ``unavailable``.
"""

from __future__ import annotations

import functools
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from flask import Flask, current_app
from sqlalchemy import delete, func, select, update

from database import database_outage, take_turns, utcnow, write_transaction
from extensions import db
from live.models import LiveStream
from live.topics import sse
from processes import process_alive

logger = logging.getLogger(__name__)

# A lease not renewed for this long belongs to a stream whose process died.
LEASE_SECONDS = 30
RENEW_SECONDS = 10
RETRY_AFTER_SECONDS = 5
KEEP_ALIVE = ": keep-alive\n\n"
EXTENSION = "live.streams"


class StreamsBusy(Exception):
    """A stream over its process's or its session's cap: try again after ``retry_after``."""

    def __init__(self, message: str, retry_after: int = RETRY_AFTER_SECONDS) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProcessStreams:
    """This process's open streams, within its cap, and whether it is stopping."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.open = 0
        self.stopping = threading.Event()
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.open >= self.limit or self.stopping.is_set():
                return False
            self.open += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.open -= 1


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION] = ProcessStreams(int(app.config["LIVE_STREAMS_PER_PROCESS"]))


def process_streams(app: Flask) -> ProcessStreams:
    return app.extensions[EXTENSION]


def stop_streams(app: Flask) -> None:
    """End every stream of this process at its next poll: the process is stopping."""
    process_streams(app).stopping.set()


class Stream:
    """An admitted stream: its process slot and its lease, given back once by ``close``."""

    def __init__(self, app: Flask, process: ProcessStreams, lease: str) -> None:
        self.app = app
        self.process = process
        self.lease = lease
        self._renewed = time.monotonic()
        self._closed = False
        self._lock = threading.Lock()

    def renew(self) -> None:
        """Keep the lease alive (every ``RENEW_SECONDS``; a poll is shorter)."""
        if time.monotonic() - self._renewed < RENEW_SECONDS:
            return
        self._renewed = time.monotonic()
        self._write(update(LiveStream).where(LiveStream.id == self.lease).values(seen_at=utcnow()))

    def wait(self, seconds: float) -> bool:
        """Sleep until the next poll; True when the process began to stop meanwhile."""
        return self.process.stopping.wait(seconds)

    def close(self) -> None:
        """Give the slot and the lease back (the stream ended, or its client left)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.process.give_back()
        self._write(delete(LiveStream).where(LiveStream.id == self.lease))

    def _write(self, statement) -> None:
        # A connection of its own: the request's session may be mid-read, or gone.
        try:
            with self.app.app_context(), db.engine.begin() as conn:
                conn.execute(statement)
        except Exception:
            logger.warning("Could not write the lease of stream %s", self.lease, exc_info=True)


def admit(holder: str, now: datetime | None = None) -> Stream:
    """A new stream of ``holder`` (a session's digest), or ``StreamsBusy`` over a cap."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    process = process_streams(app)
    if not process.take():
        raise StreamsBusy(f"this server process already serves {process.limit} live streams")
    limit = int(app.config["LIVE_STREAMS_PER_SESSION"])
    try:
        lease = _lease(holder, limit, now or utcnow())
    except BaseException:
        process.give_back()
        raise
    if lease is None:
        process.give_back()
        raise StreamsBusy(f"this session already has {limit} live streams open")
    return Stream(app, process, lease)


def _lease(holder: str, limit: int, now: datetime) -> str | None:
    with write_transaction(db.session):
        # Two tabs opening at once must count each other: one holder's admissions take turns.
        take_turns(db.session, f"live-streams:{holder}")
        lapsed = now - timedelta(seconds=LEASE_SECONDS)
        db.session.execute(delete(LiveStream).where(LiveStream.seen_at < lapsed))
        _drop_leases_of_gone_processes()
        held = db.session.scalar(
            select(func.count()).select_from(LiveStream).where(LiveStream.holder == holder)
        )
        if held >= limit:
            return None
        lease = secrets.token_hex(16)
        db.session.add(
            LiveStream(
                id=lease,
                holder=holder,
                opened_at=now,
                seen_at=now,
                host=this_host(),
                pid=os.getpid(),
            )
        )
    return lease


@functools.cache
def this_host() -> str:
    """Where a pid names one process: this machine's boot and this process namespace
    (containers on one kernel may share a host name, never their pids)."""
    marks = [socket.gethostname()]
    try:
        marks.append(Path("/proc/sys/kernel/random/boot_id").read_text().strip())
        marks.append(os.readlink("/proc/self/ns/pid"))
    except OSError:
        pass  # not Linux: the host name alone
    return ":".join(marks)[:191]


def _drop_leases_of_gone_processes() -> None:
    """A web process killed outright (out of memory, gunicorn's worker timeout) left its
    leases behind: a process of its host drops them now rather than after the lapse."""
    host = this_host()
    pids = db.session.scalars(
        select(LiveStream.pid)
        .distinct()
        .where(LiveStream.host == host, LiveStream.pid != os.getpid())
    )
    gone = [pid for pid in pids if not process_alive(pid)]
    if gone:
        db.session.execute(
            delete(LiveStream).where(LiveStream.host == host, LiveStream.pid.in_(gone))
        )


def open_streams(holder: str | None = None) -> int:
    """Leases held now (by ``holder``, or by anyone): what the caps count."""
    query = select(func.count()).select_from(LiveStream)
    if holder is not None:
        query = query.where(LiveStream.holder == holder)
    try:
        return db.session.scalar(query) or 0
    finally:
        db.session.rollback()


def follow(
    stream: Stream,
    probe: Callable[[], str],
    changes: Callable[[str], tuple[Iterable[str], bool]],
    alive: Callable[[], bool],
    seconds: float,
    poll: float,
) -> Iterator[str]:
    """The stream's text: ``changes(marker)`` (its events, and whether they end the
    stream) each time ``probe()`` moves, a keep-alive comment at every other poll.

    ``alive()`` is asked first at every poll: a session that ended ends the stream.
    """
    try:
        yield "retry: 2000\n\n"
        deadline = time.monotonic() + seconds
        last = None
        while True:
            if not alive():
                yield sse("ended", {"reason": "session"})
                return
            current = probe()
            if current != last:
                last = current
                events, done = changes(current)
                yield "".join(events)
                if done:
                    return
            else:
                yield KEEP_ALIVE
            stream.renew()
            if time.monotonic() >= deadline or stream.wait(poll):
                # The page opens its next stream the moment it reads this: the slot and
                # the lease are given back first, or a session at its cap is refused.
                stream.close()
                yield sse("rest", {})
                return
    except Exception as exc:
        outage = database_outage(exc)
        if outage is None:
            raise
        logger.warning("Live stream ended: %s", outage)
        yield sse("unavailable", {"retry_after": RETRY_AFTER_SECONDS})
    finally:
        stream.close()
