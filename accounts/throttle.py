"""Sign-in attempts are counted before the password is checked, per account and per address.

The counters live in the database so that any number of web hosts share them.
An attempt is admitted and counted in one transaction, before its password is
checked: parallel attempts cannot all read "not blocked" and slip past. A few
attempts are free; after that each admitted one blocks the key for twice as
long as the last, up to a cap. A success gives its count back; a quiet window
resets the count.

Keys: the address (many accounts behind one address are someone guessing; an
IPv6 address counts by its /64), and the account. An address the operator signed
in from before has an account key of its own (``account:<email>|<address>``), and
an attempt of that known pair counts on that key only: failures from elsewhere -- an
attacker spraying the operator's email -- never lock the operator out there, nor do
strangers' failures from that same address (spraying random emails blocks the
address key, which still slows every stranger there down); the pair's own failures
slow it down the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, delete, exists, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from accounts.models import KnownSignInAddress, SignInThrottle
from database import is_sqlite, utcnow, write_transaction
from extensions import db
from security.ratelimit import client_network


@dataclass(frozen=True)
class Policy:
    free_failures: int
    window: timedelta = timedelta(minutes=15)
    max_block: timedelta = timedelta(minutes=15)

    def block_for(self, failures: int) -> timedelta:
        over = failures - self.free_failures
        if over <= 0:
            return timedelta(0)
        return min(timedelta(seconds=2 ** min(over, 20)), self.max_block)


# An office behind one address has many operators: it gets more free failures.
ACCOUNT = Policy(free_failures=5)
ADDRESS = Policy(free_failures=20)
FORGET_AFTER = timedelta(days=1)
KNOWN_FOR = timedelta(days=90)


class _Blocked(Exception):
    def __init__(self, until: datetime) -> None:
        self.until = until


def account_key(email: str, address: str | None, known: bool) -> str:
    return f"account:{email}|{address}" if known and address else f"account:{email}"


def address_key(address: str) -> str:
    return f"address:{client_network(address)}"


def keys_for(email: str, address: str | None, known: bool) -> list[tuple[str, Policy]]:
    """The keys an attempt counts on, in the order every transaction locks them.

    A known (account, address) pair counts on its own key only: the address key, which
    anyone there can fill, must not lock its operator out.
    """
    keys = [(account_key(email, address, known), ACCOUNT)]
    if address and not known:
        keys.append((address_key(address), ADDRESS))
    return sorted(keys)


def is_known(user_id: int, address: str | None, now: datetime | None = None) -> bool:
    """Whether the user signed in from ``address`` within ``KNOWN_FOR``."""
    if not address:
        return False
    since = (now or utcnow()) - KNOWN_FOR
    known = db.session.execute(
        select(
            exists().where(
                KnownSignInAddress.user_id == user_id,
                KnownSignInAddress.address == address,
                KnownSignInAddress.last_signed_in_at > since,
            )
        )
    ).scalar()
    db.session.rollback()
    return bool(known)


def admit(email: str, address: str | None, known: bool, now: datetime | None = None) -> int:
    """Count an attempt on each of its keys; 0 if admitted, else seconds to wait.

    All keys or none: an attempt refused on one key is counted on no other.
    """
    now = now or utcnow()
    try:
        with write_transaction(db.session):
            for key, policy in keys_for(email, address, known):
                _count(key, policy, now)
    except _Blocked as blocked:
        return max(1, math.ceil((blocked.until - now).total_seconds()))
    return 0


def _upsert(table):
    return (sqlite if is_sqlite(db.session) else postgresql).insert(table)


def _count(key: str, policy: Policy, now: datetime) -> None:
    table = SignInThrottle.__table__
    stale = table.c.first_failed_at < now - policy.window
    # One conditional upsert: the row is locked (PostgreSQL) or the database is (SQLite,
    # BEGIN IMMEDIATE), and a concurrent attempt re-reads ``blocked_until`` after it.
    stmt = (
        _upsert(table)
        .values(key=key, failures=1, first_failed_at=now)
        .on_conflict_do_update(
            index_elements=[table.c.key],
            set_={
                "failures": case((stale, 1), else_=table.c.failures + 1),
                "first_failed_at": case((stale, now), else_=table.c.first_failed_at),
            },
            where=or_(table.c.blocked_until.is_(None), table.c.blocked_until <= now),
        )
        .returning(table.c.failures)
    )
    counted = db.session.execute(stmt).scalar_one_or_none()
    if counted is None:
        until = db.session.execute(
            select(table.c.blocked_until).where(table.c.key == key)
        ).scalar_one()
        raise _Blocked(until)
    wait = policy.block_for(counted)
    if wait:
        db.session.execute(
            table.update().where(table.c.key == key).values(blocked_until=now + wait)
        )


def signed_in(user_id: int, email: str, address: str | None, known: bool) -> None:
    """A success: give its count back, and remember the address as the user's."""
    now = utcnow()
    account = account_key(email, address, known)
    with write_transaction(db.session):
        db.session.execute(delete(SignInThrottle).where(SignInThrottle.key == account))
        if address:
            _give_back_and_remember(user_id, address, now, counted_on_address=not known)


def _give_back_and_remember(
    user_id: int, address: str, now: datetime, counted_on_address: bool
) -> None:
    if counted_on_address:
        db.session.execute(
            update(SignInThrottle)
            .where(SignInThrottle.key == address_key(address), SignInThrottle.failures > 0)
            .values(failures=SignInThrottle.failures - 1)
        )
    db.session.execute(
        _upsert(KnownSignInAddress)
        .values(user_id=user_id, address=address, last_signed_in_at=now)
        .on_conflict_do_update(
            index_elements=["user_id", "address"], set_={"last_signed_in_at": now}
        )
    )


def forget_quiet(now: datetime | None = None) -> int:
    """Delete counters long quiet and unblocked, and addresses long unused; return how many."""
    now = now or utcnow()
    with write_transaction(db.session):
        counters = db.session.execute(
            delete(SignInThrottle).where(
                SignInThrottle.first_failed_at < now - FORGET_AFTER,
                or_(SignInThrottle.blocked_until.is_(None), SignInThrottle.blocked_until < now),
            )
        ).rowcount
        addresses = db.session.execute(
            delete(KnownSignInAddress).where(KnownSignInAddress.last_signed_in_at < now - KNOWN_FOR)
        ).rowcount
    return counters + addresses
