"""Monthly statements: one per tenant and period, guaranteed by a unique key."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db


class Statement(db.Model):
    __tablename__ = "statements"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    tenant_id: Mapped[int] = mapped_column(BigInteger)
    period: Mapped[str] = mapped_column(String(7))
    total_cents: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3), default="EUR")
    lines: Mapped[int] = mapped_column(Integer)
    generated_at: Mapped[datetime] = mapped_column(default=utcnow)

    # The watermark: a rerun of the same tenant and period never makes a second statement.
    __table_args__ = (UniqueConstraint("tenant_id", "period", name="uq_statements_tenant_period"),)
