"""The tables of live updates: a version row per topic, a lease row per open stream."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db


class LiveTopic(db.Model):
    __tablename__ = "live_topics"

    topic: Mapped[str] = mapped_column(String(191), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class LiveStream(db.Model):
    """One open event stream and who holds it (an operator's session, by a digest).

    The row is a lease: its stream renews ``seen_at`` while it runs and deletes the row
    when it ends; a row whose process died lapses after ``streams.LEASE_SECONDS``, or at
    once when a process of the same host (``host``: its machine and process namespace)
    finds that ``pid`` is gone.
    """

    __tablename__ = "live_streams"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    holder: Mapped[str] = mapped_column(String(64), index=True)
    opened_at: Mapped[datetime] = mapped_column(default=utcnow)
    seen_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    host: Mapped[str | None] = mapped_column(String(191))
    pid: Mapped[int | None] = mapped_column(Integer)
