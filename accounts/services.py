"""Account services: create operators, check sign-ins. No request objects here."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import func, select
from werkzeug.security import check_password_hash, generate_password_hash

from accounts import throttle
from accounts.models import User, UserPermission
from accounts.permissions import PERMISSIONS
from database import utcnow, write_transaction
from extensions import db

MIN_PASSWORD_LENGTH = 10
# Compared against when the account does not exist, so both paths cost the same.
_DUMMY_HASH = generate_password_hash("not-a-real-password-at-all")


class AccountError(Exception):
    """A refusal an operator may read."""


class SignInRefused(AccountError):
    def __init__(self, message: str = "wrong email or password") -> None:
        super().__init__(message)


class SignInThrottled(AccountError):
    def __init__(self, seconds: int) -> None:
        self.seconds = seconds
        super().__init__(
            f"too many failed sign-ins; try again in {seconds} second{'s' if seconds != 1 else ''}"
        )


def normalize_email(email: str) -> str:
    return (email or "").strip().lower()


def create_user(email: str, password: str, permissions: Iterable[str]) -> User:
    """Create an operator with the given permissions."""
    email = normalize_email(email)
    names = sorted(set(permissions))
    if "@" not in email or len(email) > 191 or email.startswith("@") or email.endswith("@"):
        raise AccountError(f"not an email address: {email!r}")
    unknown = [name for name in names if name not in PERMISSIONS]
    if unknown:
        raise AccountError(
            f"unknown permission {unknown[0]!r} (known: {', '.join(sorted(PERMISSIONS))})"
        )
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password needs at least {MIN_PASSWORD_LENGTH} characters")
    with write_transaction(db.session):
        if find_user(email) is not None:
            raise AccountError(f"a user {email} already exists")
        user = User(email=email, password_hash=generate_password_hash(password))
        user.grants = [UserPermission(name=name) for name in names]
        db.session.add(user)
    return user


def find_user(email: str) -> User | None:
    return db.session.execute(
        select(User).where(func.lower(User.email) == normalize_email(email))
    ).scalar_one_or_none()


def load_user(user_id: str) -> User | None:
    try:
        return db.session.get(User, int(user_id))
    except (TypeError, ValueError):
        return None


def authenticate(email: str, password: str, address: str | None) -> User:
    """The user whose credentials these are; refused or throttled otherwise."""
    email = normalize_email(email)[:191]
    wait = throttle.blocked_for(email, address)
    if wait:
        raise SignInThrottled(wait)
    user = find_user(email) if email else None
    valid = check_password_hash(user.password_hash if user else _DUMMY_HASH, password or "")
    if user is None or not valid or not user.active:
        throttle.record_failure(email, address)
        raise SignInRefused()
    throttle.record_success(email)
    with write_transaction(db.session):
        user.last_sign_in_at = utcnow()
    return user
