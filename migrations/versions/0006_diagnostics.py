"""diagnostic effects: the side-effect table of diagnostics.effects

Revision ID: 0006_diagnostics
Revises: 0005_asyncrequests
Create Date: 2026-11-29 11:00:00

"""
from alembic import op
import sqlalchemy as sa


# revision identifiers, used by Alembic.
revision = "0006_diagnostics"
down_revision = "0005_asyncrequests"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "diagnostic_effects",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("batch", sa.String(length=64), nullable=False),
        sa.Column("unit_key", sa.String(length=191), nullable=False),
        sa.Column("executions", sa.Integer(), nullable=False),
        sa.Column("first_at", sa.DateTime(), nullable=False),
        sa.Column("last_at", sa.DateTime(), nullable=False),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("batch", "unit_key", name="uq_diagnostic_effects_unit"),
    )


def downgrade():
    op.drop_table("diagnostic_effects")
