"""The alerts' own tables: episodes, the messages each sent, their deliveries, mutes.

An episode is one stretch of one rule's condition for one key (a task type, a queue, a
schedule): ``pending`` while a stale-units condition waits out its window, ``open`` once
its first message went out, ``resolved`` when it ended. Each message (opened, reminder,
resolved) is a row, numbered within its episode, and one ``alerts.alert`` event of the
outbox; each channel's delivery of it is a row, so a channel receives a message once and
an episode's messages in order.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import JSON, ForeignKey, Index, Integer, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db

PENDING, OPEN, RESOLVED = "pending", "open", "resolved"


class AlertEpisode(db.Model):
    __tablename__ = "alert_episodes"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True)
    rule: Mapped[str] = mapped_column(String(64))
    key: Mapped[str] = mapped_column(String(191))
    state: Mapped[str] = mapped_column(String(16))
    # The condition was first seen, and last seen true (a flap inside the window is the
    # same episode); the first message, the newest one, the end.
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_true_at: Mapped[datetime] = mapped_column(default=utcnow)
    opened_at: Mapped[datetime | None]
    last_sent_at: Mapped[datetime | None]
    resolved_at: Mapped[datetime | None]
    summary: Mapped[dict] = mapped_column(JSON, default=dict)

    __table_args__ = (
        # One episode of a rule and key is not resolved at a time.
        Index(
            "ux_alert_episodes_active",
            "rule",
            "key",
            unique=True,
            postgresql_where=text("state <> 'resolved'"),
            sqlite_where=text("state <> 'resolved'"),
        ),
        Index("ix_alert_episodes_first_seen", "first_seen_at"),
    )


class AlertMessage(db.Model):
    __tablename__ = "alert_messages"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    episode_id: Mapped[int] = mapped_column(ForeignKey("alert_episodes.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    kind: Mapped[str] = mapped_column(String(16))
    body: Mapped[dict] = mapped_column(JSON, default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (UniqueConstraint("episode_id", "seq", name="uq_alert_messages_seq"),)


class AlertDelivery(db.Model):
    """One channel's delivery of one message: its tries, the receiver's answer."""

    __tablename__ = "alert_deliveries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    message_id: Mapped[int] = mapped_column(ForeignKey("alert_messages.id", ondelete="CASCADE"))
    channel: Mapped[str] = mapped_column(String(32))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    delivered_at: Mapped[datetime | None]
    answer: Mapped[str | None] = mapped_column(Text)
    last_error: Mapped[str | None] = mapped_column(Text)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Since when a process sends it: another one handed the same message waits its turn.
    sending_since: Mapped[datetime | None]

    __table_args__ = (
        UniqueConstraint("message_id", "channel", name="uq_alert_deliveries_channel"),
    )


class AlertMute(db.Model):
    """A rule muted by an operator until ``until``: its episodes go on, unsent."""

    __tablename__ = "alert_mutes"

    rule: Mapped[str] = mapped_column(String(64), primary_key=True)
    until: Mapped[datetime]
    muted_by: Mapped[str] = mapped_column(String(191))
