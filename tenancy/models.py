"""Tenants: the minimal table the fleet sweeps enumerate."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import BigInteger, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db

STANDING = ("active", "trial", "past_due")
# A closed tenant gets no statements and its API tokens are refused.
CLOSED = "closed"


class Tenant(db.Model):
    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    name: Mapped[str] = mapped_column(String(191))
    status: Mapped[str] = mapped_column(String(32), default="active")
    status_changed_at: Mapped[datetime] = mapped_column(default=utcnow)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (Index("ix_tenants_status", "status", "id"),)
