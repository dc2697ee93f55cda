"""Operator accounts and the sign-in throttle (in the database so every web host shares it)."""

from __future__ import annotations

from datetime import datetime

from flask_login import UserMixin
from sqlalchemy import BigInteger, ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from database import utcnow
from extensions import db


class User(UserMixin, db.Model):
    __tablename__ = "users"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    email: Mapped[str] = mapped_column(String(191), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    active: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_sign_in_at: Mapped[datetime | None]

    grants: Mapped[list[UserPermission]] = relationship(
        back_populates="user", cascade="all, delete-orphan", lazy="selectin"
    )

    @property
    def is_active(self) -> bool:  # Flask-Login refuses inactive accounts
        return self.active

    @property
    def permissions(self) -> frozenset[str]:
        return frozenset(grant.name for grant in self.grants)

    def has_permission(self, name: str) -> bool:
        return name in self.permissions


class UserPermission(db.Model):
    __tablename__ = "user_permissions"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))

    user: Mapped[User] = relationship(back_populates="grants")

    __table_args__ = (UniqueConstraint("user_id", "name", name="uq_user_permissions_user_name"),)


class SignInThrottle(db.Model):
    """Recent sign-in attempts of one key (``scope:value``), counted before the password is
    checked; a success gives its count back."""

    __tablename__ = "sign_in_throttles"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), unique=True)
    failures: Mapped[int] = mapped_column(Integer, default=0)
    first_failed_at: Mapped[datetime] = mapped_column(default=utcnow)
    blocked_until: Mapped[datetime | None]


class OperatorSession(db.Model):
    """One signed-in browser: its cookie holds the secret, the row only its hash.

    Signing out deletes the row; a password change deletes all of a user's rows; a
    row past ``expires_at`` signs nobody in. Every web host reads the same rows.
    """

    __tablename__ = "operator_sessions"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    secret_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)


class KnownSignInAddress(db.Model):
    """An address an operator signed in from: others' failures never lock it out."""

    __tablename__ = "known_sign_in_addresses"

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    address: Mapped[str] = mapped_column(String(64))
    last_signed_in_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)

    __table_args__ = (
        UniqueConstraint("user_id", "address", name="uq_known_sign_in_addresses_user_address"),
    )
