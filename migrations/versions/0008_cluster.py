"""cluster: live topics and periodic slot claims, shared by every host

Revision ID: 0008_cluster
Revises: 0007_ledger_edges
Create Date: 2026-12-01 09:00:00

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0008_cluster"
down_revision = "0007_ledger_edges"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "live_topics",
        sa.Column("topic", sa.String(length=191), nullable=False),
        sa.Column("version", sa.BigInteger(), nullable=False),
        sa.Column("updated_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("topic"),
    )
    op.create_table(
        "periodic_slots",
        sa.Column("name", sa.String(length=100), nullable=False),
        sa.Column("slot", sa.DateTime(), nullable=False),
        sa.Column("claimed_at", sa.DateTime(), nullable=False),
        sa.Column("claimed_by", sa.String(length=191), nullable=False),
        sa.PrimaryKeyConstraint("name", "slot"),
    )


def downgrade():
    op.drop_table("periodic_slots")
    op.drop_table("live_topics")
