"""Slots not ended, found without reading a year of slots

The stuck sweep ends the slots whose body's worker is gone (killed, or its consumer
lost), and writes missed a slot handed back whose job never came again: it looks for
the rows still running or handed back, a handful among every slot the retention keeps.
A partial index holds those alone.

Revision ID: 0020_unended_slots
Revises: 0019_reason_fold
Create Date: 2026-12-03 23:45:00

"""
import sqlalchemy as sa
from alembic import op

revision = "0020_unended_slots"
down_revision = "0019_reason_fold"
branch_labels = None
depends_on = None

UNENDED = "outcome IS NULL OR outcome = 'handed_back'"


def upgrade():
    op.create_index(
        "ix_periodic_slots_unended",
        "periodic_slots",
        ["name", "claimed_at"],
        postgresql_where=sa.text(UNENDED),
        sqlite_where=sa.text(UNENDED),
    )


def downgrade():
    op.drop_index("ix_periodic_slots_unended", table_name="periodic_slots")
