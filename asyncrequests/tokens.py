"""Per-tenant API tokens: shown once at creation, stored hashed, revocable.

A token reads ``tlk_<public id>_<secret>``. The public id finds the row (and is
what operators list and revoke); only a SHA-256 of the whole token is stored.
A slow password hash buys nothing here: the secret has 256 random bits.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import select, update

from asyncrequests.errors import BadTokenName, ClosedTenant, UnknownTenant, UnknownToken
from asyncrequests.models import TOKEN_NAME_LENGTH, TenantApiToken
from database import utcnow, write_transaction
from extensions import db
from security.echo import printable
from tenancy.models import CLOSED, Tenant
from tenancy.services import MAX_ID

PREFIX = "tlk"
PUBLIC_ID_BYTES = 6  # 12 hex characters
SECRET_BYTES = 32
MAX_TOKEN_LENGTH = 128
# Recording every use would make each API read a write; a coarse "last used" is enough.
LAST_USED_RESOLUTION = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class IssuedToken:
    public_id: str
    tenant_id: int
    token: str  # the only time the whole token exists outside the client


@dataclass(frozen=True, slots=True)
class TokenInfo:
    public_id: str
    tenant_id: int
    name: str
    created_at: datetime
    last_used_at: datetime | None
    revoked_at: datetime | None


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def public_id(token: str) -> str | None:
    """The public half of a well-formed token (None for anything else)."""
    if not token or len(token) > MAX_TOKEN_LENGTH:
        return None
    parts = token.split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[2]:
        return None
    candidate = parts[1]
    if len(candidate) != PUBLIC_ID_BYTES * 2 or not all(c in "0123456789abcdef" for c in candidate):
        return None
    return candidate


def _tenant(tenant_id: int) -> Tenant | None:
    # An id beyond the BIGINT column names no tenant: the driver would overflow on it.
    return db.session.get(Tenant, tenant_id) if 0 < tenant_id <= MAX_ID else None


def issue(tenant_id: int, name: str = "") -> IssuedToken:
    """Create a token for an existing tenant."""
    tenant = _tenant(tenant_id)
    if tenant is None:
        raise UnknownTenant(f"no tenant {tenant_id}")
    if tenant.status == CLOSED:
        raise ClosedTenant(f"tenant {tenant_id} is closed")
    if len(name) > TOKEN_NAME_LENGTH or not printable(name):
        raise BadTokenName(
            f"a token's name has at most {TOKEN_NAME_LENGTH} characters, none of them "
            "a control character"
        )
    token_id = secrets.token_hex(PUBLIC_ID_BYTES)
    token = f"{PREFIX}_{token_id}_{secrets.token_urlsafe(SECRET_BYTES)}"
    with write_transaction(db.session):
        db.session.add(
            TenantApiToken(
                public_id=token_id, tenant_id=tenant_id, name=name, secret_hash=_digest(token)
            )
        )
    return IssuedToken(token_id, tenant_id, token)


def authenticate(token: str | None) -> int | None:
    """The tenant a live token belongs to; None for a malformed, unknown or revoked one,
    or one of a closed tenant."""
    token_id = public_id(token or "")
    if token_id is None:
        return None
    row = db.session.execute(
        select(
            TenantApiToken.id,
            TenantApiToken.tenant_id,
            TenantApiToken.secret_hash,
            TenantApiToken.last_used_at,
        )
        .join(Tenant, Tenant.id == TenantApiToken.tenant_id)
        .where(
            TenantApiToken.public_id == token_id,
            TenantApiToken.revoked_at.is_(None),
            Tenant.status != CLOSED,
        )
    ).first()
    if row is None or not hmac.compare_digest(row.secret_hash, _digest(token or "")):
        return None
    now = utcnow()
    if row.last_used_at is None or row.last_used_at < now - LAST_USED_RESOLUTION:
        with write_transaction(db.session):
            db.session.execute(
                update(TenantApiToken).where(TenantApiToken.id == row.id).values(last_used_at=now)
            )
    return row.tenant_id


def revoke(identifier: str) -> tuple[str, bool]:
    """Revoke a token by its public id (or the whole token, whose secret must match).

    Returns its public id and whether this call revoked it (False: it already was).
    """
    token_id = public_id(identifier)
    if token_id is None and identifier.lower().startswith(f"{PREFIX}_"):
        # A token mistyped or cut short: the refusal must not repeat its secret.
        raise UnknownToken(f"not a token ({PREFIX}_<12 hex characters>_<secret>) nor a token id")
    whole = token_id is not None
    # An id as listed (hex, stored in lower case) is the same id in capitals.
    token_id = token_id or identifier.lower()
    with write_transaction(db.session):
        row = db.session.execute(
            select(TenantApiToken).where(TenantApiToken.public_id == token_id)
        ).scalar_one_or_none()
        if row is None:
            raise UnknownToken(f"no token {token_id}")
        if whole and not hmac.compare_digest(row.secret_hash, _digest(identifier)):
            # A forged or mistyped secret with a listed id must not revoke a client's token.
            raise UnknownToken(f"the secret is not that of token {token_id}; nothing revoked")
        if row.revoked_at is not None:
            return token_id, False
        row.revoked_at = utcnow()
    return token_id, True


def tokens_of(tenant_id: int) -> list[TokenInfo]:
    """A tenant's tokens, oldest first; ``UnknownTenant`` when there is no such tenant (an
    empty list means a tenant without tokens, not a mistyped id)."""
    if _tenant(tenant_id) is None:
        raise UnknownTenant(f"no tenant {tenant_id}")
    rows = db.session.execute(
        select(TenantApiToken)
        .where(TenantApiToken.tenant_id == tenant_id)
        .order_by(TenantApiToken.id)
    ).scalars()
    return [
        TokenInfo(r.public_id, r.tenant_id, r.name, r.created_at, r.last_used_at, r.revoked_at)
        for r in rows
    ]
