"""Rate-limit counters, in the database so that every web host shares them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from extensions import db


class RateLimitCounter(db.Model):
    """Hits of one key (``scope:value``) in its current fixed window."""

    __tablename__ = "rate_limit_counters"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    window_started_at: Mapped[datetime] = mapped_column(index=True)
    hits: Mapped[int] = mapped_column(Integer, default=0)
