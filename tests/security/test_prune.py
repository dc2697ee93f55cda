"""The daily ``security.prune`` keeps what is live and forgets what has ended."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from accounts import sessions, throttle
from accounts.models import KnownSignInAddress, OperatorSession, SignInThrottle
from accounts.services import find_user
from accounts.setup import prune_security_state
from database import utcnow
from extensions import db
from security import ratelimit
from security.models import RateLimitCounter
from tests.web.backoffice_support import VIEW, make_user


def rows(column) -> list:
    return sorted(db.session.execute(select(column)).scalars())


def test_the_daily_prune_forgets_ended_sessions_quiet_counters_and_old_windows(ctx):
    make_user("ops@example.com", VIEW)
    ops = find_user("ops@example.com")
    live = sessions.open_session(ops, timedelta(hours=1))
    sessions.open_session(ops, timedelta(seconds=-1))  # over already
    long_ago = utcnow() - timedelta(days=100)
    throttle.admit("ops@example.com", "192.0.2.1", False, now=long_ago)
    throttle.admit("ops@example.com", "192.0.2.2", False)
    throttle.signed_in(ops.id, "ops@example.com", "192.0.2.3", False)
    db.session.execute(
        KnownSignInAddress.__table__.insert().values(
            user_id=ops.id, address="192.0.2.4", last_signed_in_at=long_ago
        )
    )
    db.session.commit()
    ratelimit.hit([ratelimit.Limit("old", 5)], 60, now=long_ago)
    ratelimit.hit([ratelimit.Limit("now", 5)], 60)

    prune_security_state()

    assert len(rows(OperatorSession.id)) == 1
    assert sessions.session_user(str(ops.id), live) is not None
    # The sign-in cleared the account key; 192.0.2.1 failed long ago.
    assert rows(SignInThrottle.key) == ["address:192.0.2.2"]
    assert rows(KnownSignInAddress.address) == ["192.0.2.3"]
    assert rows(RateLimitCounter.key) == ["now"]
