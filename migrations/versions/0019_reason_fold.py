"""A unit's reason folded as its error group, stored beside the reason

Error groups, a group's units, a retry by reason and the comparison of two runs grouped
failed units by a fold computed on each read: a regular expression on every failed unit
(25,000 of a 100,000-unit run on each error-groups page). The fold is now written with
the reason; this pass folds the reasons stored before. Only rows holding a reason are
touched (failed, skipped or retrying units), and the column is added without a default,
so the table is not rewritten.
The downgrade drops the column and its folds: the next upgrade computes them again.

Revision ID: 0019_reason_fold
Revises: 0018_active_units_queued
Create Date: 2026-12-02 16:00:00

"""
import sqlalchemy as sa
from alembic import op

from taskrunner.ledger.reason_fold import fold_sql, normalize_reason

revision = "0019_reason_fold"
down_revision = "0018_active_units_queued"
branch_labels = None
depends_on = None

BATCH = 1000


def upgrade():
    op.add_column("task_run_units", sa.Column("reason_fold", sa.Text(), nullable=True))
    bind = op.get_bind()
    units = sa.table(
        "task_run_units", sa.column("id"), sa.column("last_error"), sa.column("reason_fold")
    )
    if bind.dialect.name == "postgresql":
        bind.execute(
            units.update()
            .where(units.c.last_error.is_not(None))
            .values(reason_fold=fold_sql(units.c.last_error))
        )
        return
    last = 0
    while True:
        rows = bind.execute(
            sa.select(units.c.id, units.c.last_error)
            .where(units.c.last_error.is_not(None), units.c.id > last)
            .order_by(units.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            return
        bind.execute(
            units.update()
            .where(units.c.id == sa.bindparam("row_id"))
            .values(reason_fold=sa.bindparam("fold")),
            [{"row_id": row_id, "fold": normalize_reason(reason)} for row_id, reason in rows],
        )
        last = rows[-1][0]


def downgrade():
    # SQLite drops an unindexed column in place (3.35+): no copy of the table.
    op.execute("ALTER TABLE task_run_units DROP COLUMN reason_fold")
