"""Documents a tenant sends on to the external provider."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import BigInteger, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db

RECEIVED = "received"
FORWARDED = "forwarded"
REJECTED = "rejected"


def new_uuid() -> str:
    return str(uuid.uuid4())


class Document(db.Model):
    __tablename__ = "documents"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, default=new_uuid)
    tenant_id: Mapped[int] = mapped_column(BigInteger)
    title: Mapped[str] = mapped_column(String(200))
    body: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16), default=RECEIVED)
    provider_reference: Mapped[str | None] = mapped_column(String(120))
    forwarded_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)

    __table_args__ = (Index("ix_documents_tenant", "tenant_id", "id"),)
