"""The one table of live topics."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, String
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db


class LiveTopic(db.Model):
    __tablename__ = "live_topics"

    topic: Mapped[str] = mapped_column(String(191), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
