"""Tenant-facing records: async requests a tenant polls, and the tenant API tokens.

Kept apart from the task runner's ledger on purpose: the ledger answers operators
across tenants, these answer one tenant's API client, and they prune on their
own clock (``ASYNC_REQUESTS_RETENTION_DAYS``).
"""

from __future__ import annotations

import enum
import uuid
from datetime import datetime

from sqlalchemy import JSON, BigInteger, Index, Integer, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from database import utcnow
from extensions import db

TOKEN_NAME_LENGTH = 120


class RequestStatus(enum.StrEnum):
    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"


def new_uuid() -> str:
    return str(uuid.uuid4())


class AsyncRequest(db.Model):
    __tablename__ = "async_requests"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    uuid: Mapped[str] = mapped_column(String(36), unique=True, default=new_uuid)
    tenant_id: Mapped[int] = mapped_column(BigInteger)
    kind: Mapped[str] = mapped_column(String(64))
    # What the request is about inside its kind (a statement's period): one pending
    # request per tenant, kind and subject.
    subject: Mapped[str] = mapped_column(String(191))
    status: Mapped[str] = mapped_column(String(16), default=RequestStatus.PENDING)
    result: Mapped[dict | None] = mapped_column(JSON)
    reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    finished_at: Mapped[datetime | None]

    __table_args__ = (
        Index(
            "uq_async_requests_pending",
            "tenant_id",
            "kind",
            "subject",
            unique=True,
            postgresql_where=text("status = 'pending'"),
            sqlite_where=text("status = 'pending'"),
        ),
        Index("ix_async_requests_tenant", "tenant_id", "id"),
        # The retention sweep: terminal rows by finish time, pending ones by last change.
        Index("ix_async_requests_finished_at", "finished_at"),
        Index("ix_async_requests_status_updated", "status", "updated_at"),
    )


class TenantApiToken(db.Model):
    __tablename__ = "tenant_api_tokens"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    # The public half of a token: shown in listings, used to find the row and to revoke.
    public_id: Mapped[str] = mapped_column(String(16), unique=True)
    tenant_id: Mapped[int] = mapped_column(BigInteger)
    name: Mapped[str] = mapped_column(String(TOKEN_NAME_LENGTH), default="")
    secret_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]

    __table_args__ = (Index("ix_tenant_api_tokens_tenant", "tenant_id", "id"),)
