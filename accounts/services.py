"""Account services: create operators, check sign-ins. No request objects here."""

from __future__ import annotations

import re
from collections.abc import Iterable

from sqlalchemy import func, select
from werkzeug.security import check_password_hash, generate_password_hash

from accounts import sessions, throttle
from accounts.models import User, UserPermission
from accounts.permissions import PERMISSIONS
from database import utcnow, write_transaction
from extensions import db
from security.echo import echo

MIN_PASSWORD_LENGTH = 10
MAX_EMAIL_LENGTH = 191
# An address mail can be sent to: a dot-atom local part, a dotted domain of DNS labels.
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
EMAIL = re.compile(rf"{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})+")
# Checked when no account has the address, so that an unknown address takes as long as a
# known one. Written out (of "not-a-real-password-at-all"): making it at import cost every
# process's start a tenth of a second; its method is the one new hashes get (a test says).
_DUMMY_HASH = (
    "scrypt:32768:8:1$mrtiRcw1dvAThc3s$cb51eafee52aa4d967f74a5a94f6da2591572a6c0ec3a9b125386d"
    "7b72a9d6f69b48744b6f34a94b3778698cdcc23b9d3418535d69c4a01dba7ad2181e02d4de"
)


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


def valid_email(email: str) -> bool:
    local = email.rpartition("@")[0]
    return len(email) <= MAX_EMAIL_LENGTH and len(local) <= 64 and bool(EMAIL.fullmatch(email))


def _check_password(password: str) -> None:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password needs at least {MIN_PASSWORD_LENGTH} characters")


def create_user(email: str, password: str, permissions: Iterable[str]) -> User:
    """Create an operator with the given permissions."""
    email = normalize_email(email)
    names = sorted(set(permissions))
    if not valid_email(email):
        raise AccountError(f"not an email address: {echo(email)}")
    unknown = [name for name in names if name not in PERMISSIONS]
    if unknown:
        raise AccountError(
            f"unknown permission {unknown[0]!r} (known: {', '.join(sorted(PERMISSIONS))})"
        )
    _check_password(password)
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


def set_password(email: str, password: str) -> User:
    """Change an operator's password; every session of theirs ends."""
    _check_password(password)
    with write_transaction(db.session):
        user = find_user(email)
        if user is None:
            raise AccountError(f"no user {echo(normalize_email(email))}")
        user.password_hash = generate_password_hash(password)
        # In the same transaction: a password changed while its old sessions live on
        # would leave a stolen one open under a password its owner believes new.
        sessions.end_sessions_of(user.id)
    return user


def authenticate(email: str, password: str, address: str | None) -> User:
    """The user whose credentials these are; refused or throttled otherwise.

    The attempt is counted before the password is checked (``accounts.throttle``).
    """
    email = normalize_email(email)[:MAX_EMAIL_LENGTH]
    if any(ord(c) < 32 for c in email):
        # No account has such an address, and PostgreSQL refuses a NUL in its lookup or
        # in the throttle's key: refused as a wrong password is, before either.
        raise SignInRefused()
    user = find_user(email) if email else None
    known = user is not None and throttle.is_known(user.id, address)
    wait = throttle.admit(email, address, known)
    if wait:
        raise SignInThrottled(wait)
    valid = check_password_hash(user.password_hash if user else _DUMMY_HASH, password or "")
    if user is None or not valid or not user.active:
        raise SignInRefused()
    throttle.signed_in(user.id, email, address, known)
    with write_transaction(db.session):
        user.last_sign_in_at = utcnow()
    return user
