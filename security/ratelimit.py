"""Fixed-window rate limits whose counters live in the database.

Every web host counts on the same rows, so a client spreading its requests over
hosts behind a load balancer gets no more than one host would give it. A request
is counted on each of its keys in one transaction (one upsert per key, locked in
key order); over any limit, it is refused until the window ends.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import case, delete
from sqlalchemy.dialects import postgresql, sqlite

from database import is_sqlite, utcnow, write_transaction
from extensions import db
from security.models import RateLimitCounter

EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True, order=True)
class Limit:
    key: str
    per_window: int


def client_network(address: str | None) -> str:
    """What a per-address limit counts: an IPv4 address, or an IPv6 address's /64.

    An IPv6 client usually holds a whole /64 and may use any address in it; counting
    each address apart would let it rotate past every per-address limit.
    """
    if not address:
        return "-"
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return address
    if ip.version == 4:
        return str(ip)
    if ip.ipv4_mapped is not None:
        return str(ip.ipv4_mapped)
    return str(ipaddress.ip_network(f"{ip}/64", strict=False))


def window_start(now: datetime, window_seconds: int) -> datetime:
    elapsed = int((now - EPOCH).total_seconds())
    return EPOCH + timedelta(seconds=elapsed - elapsed % window_seconds)


def hit(limits: Sequence[Limit], window_seconds: int, now: datetime | None = None) -> int:
    """Count one request on every limit's key; 0 if all are within, else seconds to wait."""
    now = now or utcnow()
    start = window_start(now, window_seconds)
    table = RateLimitCounter.__table__
    insert = (sqlite if is_sqlite(db.session) else postgresql).insert
    over = False
    with write_transaction(db.session):
        for limit in sorted(limits):
            hits = db.session.execute(
                insert(table)
                .values(key=limit.key, window_started_at=start, hits=1)
                .on_conflict_do_update(
                    index_elements=[table.c.key],
                    set_={
                        "hits": case(
                            (table.c.window_started_at == start, table.c.hits + 1), else_=1
                        ),
                        "window_started_at": start,
                    },
                )
                .returning(table.c.hits)
            ).scalar_one()
            over = over or hits > limit.per_window
    if not over:
        return 0
    # Reckoned in seconds, not as the window's end: a long window may end past year 9999.
    return max(1, math.ceil(window_seconds - (now - start).total_seconds()))


def prune(window_seconds: int, now: datetime | None = None) -> int:
    """Delete counters of windows that ended; return how many."""
    cutoff = window_start(now or utcnow(), window_seconds)
    with write_transaction(db.session):
        pruned = db.session.execute(
            delete(RateLimitCounter).where(RateLimitCounter.window_started_at < cutoff)
        ).rowcount
    return pruned
