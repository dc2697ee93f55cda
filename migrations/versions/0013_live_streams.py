"""A lease row per open live stream (the per-session cap of every web host)

Revision ID: 0013_live_streams
Revises: 0012_sec_scrub_stored_texts
Create Date: 2026-12-02 09:00:00

"""
from alembic import op
import sqlalchemy as sa


revision = "0013_live_streams"
down_revision = "0012_sec_scrub_stored_texts"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "live_streams",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("holder", sa.String(length=64), nullable=False),
        sa.Column("opened_at", sa.DateTime(), nullable=False),
        sa.Column("seen_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_live_streams_holder", "live_streams", ["holder"], unique=False)
    op.create_index("ix_live_streams_seen_at", "live_streams", ["seen_at"], unique=False)


def downgrade():
    op.drop_index("ix_live_streams_seen_at", table_name="live_streams")
    op.drop_index("ix_live_streams_holder", table_name="live_streams")
    op.drop_table("live_streams")
