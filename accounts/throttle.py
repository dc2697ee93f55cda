"""Failed sign-ins slow down further attempts, per account and per address.

The counters live in the database so that any number of web hosts share them.
A few failures are free; after that each failure blocks the key for twice as
long as the last one, up to a cap. A quiet window resets the count.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, delete, or_, select
from sqlalchemy.dialects import postgresql, sqlite

from accounts.models import SignInThrottle
from database import is_sqlite, utcnow, write_transaction
from extensions import db


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


def keys_for(email: str, address: str | None) -> list[tuple[str, Policy]]:
    keys = [(f"account:{email}", ACCOUNT)]
    if address:
        keys.append((f"address:{address}", ADDRESS))
    return keys


def blocked_for(email: str, address: str | None, now: datetime | None = None) -> int:
    """Seconds until a sign-in for this account from this address may be tried (0: now)."""
    now = now or utcnow()
    names = [key for key, _ in keys_for(email, address)]
    until = db.session.execute(
        select(SignInThrottle.blocked_until).where(SignInThrottle.key.in_(names))
    ).scalars()
    waits = [(moment - now).total_seconds() for moment in until if moment and moment > now]
    db.session.rollback()
    return int(max(waits, default=0) + 0.999)


def record_failure(email: str, address: str | None) -> None:
    now = utcnow()
    with write_transaction(db.session):
        for key, policy in keys_for(email, address):
            _bump(key, policy, now)
        # Guessed emails leave rows behind: forget the ones long quiet and unblocked.
        db.session.execute(
            delete(SignInThrottle).where(
                SignInThrottle.first_failed_at < now - FORGET_AFTER,
                or_(SignInThrottle.blocked_until.is_(None), SignInThrottle.blocked_until < now),
            )
        )


def _bump(key: str, policy: Policy, now: datetime) -> None:
    dialect = sqlite if is_sqlite(db.session) else postgresql
    table = SignInThrottle.__table__
    # One atomic upsert: two hosts failing at once both count.
    stmt = dialect.insert(table).values(key=key, failures=1, first_failed_at=now)
    stale = table.c.first_failed_at < now - policy.window
    stmt = stmt.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={
            "failures": case((stale, 1), else_=table.c.failures + 1),
            "first_failed_at": case((stale, now), else_=table.c.first_failed_at),
        },
    ).returning(table.c.failures)
    failures = db.session.execute(stmt).scalar_one()
    wait = policy.block_for(failures)
    if wait:
        db.session.execute(
            table.update().where(table.c.key == key).values(blocked_until=now + wait)
        )


def record_success(email: str) -> None:
    with write_transaction(db.session):
        db.session.execute(delete(SignInThrottle).where(SignInThrottle.key == f"account:{email}"))
