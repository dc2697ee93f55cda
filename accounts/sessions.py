"""Operator sessions kept server-side, so that signing out ends them.

A sign-in opens a session: a random secret goes into the (signed) session cookie,
its SHA-256 into ``operator_sessions``. Each request's user is found by that
secret; a signed-out, expired or password-changed session finds nobody, whatever
the cookie says and wherever it is replayed from. The rows live in the database,
so every web host behind a load balancer sees a sign-out at once.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any

from sqlalchemy import delete, select

from accounts.models import OperatorSession, User, UserPermission
from database import utcnow, write_transaction
from extensions import db

SECRET_BYTES = 32


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def open_session(user: User, lifetime: timedelta) -> str:
    """Start a session of ``user`` lasting ``lifetime``; return the secret for its cookie."""
    secret = secrets.token_urlsafe(SECRET_BYTES)
    now = utcnow()
    with write_transaction(db.session):
        # The user's own ended sessions go as a new one starts: the table stays small.
        db.session.execute(
            delete(OperatorSession).where(
                OperatorSession.user_id == user.id, OperatorSession.expires_at <= now
            )
        )
        db.session.add(
            OperatorSession(
                user_id=user.id,
                secret_hash=_digest(secret),
                created_at=now,
                expires_at=now + lifetime,
            )
        )
    return secret


def session_user(user_id: str, secret: str | None) -> User | None:
    """The active user of a live session with this secret, if ``user_id`` is theirs."""
    if not secret or not isinstance(secret, str):
        return None
    try:
        wanted = int(user_id)
    except (TypeError, ValueError):
        return None
    return db.session.execute(
        select(User)
        .join(OperatorSession, OperatorSession.user_id == User.id)
        .where(*_signing_in(secret, wanted))
    ).scalar_one_or_none()


def _signing_in(secret: str, user_id: int) -> tuple[Any, ...]:
    """Where a session with this secret still signs in its user ``user_id``, active."""
    return (
        OperatorSession.secret_hash == _digest(secret),
        OperatorSession.expires_at > utcnow(),
        User.id == user_id,
        User.active.is_(True),
    )


def digest(secret: str) -> str:
    """What the database keeps of a session's secret (and what names the session elsewhere)."""
    return _digest(secret)


def is_live(user_id: int, secret: str | None, permission: str | None = None) -> bool:
    """Whether this session still signs its user in, with ``permission`` if one is named:
    a live stream asks at every poll, so a permission taken away ends it as a sign-out does.

    It holds no transaction afterwards (the stream sleeps between polls).
    """
    if not secret or not isinstance(secret, str):
        return False
    query = (
        select(OperatorSession.id)
        .join(User, User.id == OperatorSession.user_id)
        .where(*_signing_in(secret, user_id))
    )
    if permission is not None:
        query = query.where(
            select(UserPermission.id)
            .where(UserPermission.user_id == User.id, UserPermission.name == permission)
            .exists()
        )
    try:
        found = db.session.execute(query).first()
    finally:
        db.session.rollback()
    return found is not None


def end_session(secret: str | None) -> None:
    """Sign this session out; an unknown or ended one is already out."""
    if not secret or not isinstance(secret, str):
        return
    with write_transaction(db.session):
        db.session.execute(
            delete(OperatorSession).where(OperatorSession.secret_hash == _digest(secret))
        )


def end_sessions_of(user_id: int) -> int:
    """Sign a user out everywhere, inside the caller's write transaction (a password change:
    both or neither); return how many sessions ended."""
    return db.session.execute(
        delete(OperatorSession).where(OperatorSession.user_id == user_id)
    ).rowcount


def prune_expired() -> int:
    """Delete expired sessions of every user; return how many."""
    with write_transaction(db.session):
        pruned = db.session.execute(
            delete(OperatorSession).where(OperatorSession.expires_at <= utcnow())
        ).rowcount
    return pruned
