"""Periodic tasks run once per schedule slot, whatever the number of schedulers.

Before a periodic task works, it inserts the row (task name, slot) into
``periodic_slots``; the primary key lets one insert through and every other
consumer that enqueued the same slot finds it taken and skips. Two hosts with
periodic tasks on (a standby started before the old host is gone, a host that came
back) therefore never sweep twice. The claim is in the ledger's database, so it
holds on every queue driver. A slot whose run crashed after its claim is not run
again: the next slot catches up (every periodic task is a catch-up sweep).

The rows say which host ran which slot; each claim forgets its task's rows older
than ``KEEP``.
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Iterable
from datetime import datetime, timedelta

from sqlalchemy import DateTime, Row, String, delete, select, union_all
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Mapped, mapped_column

from database import is_sqlite, utcnow, write_transaction
from extensions import db

logger = logging.getLogger(__name__)

KEEP = timedelta(days=7)


class PeriodicSlot(db.Model):
    __tablename__ = "periodic_slots"

    name: Mapped[str] = mapped_column(String(100), primary_key=True)
    slot: Mapped[datetime] = mapped_column(DateTime, primary_key=True)
    claimed_at: Mapped[datetime] = mapped_column(default=utcnow)
    claimed_by: Mapped[str] = mapped_column(String(191))


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def claim(name: str, slot: datetime) -> bool:
    """True for the one caller that may run ``name`` for ``slot``; False for every other."""
    dialect = sqlite if is_sqlite(db.session) else postgresql
    me = worker_identity()
    table = PeriodicSlot.__table__
    stmt = (
        dialect.insert(table)
        .values(name=name, slot=slot, claimed_at=utcnow(), claimed_by=me)
        .on_conflict_do_nothing(index_elements=["name", "slot"])
        .returning(table.c.name)
    )
    with write_transaction(db.session):
        won = db.session.execute(stmt).first() is not None
        if won:
            db.session.execute(
                delete(PeriodicSlot).where(
                    PeriodicSlot.name == name, PeriodicSlot.slot < slot - KEEP
                )
            )
            holder = me
        else:
            holder = db.session.execute(
                select(PeriodicSlot.claimed_by).where(
                    PeriodicSlot.name == name, PeriodicSlot.slot == slot
                )
            ).scalar_one_or_none()
    verdict = "runs here" if won else "skipped"
    logger.info("Periodic %s, slot %s: %s (claimed by %s)", name, slot.isoformat(), verdict, holder)
    return won


def claims(name: str, since: datetime | None = None) -> list[Row]:
    """The slots of ``name`` that ran, oldest first: ``slot``, ``claimed_at``, ``claimed_by``."""
    stmt = select(PeriodicSlot.slot, PeriodicSlot.claimed_at, PeriodicSlot.claimed_by).where(
        PeriodicSlot.name == name
    )
    if since is not None:
        stmt = stmt.where(PeriodicSlot.slot >= since)
    rows = list(db.session.execute(stmt.order_by(PeriodicSlot.slot)))
    db.session.rollback()
    return rows


def last_claims(names: Iterable[str]) -> dict[str, Row]:
    """The newest claimed slot of each of ``names`` that ran: ``name``, ``slot``, ``claimed_at``.

    One statement of one short look per name down the primary key (``name``, ``slot``),
    newest first: the table holds a week of every schedule's slots.
    """
    looks = [
        select(PeriodicSlot.name, PeriodicSlot.slot, PeriodicSlot.claimed_at)
        .where(PeriodicSlot.name == name)
        .order_by(PeriodicSlot.slot.desc())
        .limit(1)
        .subquery()
        .select()
        for name in names
    ]
    if not looks:
        return {}
    return {row.name: row for row in db.session.execute(union_all(*looks))}
