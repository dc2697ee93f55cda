"""Identifiers fold in an error group like numbers: the stored folds written again

A vendor's request id (a UUID), a pointer (0x…) or a digest in a reason differs on every
unit, and each made its own error group: ten thousand units failing alike were ten
thousand groups. The ledger now folds them (``taskrunner.ledger.reason_fold``); this pass
folds the reasons stored before again. Only a reason that may hold an identifier (eight
hex digits in a row, or 0x) is written. No column changes.
The downgrade writes those folds back as the earlier release folds them (numbers and
error references alone), so its error groups, retries by reason and comparisons match
the reasons it writes.

Revision ID: 0023_identifier_fold
Revises: 0022_alert_sending
Create Date: 2026-12-04 23:50:00

"""

import sqlalchemy as sa
from alembic import op

from taskrunner.ledger.reason_fold import (
    fold_numbers,
    fold_sql,
    may_hold_an_identifier,
    normalize_reason,
    numbers_sql,
)

revision = "0023_identifier_fold"
down_revision = "0022_alert_sending"
branch_labels = None
depends_on = None

BATCH = 1000


def upgrade():
    refold(normalize_reason, fold_sql)


def downgrade():
    refold(fold_numbers, numbers_sql)


def refold(fold, in_sql) -> None:
    bind = op.get_bind()
    units = sa.table(
        "task_run_units", sa.column("id"), sa.column("last_error"), sa.column("reason_fold")
    )
    if bind.dialect.name == "postgresql":
        bind.execute(
            units.update()
            .where(units.c.last_error.is_not(None), may_hold_an_identifier(units.c.last_error))
            .values(reason_fold=in_sql(units.c.last_error))
        )
        return
    last = 0
    while True:
        rows = bind.execute(
            sa.select(units.c.id, units.c.last_error, units.c.reason_fold)
            .where(units.c.last_error.is_not(None), units.c.id > last)
            .order_by(units.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        changed = [
            {"row_id": row_id, "fold": fold(reason)}
            for row_id, reason, stored in rows
            if fold(reason) != stored
        ]
        if changed:
            bind.execute(
                units.update()
                .where(units.c.id == sa.bindparam("row_id"))
                .values(reason_fold=sa.bindparam("fold")),
                changed,
            )
        last = rows[-1][0]
