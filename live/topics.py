"""Bump a topic, read its version, write an event: the pieces a live page is made of."""

from __future__ import annotations

import json
import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite

from database import utcnow
from extensions import db
from live.models import LiveTopic

logger = logging.getLogger(__name__)

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


def sse(event: str, data: dict[str, Any]) -> str:
    """One server-sent event."""
    return f"event: {event}\ndata: {json.dumps(data)}\n\n"
