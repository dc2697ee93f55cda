"""Bump a topic, read its version, follow it: the pieces a live page is made of."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from database import utcnow
from extensions import db
from live.models import LiveTopic

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.25
_table = LiveTopic.__table__


def bump(topic: str) -> None:
    """Say that what ``topic`` names changed; never raises (pages fall back to a slow refresh).

    It runs on a connection of its own, after the caller's commit, and leaves the
    caller's session alone.
    """
    now = utcnow()
    try:
        with db.engine.begin() as conn:
            dialect = sqlite if conn.dialect.name == "sqlite" else postgresql
            stmt = dialect.insert(_table).values(topic=topic, version=1, updated_at=now)
            stmt = stmt.on_conflict_do_update(
                index_elements=[_table.c.topic],
                set_={"version": _table.c.version + 1, "updated_at": now},
            )
            conn.execute(stmt)
    except Exception:
        logger.warning("Could not bump live topic %s", topic, exc_info=True)


def version(topic: str) -> str:
    """The topic's current version ("0" before its first bump, "?" when it cannot be read)."""
    try:
        with db.engine.connect() as conn:
            value = conn.execute(
                select(_table.c.version).where(_table.c.topic == topic)
            ).scalar_one_or_none()
    except Exception:
        logger.warning("Could not read live topic %s", topic, exc_info=True)
        return "?"
    return str(value or 0)


def follow(topic: str, seconds: float, poll_seconds: float = POLL_SECONDS) -> Iterator[str]:
    """The topic's version at once, then each time it moves, for at most ``seconds``."""
    return watch(lambda: version(topic), seconds, poll_seconds)


def watch(
    probe: Callable[[], str], seconds: float, poll_seconds: float = POLL_SECONDS
) -> Iterator[str]:
    """``probe()`` at once, then each time its answer changes, for at most ``seconds``.

    A topic's version is the cheapest probe; a page whose data moves without a bump
    (a task run's units, which the hot path does not bump) probes a small indexed
    count instead.
    """
    deadline = time.monotonic() + seconds
    last = None
    while True:
        current = probe()
        if current != last:
            last = current
            yield current
        if time.monotonic() >= deadline:
            return
        time.sleep(poll_seconds)


def sse(event: str, data: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
